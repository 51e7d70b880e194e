"""The workspace check as a sans-IO machine, driven like the gate (`planfence_net.core.gate`).

    AskPlan   ask the plan key's owner for its head, with the record inline; then
              `plan_answered(result)` or `plan_failed(reason)`
    RunGate   validate the action (roots: the plan record, deps: its declared keys) with the
              gate runner; a drift's replan hook returns the same roots, so a drift that
              persists ends `changed_again` and carries the first round's drift. Then
              `gate_finished(decision, changed_records)`
    Verdict   final; `next_event()` keeps returning it

Given the plan record from an earlier check (`known`, verified by the caller), the machine
starts at RunGate and the gate's heads round also asks for the plan key's head: when that is
still the known record, the check took one round trip; otherwise the machine goes back to
AskPlan and checks the current plan.

Nothing here does I/O: the loop in `check.py` moves the bytes. Everything an owner sends is
checked here; a bad answer gives an undecided verdict (exit 3), never an exception.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ...core.answers import HeadsQuery, Malformed, check_answer
from ...core.decision import Decision
from ...core.errors import LocalProtocolError
from ...core.gate import Action
from ...core.records import ID_LEN, Record
from .classify import CRITICAL, NONE, DriftReport, TrustedState, classify, summary
from .facts import HEAD, ROLES, file_of, plan_key, split_key
from .writers import Drifted, Writer, block_lines

UNDECIDED = "undecided"
NO_PLAN = b"\0" * ID_LEN  # an id no record has: the owner answers with the head inline


@dataclass(frozen=True, slots=True)
class AskPlan:
    owner: str
    query: HeadsQuery


@dataclass(frozen=True, slots=True)
class RunGate:
    """Run the gate for `action`; also fetch the heads of `also` (never compared)."""

    action: Action
    also: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome: a drift report, or `undecided` with the reason the check could not
    decide. `exit_code` is 0 (none, informational), 2 (relevant, critical), 3 (undecided).
    `again`: the drifted files that were already re-read once (`DriftReport.again`);
    `drifted`: the declared files and HEADs that drifted, with the bodies the plan read and
    the current ones; `writers`: who changed them (`plans.writers` fills it in on a block)."""

    plan: str
    level: str
    lines: tuple[str, ...]
    reread: tuple[str, ...]
    changed_again: bool
    trust: int
    reason: str | None
    detail: str
    plan_id: bytes | None
    again: tuple[str, ...] = ()
    drifted: tuple[Drifted, ...] = ()
    writers: tuple[Writer, ...] = ()

    @property
    def exit_code(self) -> int:
        return 3 if self.level == UNDECIDED else 2 if self.level in ("relevant", CRITICAL) else 0

    def text(self) -> list[str]:
        """What `workspace check` prints."""
        if self.level == UNDECIDED:
            return [f"Cannot decide whether plan {self.plan!r} is still valid: {self.detail}"]
        out = list(self.lines) + self.writer_lines()
        if self.level != NONE:
            tail = (
                "; it changed again after a replan: stop and report" if self.changed_again else ""
            )
            out.append(f"Drift class: {self.level}{tail}")
        return out

    def writer_lines(self) -> list[str]:
        """Who changed what, as a block says it (`model.writers.block_lines`)."""
        return block_lines(self.writers, len(self.drifted) - len(self.writers))

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "plan_id": self.plan_id.hex() if self.plan_id else None,
            "class": self.level,
            "exit_code": self.exit_code,
            "lines": list(self.lines),
            "reread": list(self.reread),
            "changed_again": self.changed_again,
            "trust": self.trust,
            "reason": self.reason,
            "detail": self.detail,
            "writers": [w.to_json() for w in self.writers],
        }


Event = AskPlan | RunGate | Verdict


class CheckMachine:
    """Check plan `plan` against its owners. `owner_of` and `verify` are the roster's;
    `lookup(id)` returns records the gate fetched (for the bodies at trust time). With
    `informational=False` the git-status keys are not checked: they never block."""

    def __init__(
        self,
        plan: str,
        *,
        owner_of: Callable[[str], str | None],
        verify: Callable[[Record], None],
        lookup: Callable[[bytes], Record | None],
        informational: bool = True,
        known: Record | None = None,
    ) -> None:
        self.plan = plan
        self.informational = informational
        self._known = known
        self.key = plan_key(plan)
        self._owner_of = owner_of
        self._verify = verify
        self._lookup = lookup
        self._query = HeadsQuery((self.key,), {self.key: NO_PLAN})
        self._event: Event | None = None
        self.record: Record | None = None
        self.state: TrustedState | None = None

    def next_event(self) -> Event:
        """What the loop must do next, or the final Verdict."""
        if self._event is None:
            known, self._known = self._known, None
            try:
                if known is not None and known.key == self.key:
                    self.state, self.record = trusted_state(self.plan, known.body), known
                    return self._run_gate(also=(self.key,))
            except ValueError:
                pass  # an unreadable cached plan: ask for the current one
            owner = self._owner_of(self.key)
            if owner is None:
                return self._undecided("unknown_owner", f"no roster agent owns {self.key!r}")
            self._event = AskPlan(owner, self._query)
        return self._event

    def plan_answered(self, result: object) -> None:
        """Feed the owner's heads answer for the plan key (checked here, never raised)."""
        event = self._expect(AskPlan, "plan_answered")
        if isinstance(result, dict) and result.get("heads") == [[self.key, None, 0]]:
            self._undecided(
                "no_plan",
                f"no trusted state for plan {self.plan!r}: run "
                f"`planfence workspace trust {self.plan} ...` first",
            )
            return
        try:
            heads, inline = check_answer(event.owner, self._query, result, {}, self._verify)
        except Malformed as exc:
            self._undecided("malformed_response", f"owner {event.owner!r}: {exc}")
            return
        if self._read_plan(inline[self.key]):
            self._run_gate()

    def _read_plan(self, record: Record) -> bool:
        self.record = record
        try:
            self.state = trusted_state(self.plan, record.body)
        except ValueError as exc:
            self._undecided("malformed_plan", f"plan record {self.key!r}: {exc}")
            return False
        return True

    def _run_gate(self, also: tuple[str, ...] = ()) -> RunGate:
        assert self.state is not None and self.record is not None
        deps = tuple(
            k for k, roles in self.state.roles.items() if self.informational or roles != ("status",)
        )
        self._event = RunGate(Action(f"workspace check {self.plan}", (self.record.id,), deps), also)
        return self._event

    def plan_failed(self, reason: str) -> None:
        """The plan's owner gave no usable answer (`reason`: owner_unavailable, timeout, or
        the code of its typed error)."""
        event = self._expect(AskPlan, "plan_failed")
        self._undecided(reason, f"owner {event.owner!r}: {reason.replace('_', ' ')}")

    def gate_finished(self, decision: Decision, changed: Iterable[Record]) -> None:
        """Feed the gate's decision and the changed records its replan hook received."""
        event = self._expect(RunGate, "gate_finished")
        assert self.state is not None and self.record is not None
        if event.also and decision.heads.get(self.key, (None, 0))[0] != self.record.id:
            owner = self._owner_of(self.key)  # re-trusted since (or unknown): ask for it
            self.record = self.state = None
            self._event = (
                AskPlan(owner, self._query)
                if owner
                else self._undecided("unknown_owner", f"no roster agent owns {self.key!r}")
            )
            return
        if decision.authorized:
            self._report(classify(self.state, {}), decision)
            return
        if decision.reason != "changed_again":
            self._undecided(decision.reason or "blocked", decision.detail)
            return
        evidence = {}
        for key, roles in self.state.roles.items():
            record = self._lookup(decision.frontier.get(key, NO_PLAN))
            if "evidence" in roles and record is not None and isinstance(record.body, dict):
                evidence[key] = record.body
        self.state = dataclasses.replace(self.state, evidence=evidence)
        new = {r.key: r for r in changed}
        drift: dict[str, tuple[Any, Any]] = {}
        for key, (old_id, new_id) in decision.drift.items():
            old = self._lookup(old_id)
            if old is None or key not in new or new[key].id != new_id:
                self._undecided("missing_lineage", f"record of {key!r} not at hand")
                return
            drift[key] = (old.body, new[key].body)
        self._report(classify(self.state, drift), decision, drifted_keys(self.state, drift))

    def _report(
        self, report: DriftReport, decision: Decision, drifted: tuple[Drifted, ...] = ()
    ) -> None:
        assert self.state is not None and self.record is not None
        self._event = Verdict(
            self.plan,
            report.level,
            tuple(summary(report)),
            report.reread,
            report.changed_again,
            self.state.trust,
            "changed_again" if report.changed_again else None,
            decision.detail,
            self.record.id,
            report.again,
            drifted if report.blocks else (),
        )

    def _undecided(self, reason: str, detail: str) -> Verdict:
        trust = self.state.trust if self.state else 0
        self._event = Verdict(
            self.plan,
            UNDECIDED,
            (),
            (),
            False,
            trust,
            reason,
            detail,
            self.record.id if self.record else None,
        )
        return self._event

    def _expect(self, kind: type[Any], method: str) -> Any:
        if not isinstance(self._event, kind):
            raise LocalProtocolError(
                f"{method}() called while the machine waits for {type(self._event).__name__}"
            )
        return self._event


def drifted_keys(state: TrustedState, drift: dict[str, tuple[Any, Any]]) -> tuple[Drifted, ...]:
    """The declared files (read, written, a lockfile, a test's input) and HEADs among
    `drift` whose bodies differ, HEADs first, then in key order: what a block says who
    changed."""
    return tuple(
        Drifted(key, old, new)
        for key, (old, new) in sorted(
            drift.items(), key=lambda kv: (file_of(kv[0]) is not None, kv[0])
        )
        if old != new
        and key in state.roles
        and (file_of(key) is not None or (p := split_key(key)) is not None and p[1] == HEAD)
    )


def trusted_state(plan: str, body: Any) -> TrustedState:
    """Read a plan record's body; raises ValueError naming what is wrong with it."""
    if not isinstance(body, dict) or not isinstance(body.get("declaration"), dict):
        raise ValueError("body has no 'declaration' map")
    roles: dict[str, tuple[str, ...]] = {}
    for key, declared in body["declaration"].items():
        if (
            not isinstance(key, str)
            or not isinstance(declared, list)
            or not declared
            or not all(r in ROLES for r in declared)
        ):
            raise ValueError(f"bad declaration for {key!r}: {declared!r}")
        roles[key] = tuple(declared)
    trust = body.get("trust")
    if not isinstance(trust, int) or isinstance(trust, bool) or trust < 1:
        raise ValueError("'trust' is not a positive integer")
    return TrustedState(plan, trust, roles, {}, _keys(body, "reread"), _keys(body, "inherited"))


def _keys(body: dict[str, Any], name: str) -> frozenset[str]:
    """The keys listed under `name` in a plan body (an automatic plan's), else none."""
    found = body.get(name)
    return (
        frozenset(k for k in found if isinstance(k, str))
        if isinstance(found, list)
        else frozenset()
    )
