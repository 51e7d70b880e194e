"""Recording the agent's own edits in its trusted state (the PostToolUse hook).

Without it, the plan's first write to a `--target` file would make that file drift, and the
plan's next call would be blocked by the plan's own work. After a Write/Edit/apply_patch ran,
the hook asks the owners for the current records of the touched files that the plan declares
as targets and writes the plan record again with those versions as its parents: same
declaration, same trust count (it is not a replan), `advanced` counted up. Evidence that ran
against a replaced version no longer describes the files, so it leaves the plan (its record
stays; a test run after the edit can be trusted anew). Only the touched targets move: any
other drift still blocks the next call.

`advanced` is the pure rule; `wait_advance` the thin I/O around it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ...core.answers import HeadsQuery, Malformed, check_answer, verified_records, verifier
from ...core.errors import ConfigError, PlanfenceError, RequestError
from ...core.identity import Identity
from ...core.records import Record
from ...core.roster import Roster
from ...net.syncclient import SyncSessions
from ..model.facts import plan_key
from ..model.machine import NO_PLAN, trusted_state


def advanced(
    plan: Record, lineage: Mapping[bytes, Record], new: Mapping[str, Record], now: float
) -> tuple[dict[str, Any], list[bytes]]:
    """The body and parents of the plan record that trusts the `new` versions (declared
    target keys only) instead of those `plan` used. Raises ValueError when a parent of
    `plan` is not in `lineage` or a key of `new` is not a declared target."""
    body = dict(plan.body)
    roles = trusted_state(plan.key.removeprefix("plan/"), body).roles
    if any("target" not in roles.get(key, ()) for key in new):
        raise ValueError(f"not declared targets: {sorted(k for k in new if k not in roles)}")
    declaration = dict(body["declaration"])
    parents = []
    for rid in plan.parents:
        parent = lineage.get(rid)
        if parent is None:
            raise ValueError(f"parent {rid.hex()[:12]} of the plan is not at hand")
        inputs = parent.body.get("inputs", []) if isinstance(parent.body, dict) else []
        if parent.key in new:
            parents.append(new[parent.key].id)
        elif "evidence" in roles.get(parent.key, ()) and set(inputs) & new.keys():
            declaration.pop(parent.key, None)  # it ran against a version that is gone
        else:
            parents.append(rid)
    body.update(
        declaration=declaration,
        previous=plan.id,
        time=round(now, 3),
        advanced=int(body.get("advanced", 0)) + 1,
    )
    return body, parents


def wait_advance(
    roster: Roster, identity: Identity, plan: str, keys: list[str], *, step_timeout: float
) -> list[str]:
    """Record the current versions of the touched `keys` that `plan` declares as targets,
    each step (one request) within `step_timeout` seconds; returns those keys ([] when none
    is one). Raises PlanfenceError when an owner fails or refuses, ValueError for a plan that
    cannot be advanced.

    The plan record is written with a compare-and-set on the plan key's head (`put` with
    `head`): when another process advanced or re-trusted the plan in between, the owner
    answers `conflict` and this reads the new head and tries again (until 4 x `step_timeout`),
    so concurrent advances of one plan never lose each other's targets."""
    pkey = plan_key(plan)
    owner = roster.owner_of(pkey)
    if owner is None:
        raise ConfigError(f"no agent owns {pkey!r}")
    verify = verifier(roster)
    sessions = SyncSessions(roster, identity)
    lineage: dict[bytes, Record] = {}  # immutable records: kept across attempts
    give_up = time.monotonic() + RETRY_STEPS * step_timeout
    try:
        while True:
            record = _heads(sessions, roster, [pkey], step_timeout)[pkey]
            roles = trusted_state(plan, record.body).roles
            targets = [k for k in dict.fromkeys(keys) if "target" in roles.get(k, ())]
            if not targets:
                return []
            missing = [rid for rid in record.parents if rid not in lineage]
            holders = {roster.owner_of(k) for k in roles} - {None} if missing else set()
            for holder in holders:
                answer = sessions.request(
                    str(holder), "get", {"ids": missing}, _until(step_timeout)
                )
                wires = answer.get("records")
                lineage.update((r.id, r) for r in verified_records(wires, verify, bad="drop"))
            new = _heads(sessions, roster, targets, step_timeout)
            body, parents = advanced(record, lineage, new, time.time())
            args = {"key": pkey, "kind": "plan", "parents": parents, "body": body}
            try:
                sessions.request(owner, "put", {**args, "head": record.id}, _until(step_timeout))
                return targets
            except RequestError as exc:
                if exc.code != "conflict" or time.monotonic() >= give_up:
                    raise
    finally:
        sessions.close()


RETRY_STEPS = 4  # a contended advance may use the hook's whole budget, not one step


def _until(step_timeout: float) -> float:
    """The deadline (time.monotonic()) of a step that starts now."""
    return time.monotonic() + step_timeout


def _heads(
    sessions: SyncSessions, roster: Roster, keys: list[str], step_timeout: float
) -> dict[str, Record]:
    """The current record of each key (observed now by its owner), checked and verified."""
    by_owner: dict[str, list[str]] = {}
    for key in keys:
        owner = roster.owner_of(key)
        if owner is None:
            raise ConfigError(f"no agent owns {key!r}")
        by_owner.setdefault(owner, []).append(key)
    found: dict[str, Record] = {}
    for owner, owned in by_owner.items():
        query = HeadsQuery(tuple(owned), {k: NO_PLAN for k in owned})
        answer = sessions.request(
            owner, "heads", {"keys": owned, "expect": query.expect}, time.monotonic() + step_timeout
        )
        try:
            heads, inline = check_answer(owner, query, answer, {}, verifier(roster))
        except Malformed as exc:
            raise PlanfenceError(f"owner {owner!r}: {exc}") from None
        missing = [k for k in owned if heads[k][0] is None]
        if missing:
            raise PlanfenceError(f"no record for {', '.join(missing)} at {owner!r}")
        found.update(inline)
    return found
