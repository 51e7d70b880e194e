"""Writing a trusted state: evidence records, then the plan record that names them all.

A trusted state is a plan record `plan/PLAN` whose parents are the current records of every
declared key (the worktree facts, as their owners observe them right now, and the evidence
records) and whose body maps each key to its roles. Trusting a plan that already has a
trusted state counts as its replan: `trust` goes up by one, and a drift of a plan trusted
more than once is "changed again" (stop and report). `fresh` starts the count over.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cluster.folder import ClusterDir
from ..core.errors import ConfigError
from ..core.roster import Roster
from ..net.api import get_records, put_record, query_heads
from .facts import (
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
    extra: dict[str, Any] = field(default_factory=dict)

    def declaration(self) -> dict[str, list[str]]:
        """Every declared key with its roles (facts of each worktree involved included)."""
        roles: dict[str, list[str]] = {}

        def add(key: str, role: str) -> None:
            if role not in roles.setdefault(key, []):
                roles[key].append(role)

        for role, keys in (
            ("read", self.reads),
            ("target", self.targets),
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
    {"key", "id", "seq", "trust", "declaration"}. Raises PlanfenceError when an owner
    refuses or cannot be reached."""
    declaration = spec.declaration()
    pkey = plan_key(spec.plan)
    owner = roster.owner_of(pkey)
    if owner is None:
        raise ConfigError(f"no agent owns {pkey!r}: add one owning plan/* to the roster")
    me = cdir.identity(owner)
    facts = [k for k, roles in declaration.items() if "evidence" not in roles]
    rows = await query_heads(roster, me, facts + [pkey], addresses)
    ids = {row["key"]: row["id"] for row in rows}
    trust = await _next_trust(roster, me, ids.get(pkey), spec.fresh, addresses)
    parents = [ids[k] for k in facts]
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
        parents.append(written["id"])
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
    return {
        "key": pkey,
        "id": written["id"],
        "seq": written["seq"],
        "trust": trust,
        "declaration": declaration,
    }


async def _next_trust(
    roster: Roster,
    identity: Any,
    previous: bytes | None,
    fresh: bool,
    addresses: dict[str, tuple[str, int]] | None,
) -> int:
    if previous is None or fresh:
        return 1
    [record] = await get_records(roster, identity, [previous], addresses)
    body = record.body
    count = body.get("trust") if isinstance(body, dict) else None
    return (count if isinstance(count, int) else 0) + 1
