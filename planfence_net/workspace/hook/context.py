"""Where a hook call lands, settled before its plan is checked: the cluster that serves the
call's folder and who to connect as (`context`), the cluster's [hook] policy for a tool or a
path no plan can speak for (`policy_answer`), a folder no cluster serves (`unserved`), Claude Code's
SessionStart (`session_start`) and a shell command aimed at another session
(`other_session`). `run` composes these into the hook's answer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from .run import ALLOW, BLOCK

# Imports inside functions are deliberate: each hook call is a fresh process that loads only
# its own path (measured in `workspace/hook/run.py`).

if TYPE_CHECKING:
    from ...cluster.folder import ClusterDir
    from ...core.identity import Identity
    from ...core.roster import Roster
    from ..model.payload import ToolCall
    from .run import Answer, HookOptions


def policy_answer(call: ToolCall, cdir: ClusterDir, blocked: str) -> tuple[int, str] | None:
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


def context(
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


def unserved(call: ToolCall, options: HookOptions, exc: Exception, blocked: str) -> tuple[int, str]:
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


def session_start(call: ToolCall, options: HookOptions) -> tuple[int, str] | Answer:
    """Claude Code's SessionStart: join the session's worktree to its repository's cluster
    when the repository uses PlanFence and nothing serves the worktree yet (a worktree the
    agent created); in automatic mode, in a served worktree, start the session's plan and tell
    the model what PlanFence does (`auto.session_start`). Never blocks; a failure is
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


def other_session(call: ToolCall, options: HookOptions) -> str:
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
