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

Commits move HEAD inside a plan the same way (`wait_commits`): when the plan's worktree is on
the branch the plan holds and the new HEAD's tree differs from the HEAD the plan holds only in
files the plan holds at the committed content (`model.commits.foreign`), the plan record is
written again holding the new HEAD. A commit that brings in anything else stays drift, and
`check_commits` names what it brought in.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...cluster.folder import ClusterDir
from ...core.answers import HeadsQuery, Malformed, check_answer, verified_records, verifier
from ...core.errors import ConfigError, PlanfenceError, RequestError
from ...core.identity import Identity
from ...core.records import Record
from ...core.roster import Roster
from ...net.syncclient import SyncSessions
from ..model.commits import brings_in_line, foreign
from ..model.facts import BRANCH, HEAD, fact_key, file_of, plan_key, split_key
from ..model.machine import NO_PLAN, trusted_state
from ..place.config import workspaces
from ..place.observe import commit_changes
from . import check as checks  # called through the module: one seam for run_check

if TYPE_CHECKING:
    from ..model.machine import Verdict


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
            _lineage(sessions, roster, record, roles, lineage, step_timeout)
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


def with_versions(
    plan: Record, lineage: Mapping[bytes, Record], new: Mapping[str, Record], now: float
) -> tuple[dict[str, Any], list[bytes]]:
    """The body and parents of the plan record that holds the `new` versions of its keys
    instead of those `plan` holds; same declaration and trust count. Raises ValueError when a
    parent of `plan` is not in `lineage`."""
    parents = []
    for rid in plan.parents:
        parent = lineage.get(rid)
        if parent is None:
            raise ValueError(f"parent {rid.hex()[:12]} of the plan is not at hand")
        parents.append(new[parent.key].id if parent.key in new else rid)
    body = dict(plan.body)
    body.update(previous=plan.id, time=round(now, 3), advanced=int(body.get("advanced", 0)) + 1)
    return body, parents


@dataclass(frozen=True, slots=True)
class Commits:
    """What `wait_commits` did: whether it wrote the plan holding a new HEAD, and, by
    workspace agent, the paths a new HEAD brings in that the plan does not hold."""

    moved: bool
    foreign: Mapping[str, list[str]]
    agents: tuple[str, ...] = ()


def wait_commits(
    roster: Roster,
    identity: Identity,
    plan: str,
    spaces: Mapping[str, Path],
    *,
    step_timeout: float,
    addresses: dict[str, tuple[str, int]] | None = None,
) -> Commits:
    """Move the HEAD that `plan` holds of each worktree in `spaces` (workspace agent -> its
    root) to the current one where the commits in between record only what the plan holds
    (see the module docstring); each step within `step_timeout` seconds. A worktree whose
    branch changed, or whose commits git cannot compare, is left as it is (its drift stays).
    Raises PlanfenceError when an owner fails or refuses, ValueError for an unreadable plan;
    the plan write retries on a conflicting write as `wait_advance` does."""
    pkey = plan_key(plan)
    owner = roster.owner_of(pkey)
    if owner is None:
        raise ConfigError(f"no agent owns {pkey!r}")
    sessions = SyncSessions(roster, identity, addresses)
    lineage: dict[bytes, Record] = {}
    give_up = time.monotonic() + RETRY_STEPS * step_timeout
    try:
        while True:
            record = _heads(sessions, roster, [pkey], step_timeout)[pkey]
            roles = trusted_state(plan, record.body).roles
            agents = [p[0] for k in roles if (p := split_key(k)) and p[1] == HEAD]
            if not agents:
                return Commits(False, {})
            _lineage(sessions, roster, record, roles, lineage, step_timeout)
            held = {lineage[rid].key: lineage[rid] for rid in record.parents if rid in lineage}
            facts = [
                fact_key(a, f) for a in agents for f in (HEAD, BRANCH) if fact_key(a, f) in held
            ]
            current = _heads(sessions, roster, facts, step_timeout)
            new: dict[str, Record] = {}
            brought: dict[str, list[str]] = {}
            for agent in agents:
                moved, paths = _commits_of(agent, held, current, spaces.get(agent))
                if moved:
                    new[fact_key(agent, HEAD)] = current[fact_key(agent, HEAD)]
                elif paths:
                    brought[agent] = paths
            if not new:
                return Commits(False, brought, tuple(agents))
            body, parents = with_versions(record, lineage, new, time.time())
            args = {"key": pkey, "kind": "plan", "parents": parents, "body": body}
            try:
                sessions.request(owner, "put", {**args, "head": record.id}, _until(step_timeout))
                return Commits(True, brought, tuple(agents))
            except RequestError as exc:
                if exc.code != "conflict" or time.monotonic() >= give_up:
                    raise
    finally:
        sessions.close()


def check_commits(
    root: Path,
    roster: Roster,
    identity: Identity,
    plan: str,
    *,
    timeout: float,
    informational: bool = True,
    cache: Path | None = None,
    addresses: dict[str, tuple[str, int]] | None = None,
) -> Verdict:
    """`check.run_check` of `plan` (each look within `timeout` seconds) for the cluster at
    `root`, after moving HEAD inside the plan where only commits of what it holds moved it
    (`wait_commits`): when the first look blocks, the commits are looked at and, if the plan
    moved, it is checked again. A new HEAD that brings in other content is named in the
    verdict's lines, after its "HEAD changed" line. A verdict that blocks says who changed
    what (`writers.attributed`). Never raises: a failure to look at the commits leaves the
    first verdict."""
    from .writers import attributed  # only a block reads it

    verdict = _look_commits(
        root,
        roster,
        identity,
        plan,
        timeout=timeout,
        informational=informational,
        cache=cache,
        addresses=addresses,
    )
    return attributed(root, verdict) if verdict.exit_code == 2 else verdict


def _look_commits(
    root: Path,
    roster: Roster,
    identity: Identity,
    plan: str,
    *,
    timeout: float,
    informational: bool,
    cache: Path | None,
    addresses: dict[str, tuple[str, int]] | None,
) -> Verdict:
    """`check_commits` before it says who changed what."""

    def look() -> Verdict:
        return checks.run_check(
            roster,
            identity,
            plan,
            addresses=addresses,
            timeout=timeout,
            informational=informational,
            cache=cache,
        )

    verdict = look()
    if verdict.exit_code != 2:
        return verdict
    try:
        spaces = workspaces(ClusterDir(root))
        seen = wait_commits(
            roster, identity, plan, spaces, step_timeout=timeout, addresses=addresses
        )
    except (PlanfenceError, ValueError, OSError):
        return verdict
    if seen.moved:
        verdict = look()
    many = len(seen.agents) > 1
    named = [brings_in_line(paths, agent if many else "") for agent, paths in seen.foreign.items()]
    if not named or verdict.exit_code != 2:
        return verdict
    lines = list(verdict.lines)
    at = max((i + 1 for i, ln in enumerate(lines) if ln.startswith("- HEAD changed")), default=0)
    at = at or len(lines)
    return dataclasses.replace(verdict, lines=tuple(lines[:at] + named + lines[at:]))


def _commits_of(
    agent: str, held: Mapping[str, Record], current: Mapping[str, Record], root: Path | None
) -> tuple[bool, list[str]]:
    """Whether the HEAD of worktree `agent` (at `root`) may move inside the plan from the
    record it holds (`held`, by key) to the current one, and else the paths the new HEAD
    brings in ([] where it did not move, its branch changed, or git cannot compare)."""
    key, branch = fact_key(agent, HEAD), fact_key(agent, BRANCH)
    if key not in held or held[key].body == current[key].body:
        return False, []
    if branch in held and held[branch].body != current[branch].body:
        return False, []  # a switch, not a commit: a person re-bases the plan
    old, now = (_sha(r.body) for r in (held[key], current[key]))
    if now is None or root is None:
        return False, []
    try:
        changed = commit_changes(root, old, now)
    except ConfigError:
        return False, []
    files = {
        rel: r.body
        for k, r in held.items()
        if k.startswith(f"{agent}:") and (rel := file_of(k)) is not None
    }
    paths = foreign(changed, files)
    return not paths, paths


def _sha(body: Any) -> str | None:
    sha = body.get("head") if isinstance(body, dict) else None
    return sha if isinstance(sha, str) else None


def _lineage(
    sessions: SyncSessions,
    roster: Roster,
    record: Record,
    roles: Mapping[str, tuple[str, ...]],
    lineage: dict[bytes, Record],
    step_timeout: float,
) -> None:
    """Put the parents of `record` into `lineage`, asking the owners of its declared keys."""
    missing = [rid for rid in record.parents if rid not in lineage]
    holders = {roster.owner_of(k) for k in roles} - {None} if missing else set()
    verify = verifier(roster)
    for holder in sorted(str(h) for h in holders):
        answer = sessions.request(holder, "get", {"ids": missing}, _until(step_timeout))
        lineage.update(
            (r.id, r) for r in verified_records(answer.get("records"), verify, bad="drop")
        )
