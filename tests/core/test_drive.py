"""The one gate loop (`core.drive`) and the one record reader, driven without sockets.

The fake owners (`support.fakeowner`, the tests' one fake owner) answer `get` and `heads` as
a real owner does (records that do not fit a reply are listed as `omitted`; heads rows are
short when asked), so these tests show what every
runtime (the executor's runner, the workspace check) now does: follow omitted ids, send
short rows, map owner failures to the gate's reasons, verify every record once.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from planfence_net.core.answers import HeadsQuery, omitted_ids, verified_records, verifier
from planfence_net.core.decision import Decision
from planfence_net.core.drive import (
    FetchRound,
    HeadsRound,
    drive,
    drive_sync,
    failure_reason,
    heads_args,
    run_to_end,
)
from planfence_net.core.errors import (
    ConfigError,
    HandshakeError,
    LocalProtocolError,
    PlanfenceError,
    RecordError,
    RequestError,
    TransportError,
)
from planfence_net.core.gate import Action, Gate, GatePolicy, Replan
from planfence_net.core.records import Record
from planfence_net.core.roster import Agent, Roster
from support.fakeowner import ROSTER, VERIFY
from support.fakeowner import FakeOwners as Owners


def gate(
    owners: Owners,
    roots: tuple[Record, ...],
    deps: tuple[str, ...],
    policy: GatePolicy = GatePolicy(),
) -> Gate:
    """A gate with an empty local store: every record of the lineage is fetched."""
    return owners.gate(roots, deps, policy, lookup=lambda rid: None)


def no_replan(event: Replan) -> tuple[bytes, ...]:
    raise AssertionError("no drift expected")


def gets(owners: Owners) -> list[tuple[str, list[bytes]]]:
    return [(o, args["ids"]) for o, op, args in owners.requests if op == "get"]


def test_a_lineage_larger_than_one_reply_is_fetched_by_following_omitted_ids() -> None:
    owners = Owners(page=1)
    a, b = owners.publish("req/a"), owners.publish("req/b")
    summary = owners.publish("sum/s", a, b)
    plan = owners.publish("plan/p", summary, kind="plan")
    d = drive_sync(gate(owners, (plan,), ("req/a", "req/b")), owners.fetch, owners.query, no_replan)
    assert (d.outcome, d.reason, d.round_trips) == ("authorized", None, 4)
    assert d.frontier == {"req/a": a.id, "req/b": b.id}
    # reqs holds a and b but sends one per reply: it is asked again for the omitted one
    assert [ids for o, ids in gets(owners) if o == "reqs"] == [
        [plan.id],
        [summary.id],
        [a.id, b.id],
        [b.id],
    ]


def test_an_owner_that_omits_without_progress_is_not_asked_again() -> None:
    owners = Owners(page=0)  # lists every id as omitted, sends none
    plan = owners.publish("plan/p", owners.publish("req/a"), kind="plan")
    d = drive_sync(gate(owners, (plan,), ("req/a",)), owners.fetch, owners.query, no_replan)
    assert (d.outcome, d.reason) == ("blocked", "missing_lineage")
    assert gets(owners) == [(o, [plan.id]) for o in ROSTER.names]


def test_heads_requests_send_expect_alone_with_short_rows() -> None:
    owners = Owners()
    a = owners.publish("req/a")
    plan = owners.publish("plan/p", a, kind="plan")
    d = drive_sync(gate(owners, (plan,), ("req/a",)), owners.fetch, owners.query, no_replan)
    assert (d.outcome, d.heads) == ("authorized", {"req/a": (a.id, 1)})
    heads = [(o, args) for o, op, args in owners.requests if op == "heads"]
    assert heads == [("reqs", {"expect": {"req/a": a.id}, "short": True})]
    query = HeadsQuery(("req/a", "inv/b"), {"req/a": a.id})
    assert heads_args(query) == {
        "keys": ["req/a", "inv/b"],
        "expect": {"req/a": a.id},
        "short": True,
    }


def test_a_drift_calls_replan_once_with_the_verified_changed_record() -> None:
    owners = Owners()
    a = owners.publish("req/a")
    plan = owners.publish("plan/p", a, kind="plan")
    a2 = owners.publish("req/a")
    seen: list[Replan] = []

    def replan(event: Replan) -> list[bytes]:
        seen.append(event)
        return [owners.publish("plan/p", a2, kind="plan").id]

    policy = GatePolicy()
    d = drive_sync(gate(owners, (plan,), ("req/a",), policy), owners.fetch, owners.query, replan)
    assert (d.outcome, d.replanned, d.drift) == ("authorized", True, {"req/a": (a.id, a2.id)})
    assert [e.changed for e in seen] == [(a2,)]


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (None, "timeout"),
        (TransportError("reset"), "owner_unavailable"),
        (HandshakeError("not in roster"), "owner_unavailable"),
        (RequestError("worktree_gone", "no such folder"), "owner_unavailable"),
        (RequestError("not_owner", "nope"), "malformed_response"),
    ],
)
def test_an_owner_failure_maps_to_one_gate_reason(
    failure: PlanfenceError | None, reason: str
) -> None:
    owners = Owners()
    plan = owners.publish("plan/p", owners.publish("req/a"), kind="plan")
    fetched = owners.fetch((plan.id, *plan.parents))  # the lineage is at hand
    owners.failing["reqs"] = failure
    g = Gate(
        Action("ship", (plan.id,), ("req/a",)),
        owner_of=ROSTER.owner_of,
        verify=VERIFY,
        lookup={r.id: r for r in fetched.records}.get,
        clock=lambda: 0.0,
    )
    d = drive_sync(g, owners.fetch, owners.query, no_replan)
    assert (d.outcome, d.reason, d.detail) == (
        "blocked",
        reason,
        f"owner 'reqs': {reason.replace('_', ' ')}",
    )
    assert failure_reason(failure) == reason


def test_an_owner_that_failed_a_fetch_makes_a_missing_record_owner_unavailable() -> None:
    owners = Owners()
    plan = owners.publish("plan/p", owners.publish("req/a"), kind="plan")
    owners.failing["reqs"] = TransportError("reset")
    d = drive_sync(gate(owners, (plan,), ("req/a",)), owners.fetch, owners.query, no_replan)
    assert (d.outcome, d.reason) == ("blocked", "owner_unavailable")
    assert d.detail.endswith("no answer from reqs")


def test_the_traffic_moved_during_the_decision_is_added_to_it() -> None:
    owners = Owners()
    plan = owners.publish("plan/p", owners.publish("req/a"), kind="plan")
    moved = iter([(100, 10), (120, 20), (150, 30), (190, 60), (200, 90)])
    d = drive_sync(
        gate(owners, (plan,), ("req/a",)),
        owners.fetch,
        owners.query,
        no_replan,
        traffic=lambda: next(moved),
    )
    assert (d.outcome, d.bytes_sent, d.bytes_received) == ("authorized", 100, 80)


@pytest.mark.anyio
async def test_the_async_loop_decides_as_the_blocking_one() -> None:
    owners = Owners(page=1)
    plan = owners.publish("plan/p", owners.publish("req/a"), owners.publish("req/b"), kind="plan")

    async def fetch(ids: tuple[bytes, ...]) -> FetchRound:
        await anyio.lowlevel.checkpoint()  # a real runtime suspends here
        return owners.fetch(ids)

    async def query(queries: dict[str, HeadsQuery]) -> HeadsRound:
        await anyio.lowlevel.checkpoint()
        return owners.query(queries)

    async def replan(event: Replan) -> list[bytes]:
        raise AssertionError("no drift expected")

    d = await drive(gate(owners, (plan,), ("req/a", "req/b")), fetch, query, replan)
    blocking = drive_sync(
        gate(owners, (plan,), ("req/a", "req/b")), owners.fetch, owners.query, no_replan
    )
    assert (d.outcome, d.frontier, d.round_trips) == ("authorized", blocking.frontier, 3)
    assert blocking.outcome == "authorized"


class Suspend:
    def __await__(self) -> Generator[None, None, None]:
        yield


def test_a_blocking_drive_refuses_a_step_that_suspends() -> None:
    async def suspends() -> int:
        await Suspend()
        return 1

    async def returns() -> int:
        return 7

    assert run_to_end(returns()) == 7
    with pytest.raises(LocalProtocolError):
        run_to_end(suspends())


def test_a_fetch_round_settles_once_every_id_has_a_record() -> None:
    owners = Owners()
    a, b = owners.publish("req/a"), owners.publish("inv/b")
    fetch = FetchRound([a.id, b.id, a.id], ["reqs", "inv", "planner"], VERIFY)
    assert fetch.requests() == {o: {"ids": [a.id, b.id]} for o in ("reqs", "inv", "planner")}
    fetch.answered("reqs", {"records": [a.to_wire(), owners.publish("req/c").to_wire()]})
    assert not fetch.settled and fetch.unanswered == ("inv", "planner")
    fetch.answered("inv", {"records": [b.to_wire()]})
    assert fetch.settled and fetch.records == [a, b]
    assert fetch.unanswered == ("planner",)


def test_a_fetch_round_settles_when_every_owner_answered_or_failed() -> None:
    a = Owners().publish("req/a")
    fetch = FetchRound([a.id], ["reqs", "inv"], VERIFY)
    fetch.requests()
    fetch.answered("reqs", {"records": []})
    assert not fetch.settled
    fetch.answered("inv", TransportError("reset"))
    assert fetch.settled and fetch.records == [] and fetch.unanswered == ("inv",)
    assert fetch.request("inv") is None and fetch.requests() == {}


def test_a_fetch_round_asks_again_only_while_the_owner_makes_progress() -> None:
    owners = Owners()
    made = [owners.publish(f"req/{i}") for i in range(4)]
    ids, by_id = [r.id for r in made], {r.id: r for r in made}
    asked: list[list[bytes]] = []
    fetch = FetchRound(ids, ["reqs"], VERIFY)
    while (args := fetch.request("reqs")) is not None:
        asked.append(args["ids"])
        first, *rest = args["ids"]
        fetch.answered(
            "reqs", {"records": [by_id[first].to_wire()], **({"omitted": rest} if rest else {})}
        )
    assert asked == [ids, ids[1:], ids[2:], ids[3:]]
    assert fetch.records == made and fetch.settled and fetch.unanswered == ()

    asked.clear()
    stuck = FetchRound(ids, ["reqs"], VERIFY)
    while (args := stuck.request("reqs")) is not None:  # omits everything, forever
        asked.append(args["ids"])
        stuck.answered("reqs", {"records": [], "omitted": [*args["ids"], bytes(32)]})
    assert asked == [ids]  # and an id it was not asked for is never asked
    assert stuck.records == [] and stuck.settled and stuck.unanswered == ()
    assert omitted_ids({"omitted": [ids[2], b"x" * 32, ids[0]]}, ids) == [ids[0], ids[2]]
    assert omitted_ids({"omitted": "nope"}, ids) == []


def test_a_fetch_round_ignores_answers_it_did_not_ask_for() -> None:
    a = Owners().publish("req/a")
    fetch = FetchRound([a.id], ["reqs"], VERIFY)
    fetch.answered("reqs", {"records": [a.to_wire()]})  # no request in flight
    assert fetch.records == [] and fetch.unanswered == ("reqs",)


def forged(record: Record) -> Any:
    wire = list(record.to_wire())
    wire[-1] = bytes(64)  # the signature
    return wire


def test_verified_records_drops_or_raises_as_its_policy_says() -> None:
    owners = Owners()
    a, b = owners.publish("req/a"), owners.publish("inv/b")
    wires = [a.to_wire(), forged(b), "junk", b.to_wire()]
    assert verified_records(wires, VERIFY, bad="drop") == [a, b]
    assert verified_records("not a list", VERIFY, bad="drop") == []
    assert verified_records(None, VERIFY, bad="raise") == []
    with pytest.raises(RecordError) as info:
        verified_records(wires, VERIFY, bad="raise")
    assert info.value.what == "signature"
    with pytest.raises(RecordError, match="'records' is not a list"):
        verified_records({"x": 1}, VERIFY, bad="raise")


def test_a_record_whose_key_has_two_owners_is_dropped_or_raised() -> None:
    owners = Owners()
    a = owners.publish("req/a")
    agents = (*ROSTER.agents, Agent("twin", "127.0.0.1", 7499, bytes(32), ("req/*",)))
    verify = verifier(Roster("test", agents))
    assert verified_records([a.to_wire()], verify, bad="drop") == []
    with pytest.raises(ConfigError):
        verified_records([a.to_wire()], verify, bad="raise")


def test_a_strict_fetch_round_raises_for_a_bad_record() -> None:
    b = Owners().publish("inv/b")
    fetch = FetchRound([b.id], ["inv"], VERIFY, bad="raise")
    fetch.requests()
    with pytest.raises(RecordError):
        fetch.answered("inv", {"records": [forged(b)]})


def test_a_heads_round_reports_an_owner_without_an_answer_as_a_timeout() -> None:
    owners = Owners()
    a = owners.publish("req/a")
    plan = owners.publish("plan/p", a, kind="plan")
    g = gate(owners, (plan,), ("req/a",))
    fetched = owners.fetch((plan.id,))
    g.next_event()
    g.records_fetched(fetched.records)
    g.next_event()
    g.records_fetched(owners.fetch((a.id,)).records)
    event = g.next_event()
    heads = HeadsRound(event.queries)  # type: ignore[union-attr]
    heads.answered("nobody", {"heads": []})  # not queried: ignored
    heads.report(g)
    d = g.next_event()
    assert isinstance(d, Decision) and (d.reason, d.detail) == ("timeout", "owner 'reqs': timeout")
