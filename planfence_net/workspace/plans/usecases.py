"""The workspace's use cases, each composed once: trust a plan, check it, refresh it.

`planfence workspace trust|check|refresh`, `planfence mcp serve`'s tools and the hook map their
options onto one request value and call one function here, with the `Caller` their door
vouches for (`access.py`): every rule about who may do what is applied here, so every door
enforces it alike. Each function raises PlanfenceError (ConfigError for a request that is
refused, `access.Refused` for one the caller may not make), never prints.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio

from ...cluster.folder import ClusterDir
from ...cluster.processes import link_addresses
from ...core.errors import ConfigError, PlanfenceError, collapse
from ...core.roster import Roster
from ...core.timeouts import DEFAULT_TIMEOUT
from ...net.syncclient import SyncSessions
from ..model.facts import PERSON_FLAGS, plan_key
from ..model.intents import check_lease
from ..model.machine import Verdict
from ..place.config import file_key_for, locate, remember_plan, select_plan, workspaces
from .access import Caller, Refused, authorize
from .agentsmd import FromList, declared_reads
from .check import run_check
from .checklog import log_check
from .intentclient import agent_limits, before_trust, lease_of
from .intentgrant import TrustIntents, after_trust
from .session import Change, auto_plan, wait_record
from .trust import (
    Evidence,
    TrustSpec,
    auto_lockfiles,
    require_files,
    run_evidence,
    stale_binding,
    wait_trust,
)
from .writers import attributed

TRUST, REFRESH, RELEASE = "workspace trust", "workspace refresh", "workspace release"


@dataclass(frozen=True, slots=True)
class TrustRequest:
    """What a door asks `trust_plan` for: files as named on its command line (relative to
    `cwd`, or NAME:PATH), and the plan's session binding and flags."""

    plan: str
    cwd: Path
    read: tuple[str, ...] = ()
    target: tuple[str, ...] = ()
    new: tuple[str, ...] = ()
    exclusive: tuple[str, ...] = ()
    lease: float | None = None
    evidence: tuple[str, ...] = ()
    evidence_input: tuple[str, ...] = ()
    lockfiles: Literal["auto", "none"] = "auto"
    session: str | None = None
    subagent: str | None = None
    fresh: bool = False
    narrow: bool = False
    make_current: bool = False
    from_file: Path | None = None
    section: str | None = None

    def person_flags(self) -> tuple[str, ...]:
        """The PERSON_FLAGS this request carries."""
        given = (self.narrow, self.fresh, self.make_current)
        return tuple(f for f, on in zip(PERSON_FLAGS, given, strict=True) if on)


@dataclass(frozen=True, slots=True)
class Trusted:
    """A trusted state written: the plan record (`record`: key, id, seq, trust,
    declaration), the evidence run, the intent lines, and the folder's current plan."""

    request: TrustRequest
    record: dict[str, Any]
    counts: tuple[int, int, int]  # read, target, lockfile
    evidence: tuple[Evidence, ...] = ()
    intents: list[str] = field(default_factory=list)
    current: str = ""

    def text(self) -> str:
        """The line `workspace trust` prints."""
        reads, targets, locks = self.counts
        return (
            f"trusted {self.request.plan} (trust {self.record['trust']}): {reads} read, "
            f"{targets} target, {locks} lockfile, {len(self.evidence)} evidence; "
            f"record {self.record['id'].hex()}"
        )


@dataclass(frozen=True, slots=True)
class _Declared:
    """A trust request's files as keys, by role, with the `--from` list they came from."""

    reads: list[str]
    targets: list[str]  # --target and --exclusive
    created: list[str]  # --new
    held: list[str]  # --exclusive
    inputs: list[str]  # what the evidence ran against
    locks: list[str]
    listed: FromList | None

    def files(self) -> list[str]:
        return self.reads + self.targets + self.created


def trust_plan(cdir: ClusterDir, request: TrustRequest, caller: Caller) -> Trusted:
    """Record the trusted state of `request.plan` in the cluster `cdir`: check what the
    caller may do (`access.authorize`), resolve the files, ask the team's owners for
    intents on the targets (exclusivity granted only when no other plan holds them), run
    the evidence, write the plan record, bind it to its session, and publish its intents.
    Raises access.Refused (nothing looked at), ConfigError (nothing written; a `--from` list's
    problems: agentsmd.ListProblems) or PlanfenceError (an owner failed)."""
    req = request
    authorize(caller, TRUST, req.session, req.person_flags())
    if req.subagent and not req.session:
        raise ConfigError("--agent needs --session (the subagent's parent session)")
    _utf8(req.plan, *req.evidence, *(t for t in (req.session, req.subagent) if t))
    roster, spaces = cdir.roster(), workspaces(cdir)
    files = _declare(req, spaces)
    agent, where = _evidence_place(spaces, req.cwd, files.files())
    require_files(req.plan, files.files())  # before any evidence runs
    addresses = link_addresses(cdir)
    try:
        span = check_lease(req.lease) if req.lease is not None else lease_of(cdir)
    except ValueError as exc:
        raise ConfigError(f"--lease: {exc}") from None
    span = _agent_bounds(cdir, caller, req, span, len(files.held))
    seen = before_trust(
        cdir, roster, req.plan, files.targets + files.created, files.held, addresses
    )
    replaces = (
        None
        if req.narrow
        else stale_binding(cdir, roster, req.plan, req.session, addresses, req.subagent)
    )
    ran = tuple(
        Evidence(cmd, agent, run_evidence(cmd, where), tuple(files.inputs + files.locks))
        for cmd in req.evidence
    )
    spec = _spec(req, files, ran, replaces)
    record = run_blocking(functools.partial(wait_trust, cdir, roster, spec, addresses))
    current = remember_plan(cdir, req.plan, req.session, req.make_current, req.subagent)
    published = TrustIntents(
        req.plan,
        record["id"],
        files.targets + files.created,
        files.held,
        req.session,
        req.subagent,
        span,
    )
    intents = after_trust(cdir, roster, published, seen, addresses)
    counts = (len(files.reads), len(files.targets), len(files.locks))  # as `trust` prints
    return Trusted(req, record, counts, ran, intents, current)


def _agent_bounds(
    cdir: ClusterDir, caller: Caller, req: TrustRequest, span: float, exclusive: int
) -> float:
    """The lease an agent's trust may take: the person's bounds (`intentclient.agent_limits`)
    hold for an agent, never for the person. An exclusive intent is bound to a session (it
    ends with it); a `--lease` past the team's maximum, or more exclusive files than it
    allows, is refused; the cluster's default lease is capped at the maximum. Raises
    access.Refused."""
    if caller.kind != "agent":
        return span
    longest, most = agent_limits(cdir)
    if exclusive and not (req.session or caller.session):
        raise Refused(
            "PlanFence refused --exclusive without --session: an exclusive intent is bound "
            "to the session that holds it and ends with it. Trust the plan for your own "
            "session, or ask the user."
        )
    if req.lease is not None and req.lease > longest:
        raise Refused(
            f"PlanFence refused --lease {req.lease:g}: an agent's intents last at most "
            f"{longest:g} s ([intents] max_lease in {cdir.roster_path}, the user's setting)."
        )
    if exclusive > most:
        raise Refused(
            f"PlanFence refused {exclusive} exclusive files: an agent's plan may hold at most "
            f"{most} ([intents] max_exclusive in {cdir.roster_path}, the user's setting)."
        )
    return min(span, longest)


def _declare(req: TrustRequest, spaces: dict[str, Path]) -> _Declared:
    """The request's files as keys (the `--from` list's reads first, checked before anything
    runs). Raises ConfigError for a file in no worktree, agentsmd.ListProblems for a list
    that does not hold."""
    keys = functools.partial(_keys, spaces, req.cwd)
    listed = None
    if req.from_file is not None:
        listed = declared_reads(req.from_file, req.plan, req.section, spaces, req.cwd)
    elif req.section is not None:
        raise ConfigError("--section needs --from FILE")
    held = keys(req.exclusive)
    reads = keys((*(listed.names() if listed is not None else ()), *req.read))
    targets, created = list(dict.fromkeys(keys(req.target) + held)), keys(req.new)
    inputs = keys(req.evidence_input) if req.evidence_input else reads + targets + created
    locks = auto_lockfiles(spaces, reads + targets + inputs) if req.lockfiles == "auto" else []
    return _Declared(reads, targets, created, held, inputs, locks, listed)


def _spec(
    req: TrustRequest, files: _Declared, ran: tuple[Evidence, ...], replaces: str | None
) -> TrustSpec:
    """The trusted state to write for `req`."""
    listed = files.listed
    return TrustSpec(
        req.plan,
        tuple(files.reads),
        tuple(files.targets),
        tuple(files.locks),
        ran,
        req.session,
        req.fresh,
        narrow=req.narrow,
        new=tuple(files.created),
        replaces=replaces,
        extra={
            **({"agent": req.subagent} if req.subagent else {}),
            **({"from": listed.record()} if listed is not None else {}),
        },
        expect=listed.expect if listed is not None else {},
    )


def check_plan(
    cdir: ClusterDir,
    plan: str | None,
    *,
    session: str | None = None,
    as_agent: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    door: str | None = "cli",
) -> Verdict:
    """Check `plan` (None: the one bound to `session`, else the folder's current plan) for
    drift since its trusted state, as `as_agent` (default: the plan's owner), within
    `timeout`; the check is logged for `workspace show` as coming from `door` (None: not
    logged). Anyone may
    check. Raises ConfigError when there is no plan to check; an owner's failure is an
    undecided verdict."""
    name = plan or select_plan(cdir, session)
    if name is None:
        raise ConfigError(f"no current plan in {cdir.root}; name one")
    roster = cdir.roster()
    verdict = run_check(
        roster,
        cdir.identity(as_agent or member_of(roster, plan_key(name))),
        name,
        addresses=link_addresses(cdir),
        timeout=timeout,
    )
    verdict = attributed(cdir.root, verdict)  # a block says who changed what
    if door is not None:
        log_check(cdir.root, roster, verdict, door)
    return verdict


def refresh_target(
    cdir: ClusterDir, plan: str | None, session: str | None, subagent: str | None, caller: Caller
) -> str:
    """The plan a refresh re-bases (`plan`, else the one of `session`/`subagent`, else the
    session's automatic plan), once `caller` may refresh it (only the person may). Raises
    access.Refused or ConfigError."""
    authorize(caller, REFRESH, session)
    if plan is not None:
        return plan
    if session is None:
        raise ConfigError("name the plan (as the block message does), or give --session")

    return select_plan(cdir, session, subagent) or auto_plan(session, subagent)


def refresh_plan(
    cdir: ClusterDir, plan: str, caller: Caller, step_timeout: float, session: str | None = None
) -> None:
    """Re-base `plan` on the current repository, branch, HEAD and git status (its replan
    count starts over). Raises access.Refused, PlanfenceError, or ValueError for a plan
    that cannot be re-based."""
    authorize(caller, REFRESH, session)

    wait_record(cdir.roster(), cdir.identity, plan, Change(rebase=True), step_timeout=step_timeout)


def release_plan(cdir: ClusterDir, plan: str, caller: Caller, timeout: float) -> int:
    """End every live intent of `plan` at every workspace owner of the cluster (the person's
    way to free files an agent's plan holds, exclusive or not); returns how many ended.
    Raises access.Refused for an agent, PlanfenceError when an owner does not answer."""
    authorize(caller, RELEASE, None)
    roster = cdir.roster()
    owners = list(workspaces(cdir))
    sessions = SyncSessions(roster, cdir.identity(member_of(roster, plan_key(plan))))
    try:
        outcomes = sessions.round(
            {o: ("unintend", {"plans": [plan]}) for o in owners}, time.monotonic() + timeout
        )
    finally:
        sessions.close()
    answers = {o: outcomes.get(o) for o in owners}
    ended = [a.get("ended", 0) for a in answers.values() if isinstance(a, dict)]
    if len(ended) < len(owners):
        failed = sorted(o for o, a in answers.items() if not isinstance(a, dict))
        raise PlanfenceError(f"could not end {plan}'s intents at {', '.join(failed)}")
    return sum(n for n in ended if isinstance(n, int))


def run_blocking(fn: Any) -> Any:
    """Run the coroutine function `fn` to its end; a task group's failure that stands for
    one PlanfenceError is raised as that error."""
    try:
        return anyio.run(fn)
    except BaseExceptionGroup as group:
        raise collapse(group) from None


def member_of(roster: Roster, key: str) -> str:
    """The roster member to ask as: the owner of `key`, else the first member."""
    try:
        owner = roster.owner_of(key)
    except ConfigError:
        owner = None
    return owner or roster.agents[0].name


def _utf8(*texts: str) -> None:
    """Raise ConfigError for a text the shell (or a JSON lone surrogate) passed that is not
    UTF-8."""
    for text in texts:
        try:
            text.encode()
        except UnicodeEncodeError:
            try:  # the shell's bytes, as they were
                shown = text.encode(errors="surrogateescape").decode(errors="backslashreplace")
            except UnicodeEncodeError:  # a lone surrogate
                shown = text.encode(errors="backslashreplace").decode()
            raise ConfigError(f"{shown!r} is not UTF-8 text") from None


def _keys(spaces: dict[str, Path], cwd: Path, files: tuple[str, ...] | list[str]) -> list[str]:
    return list(dict.fromkeys(file_key_for(spaces, f, cwd) for f in files))


def _evidence_place(spaces: dict[str, Path], cwd: Path, keys: list[str]) -> tuple[str, Path]:
    """Which worktree evidence commands run in: the one holding the current folder, else the
    one of the first declared file, else the only one."""
    here = locate(spaces, cwd / "x")
    if here is not None:
        return here[0], cwd
    for key in keys:
        agent = key.partition(":")[0]
        if agent in spaces:
            return agent, spaces[agent]
    if len(spaces) == 1:
        return next(iter(spaces.items()))
    raise ConfigError("cannot tell which worktree the evidence runs in: run trust from inside one")
