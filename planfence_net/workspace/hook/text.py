"""The texts the model reads from the hook: why a call is blocked, and the command (by the
absolute path of this installation's `planfence`, runnable in the agent's shell) that moves
it on. Pure functions of the call and the verdict; imports are deferred (each hook call is
a fresh process; measured in `run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from ..model.machine import Verdict
    from ..model.payload import ToolCall


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
    if base_moved(verdict):
        lines.append(stop_for_person(plan))  # no re-read or re-trust of the agent's fixes it
    elif verdict.changed_again:
        lines.append(
            "It changed again after the plan was already re-made once. Stop: do not "
            "replan again; report the drift above to the user."
        )
        lines.append(stopped_line(plan))
    else:
        reread = ", ".join(verdict.reread)
        lines.append(
            (f"Re-read {reread}, then" if reread else "Re-check the workspace, then")
            + f" replan once and record the new state with "
            f"`{trust_command(call, plan, session_bound)} "
            f"...`. If it changes again, stop and report."
        )
    return "\n".join(lines + verdict.writer_lines())  # then who changed what, and how


BASE_LINES = ("- Branch changed", "- HEAD changed", "- Repository changed")


def base_moved(verdict: Verdict) -> bool:
    """Whether the drift moved the plan's repository, branch or HEAD (`classify`'s lines)."""
    return any(line.startswith(BASE_LINES) for line in verdict.lines)


def stop_for_person(plan: str) -> str:
    """What to do when the repository, branch or HEAD moved: stop; a person re-bases."""
    import shlex

    from ...cluster.command import executable

    return (
        f"The branch or HEAD changed: stop and tell the user. Only the user can re-base "
        f"this plan on it, with `{shlex.quote(executable())} workspace refresh {plan}` "
        f"(never run it yourself)."
    )


def no_plan_message(call: ToolCall, root: Path, blocked: str) -> str:
    """Why a gated call with no trusted plan is blocked, and how the model records one."""
    return (
        f"{blocked}: no trusted plan for this "
        f"{'subagent' if call.agent_id else 'session'} in {root}. Record the state "
        f"your plan relies on first: {trust_command(call, 'PLAN')} --read FILE --target FILE"
    )


def trust_command(call: ToolCall, plan: str, session_bound: bool = False) -> str:
    """The `workspace trust` command the model can run in its own shell: this installation's
    `planfence` by absolute path, bound to the call's subagent, or to its session when the
    plan is the session's own (`session_bound`: re-trusting it without `--session` would
    share it with every session)."""
    import shlex

    from ...cluster.command import executable

    words = [executable(), "workspace", "trust", plan]
    if call.agent_id:
        words += ["--session", call.session, "--agent", call.agent_id]
    elif session_bound and call.session:
        words += ["--session", call.session]
    return shlex.join(words)


def join_message(call: ToolCall, root: Path) -> str:
    """Why a call in an unserved worktree of a PlanFence repository is blocked, and the
    command (runnable in the agent's shell) that joins it."""
    import shlex

    from ...cluster.command import executable

    return (
        f"PlanFence blocked {call.describe()}{call.subagent()}: {root} is a worktree of a "
        f"repository that uses PlanFence, but no workspace owner serves it; join it to the "
        f"team's cluster first: {shlex.quote(executable())} workspace join "
        f"{shlex.quote(str(root))}"
    )


def no_chores(reason: str) -> str:
    """A reason without a command for the model to run on a file the hook did not create
    (a key file's `; run: chmod 600 KEY`): fixing the user's files is the user's decision."""
    head, sep, _ = reason.partition("; run:")
    return head + "; the user must fix this" if sep else reason


def person_only(call: ToolCall) -> str:
    """The reason to block a shell command carrying a flag only a person may pass, or ""."""
    from ..model.facts import person_command, person_flag

    if call.event != "PreToolUse" or call.command is None or call.tool == "apply_patch":
        return ""
    command = person_command(call.command)
    if command == "workspace refresh":
        return (
            f"PlanFence blocked {call.describe()}{call.subagent()}: `planfence {command}` "
            f"re-bases a plan on a new branch or HEAD and is the user's decision, never the "
            f"agent's. Do not try another way; ask the user."
        )
    if command == "workspace release":
        return (
            f"PlanFence blocked {call.describe()}{call.subagent()}: `planfence {command}` "
            f"ends a plan's intents, letting other plans write its files, and is the user's "
            f"decision, never the agent's. Do not try another way; ask the user."
        )
    if command is not None:
        return (
            f"PlanFence blocked {call.describe()}{call.subagent()}: `planfence {command}` is "
            f"run by the agent's client (or git) and the user, never from the agent's shell. "
            f"Do not try another way; ask the user."
        )
    flag = person_flag(call.command)
    if flag is None:
        return ""
    from ..plans.access import person_only as refused_flag  # one wording for every door

    return refused_flag(flag, f"{call.describe()}{call.subagent()}")


def person_path_message(call: ToolCall, touched: str) -> str:
    """Why a write to one of the fence's own files (`touched` names it) is blocked."""
    return (
        f"PlanFence blocked {call.describe()}{call.subagent()}: it would change {touched}, "
        f"one of the fence's own files, which only a person may change (whatever the plan). "
        f"Do not try another way; ask the user to make this change."
    )


def stopped_line(plan: str) -> str:
    """What a stopped plan (changed again after its one replan) waits for, as said to the
    model: a person's re-base, which no re-read replaces."""
    import shlex

    from ...cluster.command import executable

    return (
        f"The plan's writes now stay blocked until the user re-bases it with "
        f"`{shlex.quote(executable())} workspace refresh {plan}` (never run it yourself); "
        f"re-reading does not lift this."
    )


def stopped_message(call: ToolCall, plan: str) -> str:
    """Why a write of a stopped plan is blocked (`place.stops`), fresh re-read or not."""
    return (
        f"PlanFence blocked {call.describe()}{call.subagent()}: plan {plan!r} changed again "
        f"after its one replan, so it is stopped. {stopped_line(plan)} Stop and report the "
        f"drift to the user."
    )
