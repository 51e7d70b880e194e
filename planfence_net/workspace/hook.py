"""`planfence hook claude|codex`: the PreToolUse hook (and, after a file-changing call, the
PostToolUse step that records the agent's own edit, `advance`). Exit 0 lets the call run,
exit 2 blocks it and the agent shows stderr to the model as the reason.

Every failure blocks: malformed stdin, no trusted plan, an unreachable owner, a timeout, a bug
(one guard around everything, `main`). Both agents treat any exit code other than 2 as "go
ahead", so this module never exits 1. It is started for every matching tool call, so it
imports only what checking needs (no typer, rich or owner daemon), and only after stdin
parsed: `planfence_net.cli.main` sends `hook claude|codex` here before anything else loads.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING

from .payload import PayloadError, ToolCall, parse_payload

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
    "[--timeout SECONDS]"
)


def main(
    agent: str, argv: list[str], stdin: IO[bytes] | None = None, stderr: IO[str] | None = None
) -> int:
    """Run the hook; returns the exit code (0 allow, 2 block). Never raises."""
    err = stderr or sys.stderr
    try:
        code, reason = _run(agent, argv, (stdin or sys.stdin.buffer).read())
    except BaseException as exc:  # the one guard: anything unexpected blocks
        code, reason = (
            BLOCK,
            (
                f"PlanFence blocked this call: the hook failed "
                f"({type(exc).__name__}: {exc}); it fails closed"
            ),
        )
    if reason:
        try:
            err.write(reason.rstrip("\n") + "\n")
            err.flush()
        except Exception:
            pass
    return code


def _run(agent: str, argv: list[str], data: bytes) -> tuple[int, str]:
    options = _options(argv)
    try:
        call = parse_payload(agent, data)
    except PayloadError as exc:
        return BLOCK, f"PlanFence blocked this call: unreadable hook input ({exc})"
    refused = _person_only(call)
    if refused:
        return BLOCK, refused
    if not call.gated:
        return ALLOW, ""
    from ..core.errors import PlanfenceError
    from .check import run_check

    try:
        cdir, plan, roster, identity, step = _context(call, options)
    except (PlanfenceError, ValueError, OSError) as exc:
        return BLOCK, f"PlanFence blocked {call.describe()}: {exc}"
    if plan is None:
        return BLOCK, (
            f"PlanFence blocked {call.describe()}: no trusted plan for this "
            f"session in {cdir.root}. Record the state your plan relies on "
            f"first: planfence workspace trust PLAN --read FILE --target FILE"
        )
    if call.event == "PostToolUse":
        return _record_edit(call, cdir.root, plan, roster, identity, step)
    verdict = run_check(
        roster,
        identity,
        plan,
        deadline=step,
        informational=False,
        cache=cache_path(cdir.root, plan),
    )
    if verdict.exit_code == 0:
        return ALLOW, ""
    return BLOCK, block_message(call, verdict)


def _person_only(call: ToolCall) -> str:
    """The reason to block a shell command carrying a flag only a person may pass, or ""."""
    from .facts import person_flag

    if call.event != "PreToolUse" or call.command is None or call.tool == "apply_patch":
        return ""
    flag = person_flag(call.command)
    if flag is None:
        return ""
    return (
        f"PlanFence blocked {call.describe()}: {flag} lowers the plan's fence and is the "
        f"user's decision, never the agent's. Do not try another way; ask the user."
    )


def _context(
    call: ToolCall, options: dict[str, str]
) -> tuple[ClusterDir, str | None, Roster, Identity, float]:
    """The cluster folder, the plan (None: none trusted), the roster, who to connect as, and
    the deadline per step. Raises PlanfenceError or ValueError."""
    from .config import find_cluster, select_plan
    from .facts import plan_key

    cdir = find_cluster(
        Path(options["--cluster"]) if "--cluster" in options else None, Path(call.cwd)
    )
    plan = options.get("--plan") or select_plan(cdir, call.session or None)
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


def _record_edit(
    call: ToolCall, root: Path, plan: str, roster: Roster, identity: Identity, step: float
) -> tuple[int, str]:
    """PostToolUse: move the plan's trusted versions of the touched targets to what the
    agent just wrote (see `advance`). Exit 2 only shows the reason: the call already ran."""
    from ..cluster.folder import ClusterDir
    from ..core.errors import PlanfenceError
    from .advance import wait_advance
    from .config import locate, workspaces
    from .facts import file_key

    spaces = workspaces(ClusterDir(root))
    keys = [
        file_key(*found)
        for f in call.files
        if (found := locate(spaces, Path(call.cwd) / f)) is not None
    ]
    try:
        wait_advance(roster, identity, plan, keys, deadline=step)
    except (PlanfenceError, ValueError) as exc:
        return BLOCK, (
            f"PlanFence could not record {call.describe()} in plan {plan!r} "
            f"({exc}); the next call will see these files as changed."
        )
    return ALLOW, ""


def cache_path(cluster: Path, plan: str) -> Path:
    """Where the hook keeps a plan's records between calls (CLUSTER/run/)."""
    import hashlib

    return cluster / "run" / f"hook-{hashlib.blake2b(plan.encode(), digest_size=8).hexdigest()}"


def block_message(call: ToolCall, verdict: Verdict) -> str:
    """The reason the model reads: what changed, what to re-read, what to do next."""
    plan = verdict.plan
    if verdict.level == "undecided":
        return (
            f"PlanFence blocked {call.describe()}: cannot validate plan {plan!r}: "
            f"{verdict.detail}. The call is blocked because the plan cannot be checked "
            f"(it fails closed); report this to the user if it persists."
        )
    lines = [
        f"PlanFence blocked {call.describe()}: plan {plan!r} is stale ({verdict.level} drift).",
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
            + f" replan once and record the new state with `planfence workspace "
            f"trust {plan} ...`. If it changes again, stop and report."
        )
    return "\n".join(lines)


def _options(argv: list[str]) -> dict[str, str]:
    """--name VALUE pairs; raises ValueError (the guard blocks) for anything else."""
    known = ("--cluster", "--plan", "--as", "--timeout")
    if len(argv) % 2 or any(argv[i] not in known for i in range(0, len(argv), 2)):
        raise ValueError(USAGE)
    return dict(zip(argv[::2], argv[1::2], strict=False))
