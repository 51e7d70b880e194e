"""The thin I/O loop of the workspace check: runs `CheckMachine`, and the gate inside it,
against live owners over blocking sessions (`wire`), so a fresh process decides quickly.

Each event becomes at most one request per owner, all owners concurrently, under one deadline
per step, exactly as the executor's gate runner does; only verified answers count.
"""

from __future__ import annotations

import dataclasses
import functools
import time

from ..answers import verified_records, verify_record
from ..errors import ConfigError, RequestError, TransportError
from ..gate import Action, Decision, FetchRecords, Gate, QueryHeads, Replan
from ..identity import Identity
from ..lineage import FetchRound
from ..records import Record
from ..roster import Roster
from .machine import UNDECIDED, AskPlan, CheckMachine, RunGate, Verdict
from .wire import Outcome, SyncSessions

DEADLINE = 5.0


def run_check(roster: Roster, identity: Identity, plan: str, *,
              addresses: dict[str, tuple[str, int]] | None = None, deadline: float = DEADLINE,
              informational: bool = True) -> Verdict:
    """Check plan `plan` as `identity`; owner failures give an undecided verdict, never an
    exception. `informational=False` skips the git-status keys (they never block)."""
    sessions = SyncSessions(roster, identity, addresses)
    records: dict[bytes, Record] = {}
    verify = functools.partial(verify_record, roster)
    machine = CheckMachine(plan, owner_of=roster.owner_of, verify=verify, lookup=records.get,
                           informational=informational)
    try:
        while True:
            event = machine.next_event()
            if isinstance(event, Verdict):
                return event
            until = time.monotonic() + deadline
            if isinstance(event, AskPlan):
                args = {"keys": list(event.query.keys), "expect": dict(event.query.expect)}
                outcome = sessions.round({event.owner: ("heads", args)}, until).get(event.owner)
                if isinstance(outcome, dict):
                    machine.plan_answered(outcome)
                    records.update((r.id, r) for r in [machine.record] if r is not None)
                else:
                    machine.plan_failed(_failure(outcome, until))
            elif isinstance(event, RunGate):
                decision, changed, why = _run_gate(event.action, roster, sessions, records,
                                                   verify, deadline)
                machine.gate_finished(decision, changed)
                verdict = machine.next_event()
                if isinstance(verdict, Verdict) and verdict.level == UNDECIDED and why:
                    return dataclasses.replace(verdict, detail=f"{verdict.detail} ({why})")
    finally:
        sessions.close()


def _run_gate(action: Action, roster: Roster, sessions: SyncSessions,
              records: dict[bytes, Record], verify: functools.partial[None],
              deadline: float) -> tuple[Decision, list[Record], str]:
    """Drive the gate to its decision; a drift's replan returns the same roots (the check
    reports, it does not replan). Returns the decision, the changed records seen, and the
    last typed error an owner answered a heads query with (e.g. its worktree is gone)."""
    gate = Gate(action, owner_of=roster.owner_of, verify=verify, lookup=records.get,
                clock=time.perf_counter)
    changed: list[Record] = []
    why = ""
    while True:
        event = gate.next_event()
        if isinstance(event, Decision):
            return event, changed, why
        until = time.monotonic() + deadline
        if isinstance(event, FetchRecords):
            fetch = FetchRound(event.ids, _holders(roster, action))
            outcomes = sessions.round({owner: ("get", {"ids": list(event.ids)})
                                       for owner in _holders(roster, action)}, until)
            for owner in _holders(roster, action):
                outcome = outcomes.get(owner)
                if isinstance(outcome, dict):
                    fetch.answered(owner, verified_records(roster, outcome))
                else:
                    fetch.failed(owner)
            records.update((r.id, r) for r in fetch.records)
            gate.records_fetched(fetch.records, fetch.unanswered)
        elif isinstance(event, QueryHeads):
            outcomes = sessions.round({owner: ("heads", {"keys": list(q.keys),
                                                         "expect": dict(q.expect)})
                                       for owner, q in event.queries.items()}, until)
            for owner in event.queries:
                outcome = outcomes.get(owner)
                if isinstance(outcome, dict):
                    gate.heads_answered(owner, outcome)
                else:
                    why = str(outcome) if isinstance(outcome, RequestError) else why
                    gate.heads_failed(owner, _failure(outcome, until))
        elif isinstance(event, Replan):
            changed.extend(event.changed)
            records.update((r.id, r) for r in event.changed)
            gate.replanned(action.roots)


def _holders(roster: Roster, action: Action) -> list[str]:
    """Owners that may hold the plan's lineage: the owners of its declared keys. (An id does
    not name its owner; a parent none of them has blocks, as it should.)"""
    owners: dict[str, None] = {}
    for key in action.deps:
        try:
            owner = roster.owner_of(key)
        except ConfigError:
            continue
        if owner is not None:
            owners[owner] = None
    return list(owners)


def _failure(outcome: Outcome | None, until: float) -> str:
    """The gate's reason for an owner that gave no result."""
    if outcome is None or (isinstance(outcome, TransportError) and time.monotonic() >= until):
        return "timeout"
    if isinstance(outcome, TransportError):
        return "owner_unavailable"
    if isinstance(outcome, RequestError) and outcome.code == "worktree_gone":
        return "owner_unavailable"  # it cannot answer for its worktree (the reason says why)
    return "malformed_response"
