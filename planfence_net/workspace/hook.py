"""`planfence hook claude|codex`: the PreToolUse hook (and, after a file-changing call, the
PostToolUse step that records the agent's own edit, `advance`; and Claude Code's SessionStart,
which joins an unserved worktree, `join`). Exit 0 lets the call run, exit 2 blocks it and the
agent shows stderr to the model as the reason, which names commands by the absolute path of
this installation's `planfence` so the model can run them. A subagent's call (`agent_id`) is
checked against the subagent's plan; parallel calls of one plan do not block each other
(`inflight`). Where no cluster serves the folder, a worktree of a repository that uses
PlanFence blocks with the step that joins it, and `--scope user` lets other folders through.

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

from .payload import AFTER, PayloadError, ToolCall, parse_payload

if TYPE_CHECKING:
    from ..cluster.folder import ClusterDir
    from ..core.identity import Identity
    from ..core.roster import Roster
    from .machine import Verdict

ALLOW, BLOCK = 0, 2
DEFAULT_TIMEOUT = 10.0
STEPS = 4  # rounds of one check: the plan, its lineage, the heads, a drift's second look
USAGE = (
    "usage: planfence hook claude|codex [--cluster DIR] [--plan NAME] [--as AGENT] "
    "[--timeout SECONDS] [--scope user|project] [--mode auto|explicit]"
)


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
    try:
        data = (stdin or sys.stdin.buffer).read()
    except BaseException as exc:
        data = exc
    result = decide(agent, argv, data)
    for text, stream in (
        (result.stdout, stdout or sys.stdout),
        (result.stderr, stderr or sys.stderr),
    ):
        if text:
            try:
                stream.write(text.rstrip("\n") + "\n")
                stream.flush()
            except Exception:
                pass
    return result.code


def decide(agent: str, argv: list[str], data: bytes | BaseException) -> Answer:
    """The hook's answer to one payload (`data`, or the error reading it); never raises:
    anything unexpected blocks."""
    try:
        if isinstance(data, BaseException):
            raise data
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
        from .intentclient import session_end

        explicit = Path(options["--cluster"]) if "--cluster" in options else None
        return session_end(call, explicit, float(options.get("--timeout", DEFAULT_TIMEOUT)))
    refused = _person_only(call)
    if refused:
        return BLOCK, refused
    if call.event in AFTER and not call.files:
        if not _auto(options):
            return ALLOW, ""  # reads and test runs make a session's own plan only
        from .autohook import after

        return after(call, options)
    if not call.gated:
        return ALLOW, ""
    from ..core.errors import PlanfenceError
    from .check import run_check
    from .config import NoCluster
    from .facts import plan_key
    from .inflight import others as others_in_flight

    blocked = f"PlanFence blocked {call.describe()}{call.subagent()}"
    try:
        cdir, plan, roster, identity, step = _context(call, options)
        auto = False
        if _auto(options):
            from .autohook import working_plan

            session_plan = working_plan(cdir, call, plan)
            if session_plan is not None:
                plan, auto = session_plan, True
                me = options.get("--as") or roster.owner_of(plan_key(plan)) or ""
                identity = cdir.identity(me)
        by_policy = _policy(call, cdir, blocked)
    except NoCluster as exc:
        return _unserved(call, options, exc, blocked)
    except (PlanfenceError, ValueError, OSError) as exc:
        return BLOCK, f"{blocked}: {_no_chores(str(exc))}"
    if by_policy is not None:
        return by_policy
    if plan is None:
        return BLOCK, (
            f"{blocked}: no trusted plan for this "
            f"{'subagent' if call.agent_id else 'session'} in {cdir.root}. Record the state "
            f"your plan relies on first: {trust_command(call, 'PLAN')} --read FILE --target FILE"
        )
    if call.event == "PostToolUse":
        return _record_edit(call, cdir.root, plan, roster, identity, step, auto)

    def check(step: float) -> Verdict:
        cache = cache_path(cdir.root, plan)
        return run_check(roster, identity, plan, timeout=step, informational=False, cache=cache)

    end = time.monotonic() + step * STEPS  # the whole answer fits in --timeout
    verdict = check(step)
    if auto and verdict.reason == "no_plan":  # the session's first gated call: start its plan
        from .autohook import start_plan

        started = start_plan(call, cdir, plan, roster, step)
        if started:
            return BLOCK, f"{blocked}: could not start this session's plan {plan!r}: {started}"
        verdict = check(step)
    if verdict.exit_code == 2 and others_in_flight(cdir.root, plan, call.tool_use_id):
        # The plan's own calls in flight: record their targets and look again, within what is
        # left of the deadline (one step to record, the rest to check); anything else still
        # blocks.
        rest = (end - time.monotonic()) / (STEPS + 1)
        if rest > 0 and _record_in_flight(call, cdir.root, plan, roster, identity, rest, auto):
            verdict = check(rest)
    from .checklog import log_check

    log_check(cdir.root, roster, verdict, "hook", call)  # `workspace show` reads it back
    if verdict.exit_code != 0:
        from .config import bound_plan

        if auto:
            from .autohook import block_message as session_block_message

            return BLOCK, session_block_message(call, verdict)
        own = bound_plan(cdir, call.session or None) == plan  # keep it this session's
        return BLOCK, block_message(call, verdict, session_bound=own)
    from .intentnotes import first_write_intents

    intents = first_write_intents(call, cdir, plan, roster, identity, verdict.plan_id, end)
    if intents[0] != ALLOW:
        return Answer(*intents)
    if call.files and call.tool_use_id:
        from . import inflight

        inflight.add(cdir.root, plan, call.tool_use_id, call.cwd, call.files, _owner(call))
    return Answer(*intents)  # allowed; other plans' intents on these files, on stdout


def _owner(call: ToolCall) -> str:
    """Whose call this is: the session, and the subagent within it."""
    return f"{call.session}/{call.agent_id or ''}"


def _policy(call: ToolCall, cdir: ClusterDir, blocked: str) -> tuple[int, str] | None:
    """The answer for a call the plan cannot speak for, or None to check it: a tool the
    hook does not know, or a file outside every served worktree, is blocked unless the
    cluster's [hook] table allows it (`config.HookPolicy`)."""
    if call.event != "PreToolUse" or not (call.unknown or call.files):
        return None
    from .config import hook_policy, outside, workspaces

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


def _no_chores(reason: str) -> str:
    """A reason without a command for the model to run on a file the hook did not create
    (a key file's `; run: chmod 600 KEY`): fixing the user's files is the user's decision."""
    head, sep, _ = reason.partition("; run:")
    return head + "; the user must fix this" if sep else reason


def _person_only(call: ToolCall) -> str:
    """The reason to block a shell command carrying a flag only a person may pass, or ""."""
    from .facts import person_command, person_flag

    if call.event != "PreToolUse" or call.command is None or call.tool == "apply_patch":
        return ""
    refresh = person_command(call.command)
    if refresh is not None:
        return (
            f"PlanFence blocked {call.describe()}{call.subagent()}: `planfence {refresh}` "
            f"re-bases a plan on a new branch or HEAD and is the user's decision, never the "
            f"agent's. Do not try another way; ask the user."
        )
    flag = person_flag(call.command)
    if flag is None:
        return ""
    return (
        f"PlanFence blocked {call.describe()}{call.subagent()}: {flag} lowers the plan's fence and is the "
        f"user's decision, never the agent's. Do not try another way; ask the user."
    )


def _context(
    call: ToolCall, options: dict[str, str]
) -> tuple[ClusterDir, str | None, Roster, Identity, float]:
    """The cluster folder, the plan (None: none trusted), the roster, who to connect as, and
    the deadline per step. Raises PlanfenceError (NoCluster: none serves the call's folder)
    or ValueError."""
    from .config import find_cluster, select_plan
    from .facts import plan_key

    cdir = find_cluster(
        Path(options["--cluster"]) if "--cluster" in options else None, Path(call.cwd)
    )
    plan = options.get("--plan") or select_plan(cdir, call.session or None, call.agent_id)
    roster = cdir.roster()
    me = (
        options.get("--as")
        or (roster.owner_of(plan_key(plan)) if plan else None)
        or roster.agents[0].name
    )
    return (
        cdir,
        plan,
        roster,
        cdir.identity(me),
        float(options.get("--timeout", DEFAULT_TIMEOUT)) / STEPS,
    )


def _unserved(
    call: ToolCall, options: dict[str, str], exc: Exception, blocked: str
) -> tuple[int, str]:
    """No cluster serves the call's folder. A worktree of a repository that uses PlanFence
    (its marker is in the common git dir) blocks with the step that joins it; another
    folder blocks too, unless the hook was installed for the user (`--scope user`): a
    user-scope hook lets through what is not PlanFence's business."""
    from .paths import marker

    root = getattr(exc, "root", None)
    if root is not None and marker(root) is not None:
        return BLOCK, join_message(call, root)
    if options.get("--scope") == "user":
        return ALLOW, ""
    return BLOCK, f"{blocked}: {exc}"


def join_message(call: ToolCall, root: Path) -> str:
    """Why a call in an unserved worktree of a PlanFence repository is blocked, and the
    command (runnable in the agent's shell) that joins it."""
    import shlex

    from .paths import executable

    return (
        f"PlanFence blocked {call.describe()}{call.subagent()}: {root} is a worktree of a "
        f"repository that uses PlanFence, but no workspace owner serves it; join it to the "
        f"team's cluster first: {shlex.quote(executable())} workspace join "
        f"{shlex.quote(str(root))}"
    )


def _session_start(call: ToolCall, options: dict[str, str]) -> tuple[int, str] | Answer:
    """Claude Code's SessionStart: join the session's worktree to its repository's cluster
    when the repository uses PlanFence and nothing serves the worktree yet (a worktree the
    agent created); in automatic mode, in a served worktree, start the session's plan and tell
    the model what PlanFence does (`autohook.session_start`). Never blocks; a failure is
    reported and the first gated call blocks."""
    from ..core.errors import PlanfenceError
    from .config import NoCluster, find_cluster
    from .paths import marker

    try:
        cdir = find_cluster(
            Path(options["--cluster"]) if "--cluster" in options else None, Path(call.cwd)
        )
        if _auto(options):
            from .autohook import session_start

            return session_start(call, cdir, float(options.get("--timeout", DEFAULT_TIMEOUT)))
        return ALLOW, ""
    except NoCluster as exc:
        if exc.root is None or marker(exc.root) is None:
            return ALLOW, ""
        root = exc.root
    except PlanfenceError:
        return ALLOW, ""
    from .join import join

    try:
        result = join(root)
    except (PlanfenceError, OSError, ValueError) as exc:
        return ALLOW, f"PlanFence could not join {root} to its repository's cluster: {exc}"
    return ALLOW, f"PlanFence: {result.text()}"


def _file_keys(root: Path, cwd: str, files: list[str] | tuple[str, ...]) -> list[str]:
    """The file keys of `files` (relative to `cwd`) inside the cluster's worktrees."""
    from ..cluster.folder import ClusterDir
    from .config import locate, workspaces
    from .facts import file_key

    spaces = workspaces(ClusterDir(root))
    return [file_key(*found) for f in files if (found := locate(spaces, Path(cwd) / f)) is not None]


def _record_in_flight(
    call: ToolCall,
    root: Path,
    plan: str,
    roster: Roster,
    identity: Identity,
    step: float,
    auto: bool = False,
) -> bool:
    """Record the targets of the plan's other calls in flight (see `inflight`); returns
    whether there were any (and they were recorded)."""
    from ..core.errors import PlanfenceError
    from . import inflight

    pending = inflight.others(root, plan, call.tool_use_id)
    keys = [k for cwd, files in pending for k in _file_keys(root, cwd, files)]
    if not keys:
        return False
    try:
        return _advance(root, plan, roster, identity, keys, step, auto)
    except (PlanfenceError, ValueError):
        return False


def _advance(
    root: Path,
    plan: str,
    roster: Roster,
    identity: Identity,
    keys: list[str],
    step: float,
    auto: bool,
    landed: bool = False,
) -> bool:
    """Record the agent's own writes of `keys`: a trusted plan moves its declared targets
    (`advance`); a session's automatic plan takes every written file as a target
    (`session`). Returns whether the plan record was written."""
    if auto:
        from .autohook import record_writes

        return record_writes(root, plan, roster, keys, step, landed)
    from .advance import wait_advance

    return bool(wait_advance(roster, identity, plan, keys, step_timeout=step))


def _record_edit(
    call: ToolCall,
    root: Path,
    plan: str,
    roster: Roster,
    identity: Identity,
    step: float,
    auto: bool = False,
) -> tuple[int, str]:
    """PostToolUse: move the plan's trusted versions of the touched targets to what the
    agent just wrote (see `advance`). Exit 2 only shows the reason: the call already ran."""
    from ..core.errors import PlanfenceError
    from . import inflight

    note = inflight.mine(root, plan, call.tool_use_id, _owner(call)) if call.tool_use_id else None
    if note is None:
        return BLOCK, (
            f"PlanFence did not record {call.describe()}{call.subagent()} in plan {plan!r}: "
            f"no PreToolUse of this session let this call ({call.tool_use_id or 'no tool_use_id'}) "
            f"through; the next call will see these files as changed."
        )
    cwd, files = note
    keys = _file_keys(root, cwd, [f for f in files if f in call.files])
    try:
        _advance(root, plan, roster, identity, keys, step, auto, landed=True)
    except (PlanfenceError, ValueError) as exc:
        return BLOCK, (
            f"PlanFence could not record {call.describe()}{call.subagent()} in plan {plan!r} "
            f"({exc}); the next call will see these files as changed."
        )
    if call.tool_use_id:  # always set here: a Post without one was refused above
        inflight.remove(root, plan, call.tool_use_id)
    return ALLOW, ""


def trust_command(call: ToolCall, plan: str, session_bound: bool = False) -> str:
    """The `workspace trust` command the model can run in its own shell: this installation's
    `planfence` by absolute path, bound to the call's subagent, or to its session when the
    plan is the session's own (`session_bound`: re-trusting it without `--session` would
    share it with every session)."""
    import shlex

    from .paths import executable

    words = [executable(), "workspace", "trust", plan]
    if call.agent_id:
        words += ["--session", call.session, "--agent", call.agent_id]
    elif session_bound and call.session:
        words += ["--session", call.session]
    return shlex.join(words)


def cache_path(cluster: Path, plan: str) -> Path:
    """Where the hook keeps a plan's records between calls (CLUSTER/run/)."""
    import hashlib

    return cluster / "run" / f"hook-{hashlib.blake2b(plan.encode(), digest_size=8).hexdigest()}"


def block_message(call: ToolCall, verdict: Verdict, session_bound: bool = False) -> str:
    """The reason the model reads: what changed, what to re-read, what to do next (with a
    command it can run as written; `session_bound`: the plan is the session's own)."""
    plan = verdict.plan
    blocked = f"PlanFence blocked {call.describe()}{call.subagent()}"
    if verdict.level == "undecided":
        return (
            f"{blocked}: cannot validate plan {plan!r}: "
            f"{verdict.detail}. The call is blocked because the plan cannot be checked "
            f"(it fails closed); report this to the user if it persists."
        )
    lines = [
        f"{blocked}: plan {plan!r} is stale ({verdict.level} drift).",
        *verdict.lines,
    ]
    if verdict.changed_again:
        lines.append(
            "It changed again after the plan was already re-made once. Stop: do not "
            "replan again; report the drift above to the user."
        )
    else:
        reread = ", ".join(verdict.reread)
        lines.append(
            (f"Re-read {reread}, then" if reread else "Re-check the workspace, then")
            + f" replan once and record the new state with "
            f"`{trust_command(call, plan, session_bound)} "
            f"...`. If it changes again, stop and report."
        )
    return "\n".join(lines)


def _options(argv: list[str]) -> dict[str, str]:
    """--name VALUE pairs; raises ValueError (the guard blocks) for anything else."""
    known = ("--cluster", "--plan", "--as", "--timeout", "--scope", "--mode")
    if len(argv) % 2 or any(argv[i] not in known for i in range(0, len(argv), 2)):
        raise ValueError(USAGE)
    options = dict(zip(argv[::2], argv[1::2], strict=False))
    if options.get("--mode", "explicit") not in ("auto", "explicit"):
        raise ValueError(USAGE)
    return options


def _auto(options: dict[str, str]) -> bool:
    """Automatic mode (`--mode auto`): a session without a trusted plan works under its own
    plan, made from its reads and writes (`session`); else it is blocked."""
    return options.get("--mode") == "auto" and "--plan" not in options
