"""Automatic plans: a session's trusted state made from what its agent actually did.

In automatic mode (`planfence hook ... --mode auto`, what `hook install` writes unless
`--explicit`), a session (or a subagent of it) without an explicitly trusted plan works under
its own plan `auto-<digest of session/agent>`, the same durable plan record as a trusted one
(lineage, owners, gate), written by the hook:

    first call      the worktree's repo, branch, HEAD and git status (as at that moment)
    a read          PostToolUse of Read/NotebookRead, or of a shell command that reads files
                    (`reads.read_operands`): each file's current record joins as `read`; a
                    file already in the plan moves to its current version, and when that
                    version differs from the one the plan held (a re-read after a drift) the
                    plan's replan count (`trust`) goes up by one, unless the plan's repo,
                    branch or HEAD drifted (no re-read fixes that); the lockfiles beside a
                    manifest read join as `lockfile`
    a write         PostToolUse of an edit the PreToolUse let through: each touched file
                    joins (or moves) as `target`; the write went through, so the replan count
                    starts over (the single-replan rule holds per write), and evidence that
                    ran against a replaced version leaves the plan
    a test run      PostToolUse of a configured test command: an evidence record (command,
                    exit code, inputs) whose parents are the current records of the plan's
                    read and target files, joined as `evidence` (its inputs as `input`)
    refresh         `planfence workspace refresh` (a person's command): repo, branch, HEAD and
                    status move to their current versions and the replan count starts over
    a subagent      its plan's first record derives from its parent's plan record (`derive`):
                    the parent's facts at the versions it held, its replan count, and its
                    record as a lineage parent until the subagent moves one of those facts

A drift of the plan blocks the next write as any plan's does (`machine`, `classify`); with a
replan count above one it is "changed again": stop and report. `model.autoplan.recorded` is
the pure rule, `wait_record` the thin I/O around it; every plan write is a compare-and-set
on the plan key's head (`put` with `head`), retried on `conflict`, so parallel hooks never
lose a read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...core.answers import HeadsQuery, Malformed, check_answer, verified_records, verifier
from ...core.errors import ConfigError, PlanfenceError, RequestError
from ...core.identity import Identity
from ...core.records import ID_LEN, Record
from ...core.roster import Roster
from ...net.syncclient import SyncSessions
from ..model.autoplan import (
    BASE_ROLES,
    Change,
    fact_keys,
    inputs_of,
    is_fact,
    key_agent,
    recorded,
)
from ..model.facts import file_of, plan_key, split_key
from ..place.cache import load_records, save_records

__all__ = ["PREFIX", "Change", "auto_plan", "heads", "wait_declaration", "wait_record"]

PREFIX = "auto-"
NO_PLAN = b"\0" * ID_LEN  # an id no record has: the owner answers with the head inline
RETRY_STEPS = 4  # a contended write may use the hook's whole budget, not one step


def auto_plan(session: str, agent: str | None = None) -> str:
    """The automatic plan of `session` (with `agent`: of that subagent of it)."""
    digest = hashlib.blake2b(f"{session}/{agent or ''}".encode(), digest_size=8).hexdigest()
    return PREFIX + digest


def wait_record(
    roster: Roster,
    identity_of: Callable[[str], Identity],
    plan: str,
    change: Change,
    *,
    step_timeout: float,
    cache: Path | None = None,
    evidence: tuple[str, dict[str, Any]] | None = None,
) -> bool:
    """Write `change` into `plan` (created when it has no record yet), each step (one request)
    within `step_timeout` seconds; returns whether the plan record was written (False: it
    already said that). `evidence` is (evidence key, body without inputs): its record is
    written first, with the plan's read and target files as inputs and their current records
    as parents. `cache` (the hook's, `cache.load_records`) saves fetches: the plan's lineage
    is read from it, and written to it when it had to be fetched. Raises
    PlanfenceError when an owner fails or refuses, ValueError for a plan that cannot take
    the change.

    The plan record is written with a compare-and-set on the plan key's head: when another
    process wrote the plan in between, the owner answers `conflict` and this reads the new
    head and tries again (until RETRY_STEPS x `step_timeout`)."""
    pkey = plan_key(plan)
    owner = roster.owner_of(pkey)
    if owner is None:
        raise ConfigError(f"no agent owns {pkey!r}")
    sessions = SyncSessions(roster, identity_of(owner))
    known: dict[bytes, Record] = load_records(cache, roster) if cache is not None else {}
    give_up = time.monotonic() + RETRY_STEPS * step_timeout
    try:
        while True:
            current = heads(sessions, roster, [pkey, *change.files], step_timeout)
            record = current.pop(pkey)
            if record is None and change.rebase:
                raise ConfigError(f"no plan {plan!r}")
            parent = _read_lineage(sessions, roster, record, change, known, cache, step_timeout)
            missing = _missing_keys(record or parent, change, current)
            if missing:
                current.update(heads(sessions, roster, missing, step_timeout))
            step = change
            if evidence is not None:
                step = _with_evidence(
                    sessions, roster, identity_of, record, change, evidence, current, step_timeout
                )
                evidence = None  # written once, also when the plan write is retried
            present = {k: r for k, r in current.items() if r is not None}
            result = recorded(record, known, present, step, time.time(), parent)
            if result is None:
                return False
            try:
                _put_plan(sessions, owner, pkey, record, result, step_timeout)
                return True
            except RequestError as exc:
                if exc.code != "conflict" or time.monotonic() >= give_up:
                    raise
                change = step
    finally:
        sessions.close()


def _put_plan(
    sessions: SyncSessions,
    owner: str,
    pkey: str,
    record: Record | None,
    result: tuple[dict[str, Any], list[bytes]],
    step_timeout: float,
) -> None:
    """Put the plan record (body, parents) as a compare-and-set on the head `record`; raises
    RequestError (`conflict`: another process wrote the plan in between)."""
    body, parents = result
    args = {"key": pkey, "kind": "plan", "parents": parents, "body": body}
    head = record.id if record is not None else b""
    sessions.request(owner, "put", {**args, "head": head}, _until(step_timeout))


def _read_lineage(
    sessions: SyncSessions,
    roster: Roster,
    record: Record | None,
    change: Change,
    known: dict[bytes, Record],
    cache: Path | None,
    step_timeout: float,
) -> Record | None:
    """Fetch the plan record's lineage into `known` (saved to `cache` when fetched); returns
    the parent plan's record a plan without one derives from (`change.derive`), or None."""
    if record is not None and _fetch_parents(sessions, roster, record, known, step_timeout):
        if cache is not None:
            lineage = [known[rid] for rid in record.parents if rid in known]
            save_records(cache, [record, *lineage])
    if record is None and change.derive:
        return _parent_plan(sessions, roster, change.derive, known, step_timeout)
    return None


def _missing_keys(
    base: Record | None, change: Change, current: dict[str, Record | None]
) -> list[str]:
    """The keys whose heads the change needs and `current` lacks: the facts of every agent it
    touches, the declared facts a rebase moves, and the base's own (`_base_keys`)."""
    declared = base.body.get("declaration", {}) if base is not None else {}
    rebase_keys = [k for k in declared if change.rebase and split_key(k) and is_fact(k)]
    agents = {*change.agents, *filter(None, map(key_agent, change.files))}
    return (
        [k for a in sorted(agents) for k in fact_keys(a) if k not in declared and k not in current]
        + [k for k in rebase_keys if k not in current]
        + _base_keys(base, declared, change, current)
    )


def _with_evidence(
    sessions: SyncSessions,
    roster: Roster,
    identity_of: Callable[[str], Identity],
    record: Record | None,
    change: Change,
    evidence: tuple[str, dict[str, Any]],
    current: dict[str, Record | None],
    step_timeout: float,
) -> Change:
    """Write the evidence record (the plan's read and target files as inputs, their current
    records as parents); returns `change` carrying it."""
    ekey, ebody = evidence
    inputs = [
        k for k in dict.fromkeys([*inputs_of(record), *change.files]) if file_of(k) is not None
    ]
    more = [k for k in inputs if k not in current]
    if more:
        current.update(heads(sessions, roster, more, step_timeout))
    parents = [r.id for k in inputs if (r := current.get(k)) is not None]
    eowner = roster.owner_of(ekey)
    if eowner is None:
        raise ConfigError(f"no agent owns {ekey!r}")
    erecord = _write_evidence(
        roster,
        identity_of(eowner),
        {"key": ekey, "kind": "evidence", "parents": parents, "body": {**ebody, "inputs": inputs}},
        step_timeout,
    )
    return dataclasses.replace(change, evidence=(ekey, erecord))


def _parent_plan(
    sessions: SyncSessions,
    roster: Roster,
    name: str,
    known: dict[bytes, Record],
    step_timeout: float,
) -> Record | None:
    """The current record of plan `name` (a subagent's parent's), its parents put in
    `known`; None when it has none or it is not an automatic plan."""
    record = heads(sessions, roster, [plan_key(name)], step_timeout).get(plan_key(name))
    if record is None or not isinstance(record.body, dict) or not record.body.get("auto"):
        return None
    _fetch_parents(sessions, roster, record, known, step_timeout)
    return record


def _base_keys(
    plan: Record | None,
    declared: Mapping[str, Any],
    change: Change,
    current: Mapping[str, Record | None],
) -> list[str]:
    """The plan's repository, branch and HEAD facts, when `change` re-reads a file the plan
    holds at another version (`recorded` spends the replan count only if they did not drift),
    else none: a read of an unchanged or new file needs no more round trips."""
    held = set(plan.parents) if plan is not None else set()
    rereads = [
        k
        for k, role in change.files.items()
        if role == "read"
        and k in declared
        and (r := current.get(k)) is not None
        and r.id not in held
    ]
    if not rereads:
        return []
    return [
        k
        for k, roles in declared.items()
        if isinstance(roles, list) and set(roles) & set(BASE_ROLES) and k not in current
    ]


def wait_declaration(
    roster: Roster, identity_of: Callable[[str], Identity], plan: str, *, step_timeout: float
) -> dict[str, list[str]]:
    """The declaration (key -> roles) of plan `plan`'s current record, {} when it has none;
    one request within `step_timeout` seconds. Raises PlanfenceError when its owner fails."""
    pkey = plan_key(plan)
    owner = roster.owner_of(pkey)
    if owner is None:
        raise ConfigError(f"no agent owns {pkey!r}")
    sessions = SyncSessions(roster, identity_of(owner))
    try:
        record = heads(sessions, roster, [pkey], step_timeout).get(pkey)
    finally:
        sessions.close()
    body = record.body if record is not None else None
    found = body.get("declaration") if isinstance(body, dict) else None
    if not isinstance(found, dict):
        return {}
    return {
        k: [r for r in v if isinstance(r, str)] for k, v in found.items() if isinstance(v, list)
    }


def _write_evidence(
    roster: Roster, identity: Identity, args: dict[str, Any], step_timeout: float
) -> Record:
    """Write an evidence record as its owner (`identity`) and read it back, verified."""
    sessions = SyncSessions(roster, identity)
    try:
        answer = sessions.request(identity.name, "put", args, _until(step_timeout))
        rid = answer.get("id")
        got = sessions.request(identity.name, "get", {"ids": [rid]}, _until(step_timeout))
    finally:
        sessions.close()
    found = [r for r in verified_records(got.get("records"), verifier(roster), bad="drop")]
    if not found or found[0].id != rid or found[0].key != args["key"]:
        raise PlanfenceError(f"owner {identity.name!r} did not return the evidence it wrote")
    return found[0]


def _fetch_parents(
    sessions: SyncSessions,
    roster: Roster,
    record: Record,
    known: dict[bytes, Record],
    step_timeout: float,
) -> bool:
    """Put the plan's parents in `known`, asking the owners of its declared keys; returns
    whether any had to be fetched."""
    missing = [rid for rid in record.parents if rid not in known]
    if not missing:
        return False
    declared = record.body.get("declaration", {}) if isinstance(record.body, dict) else {}
    holders = {roster.owner_of(k) for k in [record.key, *declared]} - {None}  # with a link
    verify = verifier(roster)
    for holder in sorted(str(h) for h in holders):
        answer = sessions.request(holder, "get", {"ids": missing}, _until(step_timeout))
        known.update((r.id, r) for r in verified_records(answer.get("records"), verify, bad="drop"))
    return True


def heads(
    sessions: SyncSessions, roster: Roster, keys: list[str], step_timeout: float
) -> dict[str, Record | None]:
    """The current record of each key (observed now by its owner; None: no record yet),
    checked and verified. Raises PlanfenceError for a malformed answer."""
    by_owner: dict[str, list[str]] = {}
    for key in dict.fromkeys(keys):
        owner = roster.owner_of(key)
        if owner is None:
            raise ConfigError(f"no agent owns {key!r}")
        by_owner.setdefault(owner, []).append(key)
    found: dict[str, Record | None] = {}
    for owner, owned in by_owner.items():
        answer = sessions.request(
            owner,
            "heads",
            {"keys": owned, "expect": {k: NO_PLAN for k in owned}},
            _until(step_timeout),
        )
        rows = answer.get("heads") if isinstance(answer, dict) else None
        absent = {r[0] for r in rows or [] if isinstance(r, list) and len(r) == 3 and r[1] is None}
        query = HeadsQuery(tuple(owned), {k: NO_PLAN for k in owned if k not in absent})
        try:
            _, inline = check_answer(owner, query, answer, {}, verifier(roster))
        except Malformed as exc:
            raise PlanfenceError(f"owner {owner!r}: {exc}") from None
        found.update(inline)
        found.update((k, None) for k in absent)
    return found


def _until(step_timeout: float) -> float:
    return time.monotonic() + step_timeout
