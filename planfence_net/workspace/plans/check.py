"""The thin I/O loop of the workspace check: runs `CheckMachine`, and the gate inside it,
against live owners over blocking sessions (`wire`), so a fresh process decides quickly.

The gate is driven by `blocking.drive_gate` (`core.drive`, the loop the executor's gate
runner uses, with blocking I/O): each event becomes at most one request per owner (more only
for records an owner omitted), all owners concurrently, and the whole check ends by one
deadline, `timeout` seconds after it starts; only verified answers count.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from ...core.answers import Verify, verifier
from ...core.decision import Decision
from ...core.drive import failure_reason
from ...core.errors import ConfigError
from ...core.gate import Action, GatePolicy, Replan
from ...core.identity import Identity
from ...core.records import Record
from ...core.roster import Roster
from ...core.timeouts import DEFAULT_TIMEOUT
from ...executor.syncrunner import drive_gate, in_time
from ...net.syncclient import SyncSessions
from ..model.facts import plan_key
from ..model.machine import UNDECIDED, AskPlan, CheckMachine, RunGate, Verdict
from ..place.cache import load_records, save_records


def run_check(
    roster: Roster,
    identity: Identity,
    plan: str,
    *,
    addresses: dict[str, tuple[str, int]] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    informational: bool = True,
    cache: Path | None = None,
) -> Verdict:
    """Check plan `plan` as `identity`; owner failures give an undecided verdict, never an
    exception, within `timeout` seconds. `informational=False` skips the git-status keys (they never block).

    `cache` is a file keeping the plan record and its lineage between checks (records are
    immutable, and each is verified again when read), so the check of a plan checked before
    takes one round trip; it is rewritten whenever the check had to fetch records.
    """
    sessions = SyncSessions(roster, identity, addresses)
    verify = verifier(roster)
    deadline = time.monotonic() + timeout
    records = load_records(cache, roster) if cache is not None else {}
    known = [r for r in records.values() if r.key == plan_key(plan)]
    machine = CheckMachine(
        plan,
        owner_of=roster.owner_of,
        verify=verify,
        lookup=records.get,
        informational=informational,
        known=max(known, key=lambda r: r.seq) if known else None,
    )
    cached = set(records)
    try:
        verdict = _drive(machine, roster, sessions, records, verify, deadline)
    finally:
        sessions.close()
    if cache is not None and machine.record is not None and set(records) != cached:
        save_records(cache, _lineage(machine.record, records))
    return verdict


def _lineage(root: Record, records: dict[bytes, Record]) -> list[Record]:
    """`root` and the records at hand reachable from it: what the next check needs (the
    cache never grows past one plan's lineage)."""
    found, todo = {root.id: root}, list(root.parents)
    while todo:
        record = records.get(todo.pop())
        if record is not None and record.id not in found:
            found[record.id] = record
            todo.extend(record.parents)
    return list(found.values())


def _drive(
    machine: CheckMachine,
    roster: Roster,
    sessions: SyncSessions,
    records: dict[bytes, Record],
    verify: Verify,
    deadline: float,
) -> Verdict:
    while True:
        event = machine.next_event()
        if isinstance(event, Verdict):
            return event
        if isinstance(event, AskPlan):
            args = {"keys": list(event.query.keys), "expect": dict(event.query.expect)}
            outcome = sessions.round({event.owner: ("heads", args)}, deadline).get(event.owner)
            if isinstance(outcome, dict):
                machine.plan_answered(outcome)
                if machine.record is not None:
                    records[machine.record.id] = machine.record
            else:
                machine.plan_failed(failure_reason(in_time(outcome, deadline)))
        elif isinstance(event, RunGate):
            decision, changed, why = _run_gate(
                event, roster, sessions, records, verify, deadline, machine.key
            )
            machine.gate_finished(decision, changed)
            verdict = machine.next_event()
            if isinstance(verdict, Verdict) and verdict.level == UNDECIDED and why:
                return dataclasses.replace(verdict, detail=f"{verdict.detail} ({why})")


def _run_gate(
    event: RunGate,
    roster: Roster,
    sessions: SyncSessions,
    records: dict[bytes, Record],
    verify: Verify,
    deadline: float,
    pkey: str,
) -> tuple[Decision, list[Record], str]:
    """Drive the gate to its decision (`blocking.drive_gate`); a drift's replan returns the
    same roots (the check reports, it does not replan). Returns the decision, the changed
    records seen, and the last typed error an owner answered a heads query with (e.g. its
    worktree is gone)."""
    action = event.action
    changed: list[Record] = []

    def replan(step: Replan) -> tuple[bytes, ...]:
        changed.extend(step.changed)
        return action.roots

    decision, why = drive_gate(
        action,
        roster,
        sessions,
        records,
        verify,
        deadline,
        holders=_holders(roster, action, pkey),
        replan=replan,
        policy=GatePolicy(query_keys=event.also or None),
    )
    return decision, changed, why


def _holders(roster: Roster, action: Action, pkey: str) -> list[str]:
    """Owners that may hold the plan's lineage: the owners of its declared keys, and of the
    plan key (a subagent's plan links its parent's plan record). (An id does not name its
    owner; a parent none of them has blocks, as it should.)"""
    owners: dict[str, None] = {}
    for key in [*action.deps, pkey]:
        try:
            owner = roster.owner_of(key)
        except ConfigError:
            continue
        if owner is not None:
            owners[owner] = None
    return list(owners)
