"""The thin I/O loop of the workspace check: runs `CheckMachine`, and the gate inside it,
against live owners over blocking sessions (`wire`), so a fresh process decides quickly.

Each event becomes at most one request per owner, all owners concurrently, under one deadline
per step, exactly as the executor's gate runner does; only verified answers count.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from pathlib import Path

from ..core.answers import verified_records, verify_record
from ..core.errors import ConfigError, PlanfenceError, RecordError, RequestError, TransportError
from ..core.gate import Action, Decision, FetchRecords, Gate, GatePolicy, QueryHeads, Replan
from ..core.identity import Identity
from ..core.lineage import FetchRound
from ..core.records import Record, record_from_wire
from ..core.roster import Roster
from ..protocol.messages import pack, unpack
from .facts import plan_key
from .machine import UNDECIDED, AskPlan, CheckMachine, RunGate, Verdict
from .wire import Outcome, SyncSessions

DEADLINE = 5.0
Verify = functools.partial[None]


def run_check(
    roster: Roster,
    identity: Identity,
    plan: str,
    *,
    addresses: dict[str, tuple[str, int]] | None = None,
    deadline: float = DEADLINE,
    informational: bool = True,
    cache: Path | None = None,
) -> Verdict:
    """Check plan `plan` as `identity`; owner failures give an undecided verdict, never an
    exception. `informational=False` skips the git-status keys (they never block).

    `cache` is a file keeping the plan record and its lineage between checks (records are
    immutable, and each is verified again when read), so the check of a plan checked before
    takes one round trip; it is rewritten whenever the check had to fetch records.
    """
    sessions = SyncSessions(roster, identity, addresses)
    verify = functools.partial(verify_record, roster)
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
        until = time.monotonic() + deadline
        if isinstance(event, AskPlan):
            args = {"keys": list(event.query.keys), "expect": dict(event.query.expect)}
            outcome = sessions.round({event.owner: ("heads", args)}, until).get(event.owner)
            if isinstance(outcome, dict):
                machine.plan_answered(outcome)
                if machine.record is not None:
                    records[machine.record.id] = machine.record
            else:
                machine.plan_failed(_failure(outcome, until))
        elif isinstance(event, RunGate):
            decision, changed, why = _run_gate(event, roster, sessions, records, verify, deadline)
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
) -> tuple[Decision, list[Record], str]:
    """Drive the gate to its decision; a drift's replan returns the same roots (the check
    reports, it does not replan). Returns the decision, the changed records seen, and the
    last typed error an owner answered a heads query with (e.g. its worktree is gone)."""
    action = event.action
    gate = Gate(
        action,
        owner_of=roster.owner_of,
        verify=verify,
        lookup=records.get,
        clock=time.perf_counter,
        policy=GatePolicy(query_keys=event.also or None),
    )
    changed: list[Record] = []
    why = ""
    while True:
        step = gate.next_event()
        if isinstance(step, Decision):
            return step, changed, why
        until = time.monotonic() + deadline
        if isinstance(step, FetchRecords):
            holders = _holders(roster, action)
            fetch = FetchRound(step.ids, holders)
            outcomes = sessions.round(
                {owner: ("get", {"ids": list(step.ids)}) for owner in holders}, until
            )
            for owner in holders:
                outcome = outcomes.get(owner)
                if isinstance(outcome, dict):
                    fetch.answered(owner, verified_records(roster, outcome))
                else:
                    fetch.failed(owner)
            records.update((r.id, r) for r in fetch.records)
            gate.records_fetched(fetch.records, fetch.unanswered)
        elif isinstance(step, QueryHeads):
            outcomes = sessions.round(
                {
                    owner: ("heads", {"keys": list(q.keys), "expect": dict(q.expect)})
                    for owner, q in step.queries.items()
                },
                until,
            )
            for owner in step.queries:
                outcome = outcomes.get(owner)
                if isinstance(outcome, dict):
                    gate.heads_answered(owner, outcome)
                else:
                    why = str(outcome) if isinstance(outcome, RequestError) else why
                    gate.heads_failed(owner, _failure(outcome, until))
        elif isinstance(step, Replan):
            changed.extend(step.changed)
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
        return "owner_unavailable"  # a worktree_gone typed error also lands here (see `why`)
    if isinstance(outcome, RequestError) and outcome.code == "worktree_gone":
        return "owner_unavailable"
    return "malformed_response"


def load_records(path: Path, roster: Roster) -> dict[bytes, Record]:
    """The records cached at `path` that parse and verify against `roster` ({} when none)."""
    try:
        wires = unpack(path.read_bytes())
    except (OSError, PlanfenceError):
        return {}
    found = {}
    for wire in wires if isinstance(wires, list) else []:
        try:
            record = record_from_wire(wire)
            verify_record(roster, record)
        except (RecordError, ConfigError):
            continue
        found[record.id] = record
    return found


def save_records(path: Path, records: list[Record]) -> None:
    """Cache `records` at `path` (atomically; a failure to write only costs speed)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(pack([r.to_wire() for r in {r.id: r for r in records}.values()]))
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
