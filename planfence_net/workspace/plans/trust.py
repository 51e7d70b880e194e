"""Writing a trusted state: evidence records, then the plan record that names them all.

A trusted state is a plan record `plan/PLAN` whose parents are the current records of every
declared key (the worktree facts, as their owners observe them right now, and the evidence
records) and whose body maps each key to its roles. Trusting a plan that already has a
trusted state counts as its replan: `trust` goes up by one, and a drift of a plan trusted
more than once is "changed again" (stop and report). `fresh` starts the count over.

An agent cannot lower its own fence with a trust: a plan must declare at least one file; every
declared file must exist (one the plan will create is declared `new`, recorded as missing on
purpose); and a re-trust declares at least every key and role its current trusted state
declared, unless `narrow` (like `fresh`, a person's decision: the hook blocks both flags).
Trusting another plan for a session whose plan is stale counts as a re-trust of that plan.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...cluster.folder import ClusterDir
from ...core.errors import ConfigError
from ...core.roster import Roster
from ...net.api import get_records, put_record, query_heads
from ..model.facts import (
    BRANCH,
    HEAD,
    LOCKFILES,
    REPO,
    STATUS,
    evidence_key,
    fact_key,
    file_key,
    file_of,
    plan_key,
    split_key,
)
from ..place.config import bound_plan, workspaces
from ..place.history import keep_keys
from ..place.paths import session_marker
from .check import run_check
from .session import auto_plan

EVIDENCE_TIMEOUT = 600.0


@dataclass(frozen=True, slots=True)
class Evidence:
    """A command that was run, where, with which exit code, and on which file keys."""

    command: str
    agent: str
    exit: int
    inputs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TrustSpec:
    """What a trusted state declares: file keys by role, and evidence already run."""

    plan: str
    reads: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    lockfiles: tuple[str, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    session: str | None = None
    fresh: bool = False
    narrow: bool = False
    new: tuple[str, ...] = ()  # targets that must not exist yet (recorded as missing)
    replaces: str | None = None  # a stale plan the session moves from: covered too
    extra: dict[str, Any] = field(default_factory=dict)
    # file key -> the hashes one of which its owner must observe (`--from`: the content that
    # was compared with the list); another one means it changed since: nothing is written
    expect: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def declaration(self) -> dict[str, list[str]]:
        """Every declared key with its roles (facts of each worktree involved included)."""
        roles: dict[str, list[str]] = {}

        def add(key: str, role: str) -> None:
            if role not in roles.setdefault(key, []):
                roles[key].append(role)

        for role, keys in (
            ("read", self.reads),
            ("target", self.targets + self.new),
            ("lockfile", self.lockfiles),
        ):
            for key in keys:
                add(key, role)
        for ev in self.evidence:
            for key in ev.inputs:
                add(key, "input")
            add(evidence_key(ev.agent, ev.command), "evidence")
        agents = sorted(
            {split_key(k)[0] for k in roles if split_key(k)}  # type: ignore[index]
            | {ev.agent for ev in self.evidence}
        )
        for agent in agents:
            for fact in (REPO, BRANCH, HEAD, STATUS):
                add(fact_key(agent, fact), fact)
        return roles


def auto_lockfiles(spaces: dict[str, Path], keys: list[str]) -> list[str]:
    """Lockfiles and manifests present at the root of each worktree the keys are in, and in
    the folders of the declared files."""
    found: list[str] = []
    for key in keys:
        agent, rel = key.partition(":")[0], file_of(key)
        if rel is None or agent not in spaces:
            continue
        folders = {""} | {"/".join(rel.split("/")[:i]) for i in range(1, rel.count("/") + 1)}
        for folder in sorted(folders):
            for name in LOCKFILES:
                candidate = f"{folder}/{name}" if folder else name
                lock = file_key(agent, candidate)
                if (spaces[agent] / candidate).is_file() and lock not in found:
                    found.append(lock)
    return found


def run_evidence(command: str, cwd: Path) -> int:
    """Run `command` in a shell in `cwd`; returns its exit code (output is discarded).

    Raises ConfigError when it cannot be started or runs longer than EVIDENCE_TIMEOUT.
    """
    try:
        proc = subprocess.run(
            command,
            shell=True,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=EVIDENCE_TIMEOUT,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"evidence command {command!r} failed to run: {exc}") from None
    return proc.returncode


async def wait_trust(
    cdir: ClusterDir,
    roster: Roster,
    spec: TrustSpec,
    addresses: dict[str, tuple[str, int]] | None = None,
) -> dict[str, Any]:
    """Write the evidence records and the plan record of `spec`; returns the plan's
    {"key", "id", "seq", "trust", "declaration"}. Raises ConfigError, writing nothing, when
    it declares no file, a declared file is missing (unless `new`), exists (if `new`) or is
    refused by its owner, or when, without `narrow`, it declares less than the plan's
    current trusted state or than the stale plan it `replaces`; PlanfenceError when an owner
    refuses or cannot be reached."""
    require_files(spec.plan, [*spec.reads, *spec.targets, *spec.new])
    declaration = spec.declaration()
    pkey = plan_key(spec.plan)
    owner = roster.owner_of(pkey)
    if owner is None:
        raise ConfigError(f"no agent owns {pkey!r}: add one owning plan/* to the roster")
    me = cdir.identity(owner)
    facts = [k for k, roles in declaration.items() if "evidence" not in roles]
    old = plan_key(spec.replaces) if spec.replaces else None
    rows = await query_heads(roster, me, facts + [pkey] + ([old] if old else []), addresses)
    ids = {row["key"]: row["id"] for row in rows}
    files = [k for k in facts if file_of(k) is not None and ids.get(k)]
    wanted = [ids[k] for k in [*files, pkey, *([old] if old else [])] if ids.get(k)]
    bodies = {r.id: r.body for r in await get_records(roster, me, wanted, addresses)}
    _check_files(spec, {k: bodies[ids[k]] for k in files})
    previous = bodies.get(ids[pkey]) if ids.get(pkey) else None
    replaced = bodies.get(ids[old]) if old and ids.get(old) else None
    if not spec.narrow:
        _check_not_narrower(spec, previous, replaced, declaration)
    trust = _next_trust(previous, spec.fresh)
    parents = [ids[k] for k in facts]
    parents += await _put_evidence(cdir, roster, spec, ids, addresses)
    body = {
        "declaration": declaration,
        "trust": trust,
        "session": spec.session,
        "previous": ids.get(pkey),
        "time": round(time.time(), 3),
        **spec.extra,
    }
    written = await put_record(
        roster, me, pkey, kind="plan", body=body, parents=parents, addresses=addresses
    )
    try:
        keep_keys(cdir.root, workspaces(cdir), files)  # what it read, for a later block's diff
    except (ConfigError, OSError):
        pass  # best effort: the plan is trusted; a later block says the diff was not kept
    return {
        "key": pkey,
        "id": written["id"],
        "seq": written["seq"],
        "trust": trust,
        "declaration": declaration,
    }


def _check_not_narrower(
    spec: TrustSpec, previous: Any, replaced: Any, declaration: dict[str, list[str]]
) -> None:
    """Raise ConfigError when `declaration` declares less than the plan's current trusted
    state (`previous`) or than the stale plan it replaces (`replaced`)."""
    _check_superset(f"trusting {spec.plan} again", previous, declaration)
    _check_superset(
        f"trusting {spec.plan} for session {spec.session} would replace the stale plan "
        f"{spec.replaces} and",
        replaced,
        declaration,
    )


async def _put_evidence(
    cdir: ClusterDir,
    roster: Roster,
    spec: TrustSpec,
    ids: dict[str, Any],
    addresses: dict[str, tuple[str, int]] | None,
) -> list[bytes]:
    """Write an evidence record per evidence command of `spec` (its inputs' current records
    as parents); returns their ids, in order."""
    written_ids = []
    for ev in spec.evidence:
        key = evidence_key(ev.agent, ev.command)
        written = await put_record(
            roster,
            cdir.identity(ev.agent),
            key,
            kind="evidence",
            body={
                "command": ev.command,
                "exit": ev.exit,
                "inputs": list(ev.inputs),
                "time": round(time.time(), 3),
            },
            parents=[ids[k] for k in ev.inputs],
            addresses=addresses,
        )
        written_ids.append(written["id"])
    return written_ids


def require_files(plan: str, files: list[str]) -> None:
    """Raise ConfigError when a trusted state of `plan` would declare no file."""
    if not files:
        raise ConfigError(
            f"plan {plan!r} declares no file: a trusted state must name what the plan "
            f"depends on (--read FILE, --target FILE, or --new FILE for one it will create)"
        )


def stale_binding(
    cdir: ClusterDir,
    roster: Roster,
    plan: str,
    session: str | None,
    addresses: dict[str, tuple[str, int]] | None = None,
    agent: str | None = None,
) -> str | None:
    """The plan `session` is bound to (for subagent `agent`: its own, else the session's,
    the one its calls are checked against), when it is not `plan` and its check does not
    pass (blocking drift, or cannot decide): trusting `plan` for the session replaces it, so
    the new declaration must cover it (TrustSpec.replaces). None otherwise."""
    bound = (bound_plan(cdir, session, agent) if agent else None) or bound_plan(cdir, session)
    if bound is None and session:  # the session's automatic plan, once it has one
        started = auto_plan(session, agent)
        bound = started if session_marker(cdir.root, started).exists() else None
    if bound is None or bound == plan:
        return None
    owner = roster.owner_of(plan_key(bound)) or roster.agents[0].name
    verdict = run_check(roster, cdir.identity(owner), bound, addresses=addresses)
    return None if verdict.exit_code == 0 else bound


def _next_trust(previous: Any, fresh: bool) -> int:
    """1 for a first trust (or `fresh`), else the previous record's count plus one."""
    if previous is None or fresh:
        return 1
    count = previous.get("trust") if isinstance(previous, dict) else None
    return (count if isinstance(count, int) else 0) + 1


def _check_files(spec: TrustSpec, bodies: dict[str, Any]) -> None:
    """Raise ConfigError naming the declared files their owner refuses to hash (too large,
    behind a symlink leading out of the worktree), that are missing (and not declared new),
    or that are declared new but exist; bodies are the owners' observations."""
    new = set(spec.new)
    absent, present, refused = [], [], []
    for key, body in bodies.items():
        missing = isinstance(body, dict) and bool(body.get("missing"))
        if isinstance(body, dict) and isinstance(body.get("refused"), str):
            refused.append(f"{_shown(key)} ({body['refused']})")
            continue
        if key in new and not missing:
            present.append(key)
        elif missing and key not in new:
            kind = body.get("kind")
            absent.append(f"{_shown(key)} ({kind})" if isinstance(kind, str) else _shown(key))
    if refused:
        raise ConfigError(f"declared file refused by its owner: {', '.join(refused)}")
    if absent:
        raise ConfigError(
            f"declared file does not exist: {', '.join(absent)}; check the path, or declare "
            f"a file the plan will create with --new"
        )
    if present:
        raise ConfigError(
            f"--new file already exists: {', '.join(_shown(k) for k in present)}; "
            f"declare it with --target"
        )
    moved = [
        _shown(k)
        for k, hashes in spec.expect.items()
        if not isinstance(bodies.get(k), dict) or bodies[k].get("hash") not in hashes
    ]
    if moved:
        raise ConfigError(
            f"changed since it was compared with its listed hash: {', '.join(moved)}; "
            f"nothing was recorded"
        )


def _check_superset(doing: str, record: Any, after: dict[str, list[str]]) -> None:
    """Raise ConfigError when `after` drops a key or a role the plan record body `record`
    declared (`doing` says what the trust does, for the message)."""
    before = record.get("declaration") if isinstance(record, dict) else None
    if not isinstance(before, dict):
        return
    dropped = []
    for key, roles in sorted(before.items()):
        lost = [r for r in roles if r not in after.get(key, [])] if isinstance(roles, list) else []
        if lost:
            dropped.append(f"{_shown(key)} ({', '.join(map(str, lost))})")
    if dropped:
        raise ConfigError(
            f"{doing} would declare less than its trusted state: "
            f"{', '.join(dropped)} no longer declared; declare them again (dropping them "
            f"is the user's decision: `--narrow`, which the hook never lets an agent run)"
        )


def _shown(key: str) -> str:
    """`ws:src/a.ts` for a file key, the key itself otherwise."""
    rel = file_of(key)
    return f"{key.partition(':')[0]}:{rel}" if rel is not None else key
