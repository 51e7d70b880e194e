"""`planfence hook claude|codex`: the PreToolUse hook (and, after a file-changing call, the
PostToolUse step that records the agent's own edit, `advance`; and Claude Code's SessionStart,
which joins an unserved worktree, `join`). Exit 0 lets the call run, exit 2 blocks it and the
agent shows stderr to the model as the reason, which names commands by the absolute path of
this installation's `planfence` so the model can run them. A subagent's call (`agent_id`) is
checked against the subagent's plan; parallel calls of one plan do not block each other
(`inflight`). Where no cluster serves the folder, a worktree of a repository that uses
PlanFence blocks with the step that joins it, and `--scope user` lets other folders through.

A shell command that runs a workspace action on another session than the caller's own is
blocked with the words every door refuses it with (`plans.access`, `context.other_session`).

Every failure blocks: malformed stdin, no trusted plan, an unreachable owner, a timeout, a bug
(one guard around everything, `main`). Both agents treat any exit code other than 2 as "go
ahead", so this module never exits 1. It is started for every matching tool call, so it
imports only what checking needs (no typer, rich or owner daemon), and only after stdin
parsed: `planfence_net.cli.main` sends `hook claude|codex` here before anything else loads.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

from ..model.payload import AFTER, PayloadError, ToolCall, parse_payload

# Imports inside functions are deliberate: each hook call is a fresh process. hook.run alone
# imports in ~20 ms, every hook module with the plans it calls in ~140 ms, anyio, the owner
# daemon and cluster start-up ~90 ms more (best of 9 runs, timed around the import), so a call
# loads only its own path (tests/workspace/test_hook.py::test_the_hook_path_imports_nothing_heavy).

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
    "usage: planfence hook CLIENT [--cluster DIR] [--plan NAME] [--as AGENT] "
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
    """The hook's answer to one payload (`data`, or the error reading it) of client `agent`,
    in that client's form (`clients.table`: mapped into the normalized form, and the answer
    back); never raises: anything unexpected blocks; a payload larger than
    `client.MAX_PAYLOAD` is refused unread."""
    from ..clients.table import answered, normalized

    mapped = normalized(agent, data)
    got = _decide(agent, argv, mapped.data)
    return Answer(*answered(agent, mapped, (got.code, got.stderr, got.stdout)))


def _decide(agent: str, argv: list[str], data: bytes | BaseException) -> Answer:
    """`decide` on a payload in the normalized form."""
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


def _git_setup(cwd: str) -> frozenset[str]:
    """What git's configuration at `cwd` can make a reading git command start (imported only
    when a git command is the one thing the read-only screen has left to decide)."""
    from ..place.gitsetup import git_setup

    return git_setup(cwd)


def _run(agent: str, argv: list[str], data: bytes) -> tuple[int, str] | Answer:
    options = _options(argv)
    try:
        call = parse_payload(agent, data, _git_setup)
    except PayloadError as exc:
        return BLOCK, f"PlanFence blocked this call: unreadable hook input ({exc})"
    if call.event == "SessionStart":
        from .context import session_start

        return session_start(call, options)
    if call.event == "SessionEnd":  # never blocks: ends the session's intents
        return _session_end(agent, call, options)
    from .context import other_session
    from .text import person_only

    refused = person_only(call) or other_session(call, options)
    if refused:
        return BLOCK, refused
    if call.event in AFTER and not call.files:
        return _after_without_files(call, options)
    if not call.gated:
        return ALLOW, ""
    return _gated(call, options, data)


def _session_end(agent: str, call: ToolCall, options: HookOptions) -> tuple[int, str]:
    """A session ended: log it (`checklog.log_session_end`), then end its intents, within
    what the agent gives a SessionEnd hook."""
    from ..plans.checklog import log_session_end
    from ..plans.intentclient import session_end

    log_session_end(call, options.cluster)  # first: a reader greys it even if ending is cut
    timeout = options.timeout
    if agent == "codex":  # Codex kills a SessionEnd hook after END_TIMEOUT s
        from ..installers.clients import END_TIMEOUT

        timeout = min(timeout, END_TIMEOUT - END_MARGIN)
    return session_end(call, options.cluster, timeout)


def _after_without_files(call: ToolCall, options: HookOptions) -> tuple[int, str] | Answer:
    """After a call that changed no file: it is no longer in flight; in automatic mode its
    reads and test runs go into the session's own plan."""
    from .guard import forget_failed

    forget_failed(call, options.cluster)  # a failed call is no longer in flight
    if not options.auto:
        return ALLOW, ""  # reads and test runs make a session's own plan only
    from .auto import after

    return after(call, options)


@dataclasses.dataclass(frozen=True)
class _Checked:
    """A gated call's plan and how to check it: the cluster folder, the plan, the roster, who
    to connect as, the deadline per step, and whether the plan is the session's own (auto)."""

    cdir: ClusterDir
    plan: str
    roster: Roster
    identity: Identity
    step: float
    auto: bool

    def check(self, step: float) -> Verdict:
        """Check the plan's commits against the owner, within `step` seconds."""
        from ..plans.advance import check_commits

        cache = cache_path(self.cdir.root, self.plan)
        return check_commits(
            self.cdir.root,
            self.roster,
            self.identity,
            self.plan,
            timeout=step,
            informational=False,
            cache=cache,
        )


def _gated(call: ToolCall, options: HookOptions, data: bytes) -> tuple[int, str] | Answer:
    """A call the plan speaks for: find its plan, apply the cluster's policy and the fence's
    own files, then record an edit (PostToolUse) or check the call (PreToolUse)."""
    from ...core.errors import PlanfenceError
    from ..place.config import NoCluster
    from .context import context, policy_answer, unserved
    from .guard import person_only_write
    from .text import no_chores, no_plan_message

    blocked = f"PlanFence blocked {call.describe()}{call.subagent()}"
    try:
        cdir, plan, roster, identity, step = context(call, options)
        plan, identity, auto = _own_plan(call, options, cdir, plan, roster, identity)
        by_policy = policy_answer(call, cdir, blocked)
    except NoCluster as exc:
        return unserved(call, options, exc, blocked)
    except (PlanfenceError, ValueError, OSError) as exc:
        return BLOCK, f"{blocked}: {no_chores(str(exc))}"
    touched = person_only_write(call, cdir)  # the fence's own files: a person's, always
    if touched:
        return BLOCK, touched
    if by_policy is not None:
        return by_policy
    if plan is None:
        return BLOCK, no_plan_message(call, cdir.root, blocked)
    at = _Checked(cdir, plan, roster, identity, step, auto)
    if call.event == "PostToolUse":
        from .record import PlanWrites

        return PlanWrites(cdir.root, plan, roster, identity, step, auto).edit(call)
    return _pre_tool_use(call, at, blocked, data)


def _own_plan(
    call: ToolCall,
    options: HookOptions,
    cdir: ClusterDir,
    plan: str | None,
    roster: Roster,
    identity: Identity,
) -> tuple[str | None, Identity, bool]:
    """The plan to check the call against, who to connect as, and whether the plan is the
    session's own: in automatic mode, a session's working plan where it has one."""
    if not options.auto:
        return plan, identity, False
    from ..model.facts import plan_key
    from .auto import working_plan

    session_plan = working_plan(cdir, call, plan)
    if session_plan is None:
        return plan, identity, False
    me = options.as_agent or roster.owner_of(plan_key(session_plan)) or ""
    return session_plan, cdir.identity(me), True


def _pre_tool_use(
    call: ToolCall, at: _Checked, blocked: str, data: bytes
) -> tuple[int, str] | Answer:
    """Check a gated call before it runs: start the session's plan on its first call (auto),
    look again once the plan's own calls in flight are recorded, then answer."""
    from ..place.inflight import others as others_in_flight

    end = time.monotonic() + at.step * STEPS  # the whole answer fits in --timeout
    verdict = at.check(at.step)
    if at.auto and verdict.reason == "no_plan":  # the session's first gated call: start its plan
        from .auto import start_plan

        started = start_plan(call, at.cdir, at.plan, at.roster, at.step)
        if started:
            return BLOCK, f"{blocked}: could not start this session's plan {at.plan!r}: {started}"
        verdict = at.check(at.step)
    rest = (end - time.monotonic()) / (STEPS + 1)
    if verdict.exit_code == 2 and rest > 0:
        # A drift may be the plan's own edits: record the targets of its calls still in
        # flight, then look again, within what is left of the deadline (one step to record,
        # the rest to check). Look again even with none in flight: a call whose edit this
        # check saw may have recorded it (and dropped its note) since the plan was read.
        # Anything else still blocks.
        if others_in_flight(at.cdir.root, at.plan, call.tool_use_id):
            from .record import PlanWrites

            PlanWrites(at.cdir.root, at.plan, at.roster, at.identity, rest, at.auto).in_flight(call)
        verdict = at.check(rest)
    return _answer(call, at, verdict, end, data)


def _answer(
    call: ToolCall, at: _Checked, verdict: Verdict, end: float, data: bytes
) -> tuple[int, str] | Answer:
    """The answer to a checked call, logged for `workspace show`: a stopped plan or a failed
    check blocks; an allowed call publishes its first-write intents and is kept in flight."""
    from ..plans.checklog import log_check
    from .guard import stopped_plan

    cdir, plan = at.cdir, at.plan
    halted = stopped_plan(call, cdir.root, verdict)  # changed again: until a person re-bases
    if halted:
        log_check(cdir.root, at.roster, verdict, "hook", call, held=halted)  # logged as a block
        return BLOCK, halted
    if verdict.exit_code != 0:
        log_check(cdir.root, at.roster, verdict, "hook", call)  # `workspace show` reads it back
        return _refused(call, at, verdict)
    from ..plans.intentnotes import first_write_intents

    intents = first_write_intents(call, cdir, plan, at.roster, at.identity, verdict.plan_id, end)
    log_check(cdir.root, at.roster, verdict, "hook", call, held=intents[1] if intents[0] else "")
    if intents[0] != ALLOW:
        return Answer(*intents)
    if call.files and call.tool_use_id:
        from ..place import inflight
        from .record import expected, owner

        made = expected(call, data)  # only what the call makes is ever taken for its own
        inflight.add(cdir.root, plan, call.tool_use_id, call.cwd, call.files, owner(call), made)
    if at.auto:
        from .told import with_told

        return with_told(cdir.root, call, Answer(*intents))
    return Answer(*intents)  # allowed; other plans' intents on these files, on stdout


def _refused(call: ToolCall, at: _Checked, verdict: Verdict) -> tuple[int, str] | Answer:
    """The block message for a call its plan's check refused."""
    if at.auto:
        from .auto import block_message as session_block_message
        from .told import with_told

        return with_told(at.cdir.root, call, Answer(BLOCK, session_block_message(call, verdict)))
    from ..place.config import bound_plan
    from .text import block_message

    own = bound_plan(at.cdir, call.session or None) == at.plan  # keep it this session's
    return BLOCK, block_message(call, verdict, session_bound=own)


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
