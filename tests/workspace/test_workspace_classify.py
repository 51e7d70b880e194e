"""The drift classifier and the check machine, without sockets: bodies in, lines out."""

from __future__ import annotations

from typing import Any

import pytest
from nacl.signing import SigningKey

from planfence_net.core.decision import Decision
from planfence_net.core.errors import LocalProtocolError
from planfence_net.core.records import Record, make_record
from planfence_net.workspace.model.classify import (
    CRITICAL,
    INFORMATIONAL,
    NONE,
    RELEVANT,
    TrustedState,
    classify,
    summary,
)
from planfence_net.workspace.model.machine import (
    NO_PLAN,
    UNDECIDED,
    AskPlan,
    CheckMachine,
    RunGate,
    Verdict,
    trusted_state,
)

ROLES = {
    "ws:repo": ("repo",),
    "ws:branch": ("branch",),
    "ws:head": ("head",),
    "ws:status": ("status",),
    "ws:file/auth.ts": ("read", "input"),
    "ws:file/src/api.ts": ("target", "input"),
    "ws:file/package-lock.json": ("lockfile",),
    "ws:evidence/abc": ("evidence",),
}
EVIDENCE = {
    "ws:evidence/abc": {
        "command": "npm test",
        "exit": 0,
        "inputs": ["ws:file/auth.ts", "ws:file/src/api.ts"],
    }
}


def state(trust: int = 1, roles: dict[str, tuple[str, ...]] = ROLES) -> TrustedState:
    return TrustedState("p", trust, roles, EVIDENCE)


def f(h: str) -> dict[str, Any]:
    return {"hash": f"git:{h}", "size": 1, "mode": "100644"}


def test_nothing_changed_is_none() -> None:
    report = classify(state(), {})
    assert (report.level, report.lines, report.blocks) == (NONE, (), False)
    assert summary(report) == ["No workspace drift since the trusted state."]


def test_every_class_in_one_drift() -> None:
    report = classify(
        state(),
        {
            "ws:branch": ({"branch": "feature/auth"}, {"branch": None}),
            "ws:head": ({"head": "a17c92f00"}, {"head": "d09b34a11"}),
            "ws:file/src/api.ts": (f("1"), {"missing": True}),
            "ws:file/auth.ts": (f("2"), f("3")),
            "ws:file/package-lock.json": (f("4"), f("5")),
            "ws:status": ({"changed": []}, {"changed": [["README.md", 3, 9], ["auth.ts", 1, 1]]}),
        },
    )
    assert report.lines == (
        "- Branch changed: feature/auth -> (none)",
        "- HEAD changed: a17c92f -> d09b34a",
        "- 1 file the plan will modify changed: src/api.ts (deleted)",
        "- 1 previously inspected file changed: auth.ts",
        "- package-lock.json changed",
        "- Previous test result is now stale: `npm test` ran against auth.ts, src/api.ts (deleted)",
        "- Unrelated tracked files changed (informational): README.md",
    )
    assert report.level == CRITICAL and report.blocks
    assert report.reread == ("src/api.ts", "auth.ts", "package-lock.json")


@pytest.mark.parametrize(
    ("drift", "level"),
    [
        ({"ws:status": ({"changed": []}, {"changed": [["x.md", 1, 1]]})}, INFORMATIONAL),
        ({"ws:file/package-lock.json": (f("1"), f("2"))}, RELEVANT),
        ({"ws:repo": ({"git": "/a/.git"}, {"git": "/b/.git"})}, CRITICAL),
        ({"ws:file/auth.ts": (f("1"), f("1"))}, NONE),  # edited and restored
    ],
)
def test_one_change_one_class(drift: dict[str, tuple[Any, Any]], level: str) -> None:
    assert classify(state(), drift).level == level


def test_a_second_blocking_drift_after_a_replan_is_changed_again() -> None:
    drift = {"ws:file/auth.ts": (f("1"), f("2"))}
    assert classify(state(trust=2), drift).changed_again
    assert not classify(state(trust=1), drift).changed_again
    status = {"ws:status": ({"changed": []}, {"changed": [["x.md", 1, 1]]})}
    assert not classify(state(trust=2), status).changed_again  # informational never is


def test_files_of_several_worktrees_are_named_with_their_agent() -> None:
    roles = {
        "api:file/a.ts": ("read",),
        "web:file/b.tsx": ("target",),
        "api:branch": ("branch",),
        "web:branch": ("branch",),
    }
    report = classify(
        TrustedState("p", 1, roles, {}),
        {"web:file/b.tsx": (f("1"), f("2")), "web:branch": ({"branch": "w"}, {"branch": "x"})},
    )
    assert report.lines == (
        "- Branch changed (web): w -> x",
        "- 1 file the plan will modify changed: web:b.tsx",
    )


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ([], "body has no 'declaration' map"),
        ({"declaration": {"k": ["bogus"]}, "trust": 1}, "bad declaration for 'k': ['bogus']"),
        ({"declaration": {}, "trust": 0}, "'trust' is not a positive integer"),
    ],
)
def test_a_malformed_plan_body_is_refused(body: Any, error: str) -> None:
    with pytest.raises(ValueError) as caught:
        trusted_state("p", body)
    assert str(caught.value) == error


# -- the check machine ----------------------------------------------------------------------

KEY = SigningKey(b"\x01" * 32)


def record(
    key: str, seq: int, body: Any, parents: tuple[bytes, ...] = (), kind: str = "fact"
) -> Record:
    return make_record(KEY, key=key, owner="ws", seq=seq, parents=parents, kind=kind, body=body)


def machine(records: dict[bytes, Record]) -> CheckMachine:
    return CheckMachine(
        "p",
        owner_of=lambda key: "ws",
        verify=lambda record: None,
        lookup=records.get,
        informational=False,
    )


def decision(
    outcome: str,
    reason: str | None,
    drift: dict[str, tuple[bytes, bytes]],
    frontier: dict[str, bytes],
) -> Decision:
    return Decision("a", outcome, reason, "detail", bool(drift), frontier, {}, drift, 2, 0, 0, 0.0)


def test_the_machine_asks_for_the_plan_then_runs_the_gate_then_reports() -> None:
    old = record("ws:file/a.ts", 1, f("1"))
    status = record("ws:status", 2, {"changed": []})
    plan = record(
        "plan/p",
        3,
        {"declaration": {"ws:file/a.ts": ["target"], "ws:status": ["status"]}, "trust": 1},
        (old.id, status.id),
        "plan",
    )
    new = record("ws:file/a.ts", 4, f("2"))
    records = {old.id: old}
    m = machine(records)
    ask = m.next_event()
    assert isinstance(ask, AskPlan) and ask.query.expect == {"plan/p": NO_PLAN}
    m.plan_answered({"heads": [["plan/p", plan.id, 3]], "records": [plan.to_wire()]})
    run = m.next_event()
    assert isinstance(run, RunGate)
    assert (run.action.roots, run.action.deps) == ((plan.id,), ("ws:file/a.ts",))
    m.gate_finished(
        decision(
            "blocked", "changed_again", {"ws:file/a.ts": (old.id, new.id)}, {"ws:file/a.ts": old.id}
        ),
        [new],
    )
    verdict = m.next_event()
    assert isinstance(verdict, Verdict) and verdict.exit_code == 2
    assert verdict.text() == [
        "Workspace drift detected since the previous trusted state:",
        "- 1 file the plan will modify changed: a.ts",
        "Drift class: critical",
    ]
    with pytest.raises(LocalProtocolError):
        m.plan_failed("timeout")


@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        (
            {"heads": [["plan/p", None, 0]], "records": []},
            "no trusted state for plan 'p': run `planfence workspace trust p ...` first",
        ),
        ({"heads": []}, "owner 'ws': requested keys not answered: plan/p"),
    ],
)
def test_a_missing_or_malformed_plan_is_undecided(answer: Any, detail: str) -> None:
    m = machine({})
    m.next_event()
    m.plan_answered(answer)
    verdict = m.next_event()
    assert isinstance(verdict, Verdict)
    assert (verdict.level, verdict.exit_code, verdict.detail) == (UNDECIDED, 3, detail)


def test_an_unreachable_owner_or_a_gate_block_is_undecided() -> None:
    m = machine({})
    m.next_event()
    m.plan_failed("owner_unavailable")
    assert m.next_event() == Verdict(
        "p", UNDECIDED, (), (), False, 0, "owner_unavailable", "owner 'ws': owner unavailable", None
    )
    plan = record("plan/p", 1, {"declaration": {"ws:head": ["head"]}, "trust": 1}, (), "plan")
    m = machine({})
    m.next_event()
    m.plan_answered({"heads": [["plan/p", plan.id, 1]], "records": [plan.to_wire()]})
    m.gate_finished(decision("blocked", "missing_lineage", {}, {}), [])
    verdict = m.next_event()
    assert isinstance(verdict, Verdict)
    assert (verdict.reason, verdict.exit_code) == ("missing_lineage", 3)


def test_a_known_plan_takes_one_round_and_a_retrusted_one_is_asked_for() -> None:
    head = record("ws:head", 1, {"head": "abc"})
    plan = record(
        "plan/p", 2, {"declaration": {"ws:head": ["head"]}, "trust": 1}, (head.id,), "plan"
    )
    m = CheckMachine(
        "p",
        owner_of=lambda key: "ws",
        verify=lambda r: None,
        lookup={head.id: head}.get,
        known=plan,
    )
    run = m.next_event()
    assert isinstance(run, RunGate) and run.also == ("plan/p",)
    m.gate_finished(
        Decision(
            "a",
            "authorized",
            None,
            "ok",
            False,
            {"ws:head": head.id},
            {"ws:head": (head.id, 1), "plan/p": (plan.id, 2)},
            {},
            1,
            0,
            0,
            0.0,
        ),
        [],
    )
    verdict = m.next_event()
    assert isinstance(verdict, Verdict) and (verdict.level, verdict.plan_id) == ("none", plan.id)

    m = CheckMachine(
        "p",
        owner_of=lambda key: "ws",
        verify=lambda r: None,
        lookup={head.id: head}.get,
        known=plan,
    )
    m.next_event()
    m.gate_finished(
        Decision(
            "a",
            "authorized",
            None,
            "ok",
            False,
            {"ws:head": head.id},
            {"ws:head": (head.id, 1), "plan/p": (b"\7" * 32, 3)},
            {},
            1,
            0,
            0,
            0.0,
        ),
        [],
    )
    assert isinstance(m.next_event(), AskPlan)  # the plan was trusted again since


def test_advancing_moves_only_the_touched_targets_and_drops_their_evidence() -> None:
    from planfence_net.workspace.plans.advance import advanced

    target, read = record("ws:file/a.ts", 1, f("1")), record("ws:file/b.ts", 2, f("2"))
    evidence = record(
        "ws:evidence/e", 3, {"command": "t", "exit": 0, "inputs": ["ws:file/a.ts"]}, (target.id,)
    )
    plan = record(
        "plan/p",
        4,
        {
            "declaration": {
                "ws:file/a.ts": ["target", "input"],
                "ws:file/b.ts": ["read"],
                "ws:evidence/e": ["evidence"],
            },
            "trust": 2,
        },
        (target.id, read.id, evidence.id),
        "plan",
    )
    edited = record("ws:file/a.ts", 5, f("3"))
    lineage = {r.id: r for r in (target, read, evidence)}
    body, parents = advanced(plan, lineage, {"ws:file/a.ts": edited}, now=12.5)
    assert parents == [edited.id, read.id]
    assert body == {
        "declaration": {"ws:file/a.ts": ["target", "input"], "ws:file/b.ts": ["read"]},
        "trust": 2,
        "previous": plan.id,
        "time": 12.5,
        "advanced": 1,
    }
    with pytest.raises(ValueError, match="not declared targets"):
        advanced(plan, lineage, {"ws:file/b.ts": edited}, now=0)
    with pytest.raises(ValueError, match="is not at hand"):
        advanced(plan, {}, {"ws:file/a.ts": edited}, now=0)
