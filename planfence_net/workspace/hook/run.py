"""`planfence hook claude|codex`: the PreToolUse hook (and, after a file-changing call, the
PostToolUse step that records the agent's own edit, `advance`; and Claude Code's SessionStart,
which joins an unserved worktree, `join`). Exit 0 lets the call run, exit 2 blocks it and the
agent shows stderr to the model as the reason, which names commands by the absolute path of
this installation's `planfence` so the model can run them. A subagent's call (`agent_id`) is
checked against the subagent's plan; parallel calls of one plan do not block each other
(`inflight`). Where no cluster serves the folder, a worktree of a repository that uses
PlanFence blocks with the step that joins it, and `--scope user` lets other folders through.

A shell command that runs a workspace action on another session than the caller's own is
blocked with the words every door refuses it with (`plans.access`, `_other_session`).

Every failure blocks: malformed stdin, no trusted plan, an unreachable owner, a timeout, a bug
(one guard around everything, `main`). Both agents treat any exit code other than 2 as "go
ahead", so this module never exits 1. It is started for every matching tool call, so it
imports only what checking needs (no typer, rich or owner daemon), and only after stdin
parsed: `planfence_net.cli.main` sends `hook claude|codex` here before anything else loads.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

from ..model.payload import AFTER, PayloadError, ToolCall, parse_payload

if TYPE_CHECKING:
    from ...cluster.folder import ClusterDir
    from ...core.identity import Identity
    from ...core.roster import Roster
    from ..model.machine import Verdict

ALLOW, BLOCK = 0, 2
DEFAULT_TIMEOUT = 10.0
END_MARGIN = 1.0  # of Codex's SessionEnd limit, left for the process to start and exit
STEPS = 4  # rounds of one check: the plan, its lineage, the heads, a drift's second look
USAGE = (
    "usage: planfence hook claude|codex [--cluster DIR] [--plan NAME] [--as AGENT] "
    "[--timeout SECONDS] [--scope user|project] [--mode auto|explicit]"
)


@dataclasses.dataclass(frozen=True, slots=True)
class HookOptions:
    """The hook's command-line options, parsed once (`_options`)."""

    cluster: Path | None = None  # --cluster: the cluster folder (else found from the cwd)
    plan: str | None = None  # --plan: check every call against this plan
    as_agent: str | None = None  # --as: the roster member to connect as
    timeout: float = DEFAULT_TIMEOUT  # --timeout: for the whole answer
    scope: str = "project"  # --scope user: let folders no cluster serves through
    mode: str = "explicit"  # --mode auto: sessions without a trusted plan make their own

    @property
    def auto(self) -> bool:
        """Automatic mode (`--mode auto`): a session without a trusted plan works under its
        own plan, made from its reads and writes (`session`); else it is blocked."""
        return self.mode == "auto" and self.plan is None

    @property
    def step(self) -> float:
        """The deadline of one of the STEPS rounds of a check."""
        return self.timeout / STEPS


@dataclasses.dataclass(frozen=True)
class Answer:
    """What the hook answers: its exit code, the text for stderr (the reason the agent shows
    the model on a block) and for stdout (structured output an agent reads on exit 0)."""

    code: int
    stderr: str = ""
    stdout: str = ""


def main(
    agent: str,
    argv: list[str],
    stdin: IO[bytes] | None = None,
    stderr: IO[str] | None = None,
    stdout: IO[str] | None = None,
) -> int:
    """Run the hook on stdin; returns the exit code (0 allow, 2 block). Never raises."""
    from .client import read_payload, write_answer

    try:
        data: bytes | BaseException = read_payload(stdin or sys.stdin.buffer)
    except BaseException as exc:
        data = exc
    result = decide(agent, argv, data)

    write_answer(result.stderr, result.stdout, stderr, stdout)
    return result.code


def decide(agent: str, argv: list[str], data: bytes | BaseException) -> Answer:
    """The hook's answer to one payload (`data`, or the error reading it); never raises:
    anything unexpected blocks; a payload larger than `client.MAX_PAYLOAD` is refused unread."""
    try:
        if isinstance(data, BaseException):
            raise data
        from .client import MAX_PAYLOAD, oversize

        if len(data) > MAX_PAYLOAD:
            return Answer(BLOCK, oversize())
        got = _run(agent, argv, data)
    except BaseException as exc:  # the one guard: anything unexpected blocks
        return Answer(
            BLOCK,
            f"PlanFence blocked this call: the hook failed "
            f"({type(exc).__name__}: {exc}); it fails closed",
        )
    return got if isinstance(got, Answer) else Answer(got[0], got[1])


def _run(agent: str, argv: list[str], data: bytes) -> tuple[int, str] | Answer:
    options = _options(argv)
    try:
        call = parse_payload(agent, data)
    except PayloadError as exc:
        return BLOCK, f"PlanFence blocked this call: unreadable hook input ({exc})"
    if call.event == "SessionStart":
        return _session_start(call, options)
    if call.event == "SessionEnd":  # never blocks: ends the session's intents
        from ..plans.intentclient import session_end

        timeout = options.timeout
        if agent == "codex":  # Codex kills a SessionEnd hook after END_TIMEOUT s
            from ..installers.clients import END_TIMEOUT

            timeout = min(timeout, END_TIMEOUT - END_MARGIN)
        return session_end(call, options.cluster, timeout)
    from .text import person_only

    refused = person_only(call) or _other_session(call, options)
    if refused:
        return BLOCK, refused
    if call.event in AFTER and not call.files:
        from .guard import forget_failed

        forget_failed(call, options.cluster)  # a failed call is no longer in flight
        if not options.auto:
            return ALLOW, ""  # reads and test runs make a session's own plan only
        from .auto import after

        return after(call, options)
    if not call.gated:
        return ALLOW, ""
    from ...core.errors import PlanfenceError
    from ..model.facts import plan_key
    from ..place.config import NoCluster
    from ..place.inflight import others as others_in_flight
    from ..plans.advance import check_commits
    from .text import no_chores, no_plan_message

    blocked = f"PlanFence blocked {call.describe()}{call.subagent()}"
    try:
        cdir, plan, roster, identity, step = _context(call, options)
        auto = False
        if options.auto:
            from .auto import working_plan

            session_plan = working_plan(cdir, call, plan)
            if session_plan is not None:
                plan, auto = session_plan, True
                me = options.as_agent or roster.owner_of(plan_key(plan)) or ""
                identity = cdir.identity(me)
        by_policy = _policy(call, cdir, blocked)
    except NoCluster as exc:
        return _unserved(call, options, exc, blocked)
    except (PlanfenceError, ValueError, OSError) as exc:
        return BLOCK, f"{blocked}: {no_chores(str(exc))}"
    from .guard import person_only_write

    touched = person_only_write(call, cdir)  # the fence's own files: a person's, always
    if touched:
        return BLOCK, touched
    if by_policy is not None:
        return by_policy
    if plan is None:
        return BLOCK, no_plan_message(call, cdir.root, blocked)
    if call.event == "PostToolUse":
        from .record import PlanWrites

        return PlanWrites(cdir.root, plan, roster, identity, step, auto).edit(call)

    def check(step: float) -> Verdict:
        cache = cache_path(cdir.root, plan)
        return check_commits(
            cdir.root, roster, identity, plan, timeout=step, informational=False, cache=cache
        )

    end = time.monotonic() + step * STEPS  # the whole answer fits in --timeout
    verdict = check(step)
    if auto and verdict.reason == "no_plan":  # the session's first gated call: start its plan
        from .auto import start_plan

        started = start_plan(call, cdir, plan, roster, step)
        if started:
            return BLOCK, f"{blocked}: could not start this session's plan {plan!r}: {started}"
        verdict = check(step)
    if verdict.exit_code == 2 and others_in_flight(cdir.root, plan, call.tool_use_id):
        # The plan's own calls in flight: record their targets and look again, within what is
        # left of the deadline (one step to record, the rest to check); anything else still
        # blocks.
        rest = (end - time.monotonic()) / (STEPS + 1)
        from .record import PlanWrites

        writes = PlanWrites(cdir.root, plan, roster, identity, rest, auto)
        if rest > 0 and writes.in_flight(call):
            verdict = check(rest)
    from ..plans.checklog import log_check
    from .guard import stopped_plan

    halted = stopped_plan(call, cdir.root, verdict)  # changed again: until a person re-bases
    if halted:
        log_check(cdir.root, roster, verdict, "hook", call, held=halted)  # logged as a block
        return BLOCK, halted
    if verdict.exit_code != 0:
        from ..place.config import bound_plan

        log_check(cdir.root, roster, verdict, "hook", call)  # `workspace show` reads it back
        if auto:
            from .auto import block_message as session_block_message
            from .told import with_told

            return with_told(cdir.root, call, Answer(BLOCK, session_block_message(call, verdict)))
        from .text import block_message

        own = bound_plan(cdir, call.session or None) == plan  # keep it this session's
        return BLOCK, block_message(call, verdict, session_bound=own)
    from ..plans.intentnotes import first_write_intents

    intents = first_write_intents(call, cdir, plan, roster, identity, verdict.plan_id, end)
    log_check(cdir.root, roster, verdict, "hook", call, held=intents[1] if intents[0] else "")
    if intents[0] != ALLOW:
        return Answer(*intents)
    if call.files and call.tool_use_id:
        from ..place import inflight
        from .record import expected, owner

        made = expected(call, data)  # only what the call makes is ever taken for its own
        inflight.add(cdir.root, plan, call.tool_use_id, call.cwd, call.files, owner(call), made)
    if auto:
        from .told import with_told

        return with_told(cdir.root, call, Answer(*intents))
    return Answer(*intents)  # allowed; other plans' intents on these files, on stdout


def _policy(call: ToolCall, cdir: ClusterDir, blocked: str) -> tuple[int, str] | None:
    """The answer for a call the plan cannot speak for, or None to check it: a tool the
    hook does not know, or a file outside every served worktree, is blocked unless the
    cluster's [hook] table allows it (`config.HookPolicy`)."""
    if call.event != "PreToolUse" or not (call.unknown or call.files):
        return None
    from ..place.config import hook_policy, outside, workspaces

    policy = hook_policy(cdir)
    where = f"{cdir.roster_path} under [hook]"
    if call.unknown:
        verdict = policy.tool(call.tool)
        if verdict == "allow":
            return ALLOW, ""
        if verdict == "block":
            return BLOCK, (
                f"{blocked}: PlanFence does not know what {call.tool} changes, so it cannot "
                f"check it against the plan and blocks it. Only the user can allow it (in "
                f"{where}: allow or check); do not try another tool for the same change."
            )
    far = [
        f
        for f in outside(workspaces(cdir), call.cwd, call.files)
        if not policy.may_write_outside(os.path.realpath(os.path.join(call.cwd, f)))
    ]
    if far:
        return BLOCK, (
            f"{blocked}: {', '.join(far)} is outside every worktree this cluster serves, so "
            f"no plan can speak for it. Only the user can allow such paths (in {where}: "
            f"outside)."
        )
    return None


def _context(
    call: ToolCall, options: HookOptions
) -> tuple[ClusterDir, str | None, Roster, Identity, float]:
    """The cluster folder, the plan (None: none trusted), the roster, who to connect as, and
    the deadline per step. Raises PlanfenceError (NoCluster: none serves the call's folder)
    or ValueError."""
    from ..model.facts import plan_key
    from ..place.config import find_cluster, select_plan

    cdir = find_cluster(options.cluster, Path(call.cwd))
    plan = options.plan or select_plan(cdir, call.session or None, call.agent_id)
    roster = cdir.roster()
    me = (
        options.as_agent
        or (roster.owner_of(plan_key(plan)) if plan else None)
        or roster.agents[0].name
    )
    return cdir, plan, roster, cdir.identity(me), options.step


def _unserved(
    call: ToolCall, options: HookOptions, exc: Exception, blocked: str
) -> tuple[int, str]:
    """No cluster serves the call's folder. A worktree of a repository that uses PlanFence
    (its marker is in the common git dir) blocks with the step that joins it; another
    folder blocks too, unless the hook was installed for the user (`--scope user`): a
    user-scope hook lets through what is not PlanFence's business."""
    from ..place.paths import marker

    root = getattr(exc, "root", None)
    if root is not None and marker(root) is not None:
        from .text import join_message

        return BLOCK, join_message(call, root)
    if options.scope == "user":
        return ALLOW, ""
    return BLOCK, f"{blocked}: {exc}"


def _session_start(call: ToolCall, options: HookOptions) -> tuple[int, str] | Answer:
    """Claude Code's SessionStart: join the session's worktree to its repository's cluster
    when the repository uses PlanFence and nothing serves the worktree yet (a worktree the
    agent created); in automatic mode, in a served worktree, start the session's plan and tell
    the model what PlanFence does (`autohook.session_start`). Never blocks; a failure is
    reported and the first gated call blocks."""
    from ...core.errors import PlanfenceError
    from ..place.config import NoCluster, find_cluster
    from ..place.paths import marker

    try:
        cdir = find_cluster(options.cluster, Path(call.cwd))
        if options.auto:
            from .auto import session_start

            return session_start(call, cdir, options.timeout)
        return ALLOW, ""
    except NoCluster as exc:
        if exc.root is None or marker(exc.root) is None:
            return ALLOW, ""
        root = exc.root
    except PlanfenceError:
        return ALLOW, ""
    from ..plans.join import join

    try:
        result = join(root)
    except (PlanfenceError, OSError, ValueError) as exc:
        return ALLOW, f"PlanFence could not join {root} to its repository's cluster: {exc}"
    return ALLOW, f"PlanFence: {result.text()}"


def cache_path(cluster: Path, plan: str) -> Path:
    """Where the hook keeps a plan's records between calls (CLUSTER/run/)."""
    import hashlib

    return cluster / "run" / f"hook-{hashlib.blake2b(plan.encode(), digest_size=8).hexdigest()}"


def _options(argv: list[str]) -> HookOptions:
    """The options of `--name VALUE` pairs; raises ValueError (the guard blocks) for anything
    else."""
    known = ("--cluster", "--plan", "--as", "--timeout", "--scope", "--mode")
    if len(argv) % 2 or any(argv[i] not in known for i in range(0, len(argv), 2)):
        raise ValueError(USAGE)
    given = dict(zip(argv[::2], argv[1::2], strict=False))
    if given.get("--mode", "explicit") not in ("auto", "explicit"):
        raise ValueError(USAGE)
    return HookOptions(
        cluster=Path(given["--cluster"]) if "--cluster" in given else None,
        plan=given.get("--plan") or None,
        as_agent=given.get("--as") or None,
        timeout=float(given.get("--timeout", DEFAULT_TIMEOUT)),
        scope=given.get("--scope", "project"),
        mode=given.get("--mode", "explicit"),
    )


def _other_session(call: ToolCall, options: HookOptions) -> str:
    """The reason to block an agent's shell command that runs a workspace action on another
    session than its own (`plans.access`: the rule every door applies), or "". A command on
    its own session leaves a grant in the cluster folder, by which the command, run from
    Claude Code's shell, knows which session runs it."""
    if call.event != "PreToolUse" or call.command is None or call.tool == "apply_patch":
        return ""
    from ..plans.access import grant, named_session, shell_refusal

    refused = shell_refusal(call.command, call.session or None)
    if refused:
        return f"PlanFence blocked {call.describe()}{call.subagent()}: {refused}"
    named = named_session(call.command)
    if named is not None:
        from ...core.errors import PlanfenceError
        from ..place.config import find_cluster

        try:
            grant(find_cluster(options.cluster, Path(call.cwd)).root, *named)
        except (PlanfenceError, OSError):
            pass  # no grant: the command refuses to act on the session, with its reason
    return ""
