"""The hook's automatic mode (`planfence hook claude|codex --mode auto`, what `hook install`
writes unless `--explicit`): a session without an explicitly trusted plan is not blocked; it
works under its own plan (`session.auto_plan`), made from what its agent actually did.

    SessionStart (Claude Code)    start the session's plan (repo, branch, HEAD, status) and
                                  tell the model, in two sentences, what PlanFence does
    PreToolUse of a write         check the session's plan like any trusted state; the first
                                  gated call of a session without a plan starts it and runs
    PostToolUse of a read         Read/NotebookRead, or a shell command that reads files
                                  (`reads.read_operands`, a heuristic), or a search or diff
                                  whose output showed files (`shown`: grep -r, rg, git grep,
                                  git diff/log -p/show, a content-mode Grep): existing files
                                  inside a served worktree join the plan as `read`, and the
                                  lockfiles beside a manifest among them as `lockfile`
    PostToolUse of a write        the written files join as `target` (`hookrecord.PlanWrites.advance`)
    PostToolUse(Failure) of a     a configured test command (`[hook] tests` in the cluster's
    test command                  cluster.toml, else `reads.DEFAULT_TEST_COMMANDS`) records
                                  evidence with its exit code (Claude Code says it; Codex does
                                  not: recorded as unknown)

An explicitly trusted plan of the session (or the folder's shared current plan) takes
precedence: then nothing here runs and the hook behaves as in explicit mode. A block names
the files to re-read (relevant) or the branch/HEAD change (critical: only a person re-bases
the plan, `planfence workspace refresh`; no re-read is asked for then); a re-read moves the
fact to its new version and is the plan's one replan, so a drift after it is "changed
again: stop and report".

A subagent's call (`agent_id`) works under the subagent's own plan, which derives from its
session's plan when it starts (`parent_plan`, `session.Change.derive`): what the parent had
read blocks the subagent's writes when it drifts, named as the parent's read. When a
subagent's write lands on a file the parent's plan had seen, the parent's next call is told
(`told`: after a block's reason, else as `additionalContext`).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..model.payload import SHELLS, ToolCall
from ..place.paths import session_marker

# Imports inside functions are deliberate: each hook call is a fresh process that loads only
# its own path (measured in `workspace/hook/run.py`).

if TYPE_CHECKING:
    from ...cluster.folder import ClusterDir
    from ...core.roster import Roster
    from ..model.machine import Verdict
    from .run import Answer, HookOptions

CONTEXT = (
    "PlanFence is active in this worktree: it records the files you read and write, and "
    "blocks a write when one of them, the branch or HEAD changed since (another agent, a "
    "branch switch). When a write is blocked, re-read the files the message names and retry "
    "the same call once; if it is blocked again, or the branch or HEAD changed, stop and "
    "report to the user."
)


def session_plan(call: ToolCall) -> str:
    """The automatic plan of the call's session (and subagent)."""
    from ..plans.session import auto_plan

    return auto_plan(call.session, call.agent_id)


def parent_plan(call: ToolCall) -> str | None:
    """For a subagent's call, the plan its own derives from: its session's automatic plan
    (a Claude Code subagent shares its parent's session id and cannot start another)."""
    from ..plans.session import auto_plan

    return auto_plan(call.session) if call.agent_id else None


def working_plan(cdir: ClusterDir, call: ToolCall, selected: str | None) -> str | None:
    """The session's automatic plan when the call is to be checked against it, else None
    (the `selected` plan, `config.select_plan`'s, is). A plan trusted for this session (or
    subagent) takes precedence; the folder's shared current plan does only for a session
    that has not started its own (its SessionStart starts it, `session_start`; a subagent
    of a session that has is that session's too): trusting a shared plan never moves a
    session off its automatic plan (nor, `trust.stale_binding`, does trusting one for the session while
    the automatic plan is stale, unless it covers it)."""
    from ..place.config import bound_plan

    if not call.session:
        return None
    own = (bound_plan(cdir, call.session, call.agent_id) if call.agent_id else None) or (
        bound_plan(cdir, call.session)
    )
    if own is not None:
        return None
    plan = session_plan(call)
    parent = parent_plan(call)  # a subagent's: its session's plan
    if selected is None or session_marker(cdir.root, plan).exists():
        return plan
    if parent is not None and session_marker(cdir.root, parent).exists():
        return plan  # the parent works under its automatic plan: its subagents derive from it
    return None


def note_working(root: Path, plan: str, call: ToolCall | None = None) -> None:
    """Remember that a session works under its automatic plan `plan` (see `working_plan`);
    for a subagent's `call`, also whose plan it derives from (see `told.parent_of`)."""
    path = session_marker(root, plan)
    path.parent.mkdir(parents=True, exist_ok=True)
    parent = parent_plan(call) if call is not None else None
    if parent is None:
        path.touch()
        return
    note = {"parent": parent, "subagent": call.agent_id, "type": call.agent_type} if call else {}
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(note))
    tmp.replace(path)


def agents_here(cdir: ClusterDir, cwd: str) -> tuple[str, ...]:
    """The workspace agent serving `cwd` (the innermost worktree holding it), else every
    workspace agent of the cluster."""
    from ..place.config import workspaces

    spaces = workspaces(cdir)
    here = Path(os.path.realpath(cwd))
    inside = [
        name
        for name, root in spaces.items()
        if here == Path(os.path.realpath(root)) or here.is_relative_to(os.path.realpath(root))
    ]
    if inside:
        return (max(inside, key=lambda name: len(Path(os.path.realpath(spaces[name])).parts)),)
    return tuple(spaces)


def _who(call: ToolCall) -> dict[str, str | None]:
    """What the plan record says about whose plan it is."""
    return {"session": call.session, "agent": call.agent_id, "worktree": call.cwd}


def start_plan(call: ToolCall, cdir: ClusterDir, plan: str, roster: Roster, step: float) -> str:
    """Start the session's plan (its worktree's repo, branch, HEAD, status as they are now);
    returns "" or why it could not."""
    from ...core.errors import PlanfenceError
    from ..plans.session import Change, wait_record

    try:
        note_working(cdir.root, plan, call)
        wait_record(
            roster,
            cdir.identity,
            plan,
            Change(agents=agents_here(cdir, call.cwd), extra=_who(call), derive=parent_plan(call)),
            step_timeout=step,
        )
    except (PlanfenceError, ValueError, OSError) as exc:
        return str(exc)
    return ""


def after(call: ToolCall, options: HookOptions) -> tuple[int, str] | Answer:
    """PostToolUse (or PostToolUseFailure) of a call that named no written file: record the
    files it read or its output showed (`shown`; a manifest's lockfiles with it) and, for a
    test command, its evidence in the session's plan, and tell the model what its subagents
    changed among the files it had read (`told`). Exit 2 only shows the model why recording
    failed (the call already ran)."""
    from ..model.reads import read_operands

    operands = [*call.reads, *call.shown]
    shell = call.command is not None and call.tool in SHELLS
    if shell and call.event == "PostToolUse":
        operands += read_operands(call.command or "")
    if not operands and not shell:
        return 0, ""
    from ...core.errors import PlanfenceError
    from ..place.config import NoCluster, find_cluster, select_plan

    try:
        cdir = find_cluster(options.cluster, Path(call.cwd))
        selected = select_plan(cdir, call.session or None, call.agent_id)
        if working_plan(cdir, call, selected) is None:
            return 0, ""  # an explicitly trusted plan takes precedence
        from .run import Answer
        from .told import with_told

        return with_told(cdir.root, call, Answer(*_record(call, cdir, operands, shell, options)))
    except NoCluster:
        return 0, ""
    except (PlanfenceError, ValueError, OSError) as exc:
        what = f"the files read by {call.describe()}" if operands else call.describe()
        return 2, (
            f"PlanFence could not record {what}{call.subagent()} in this session's plan "
            f"({exc}); a later change to them will not block your writes."
        )


def _record(
    call: ToolCall, cdir: ClusterDir, operands: list[str], shell: bool, options: HookOptions
) -> tuple[int, str]:
    from ..model.facts import evidence_key
    from ..model.reads import is_test_command
    from ..place.config import hook_policy, workspaces
    from ..plans.session import Change, wait_record
    from .run import cache_path

    spaces = workspaces(cdir)
    keys = resolve_reads(spaces, call.cwd, operands)
    files = {**dict.fromkeys(lockfiles_of(spaces, keys), "lockfile"), **dict.fromkeys(keys, "read")}
    plan = session_plan(call)
    here = agents_here(cdir, call.cwd)
    evidence = None
    if shell and here:
        ran = is_test_command(call.command or "", hook_policy(cdir).tests)
        if ran is not None:
            key = evidence_key(here[0], f"{plan}\n{ran}")  # this session's run, not another's
            evidence = (key, {"command": ran, "exit": call.exit, "time": round(time.time(), 3)})
    if not files and evidence is None:
        return 0, ""
    note_working(cdir.root, plan, call)
    roster = cdir.roster()
    wait_record(
        roster,
        cdir.identity,
        plan,
        Change(files=files, agents=here, extra=_who(call), derive=parent_plan(call)),
        step_timeout=options.step,
        cache=cache_path(cdir.root, plan),
        evidence=evidence,
    )
    from ..place.history import keep_keys

    keep_keys(cdir.root, spaces, files)  # what it read, for the diff of a later block
    return 0, ""


def record_writes(
    root: Path, plan: str, roster: Roster, keys: list[str], step: float, landed: bool
) -> bool:
    """The agent's own writes of `keys` join the session's plan as targets (`landed`: their
    PostToolUse ran, so the replan count starts over). Returns whether the plan was written."""
    from ...cluster.folder import ClusterDir
    from ..plans.session import Change, wait_record
    from .run import cache_path

    written = wait_record(
        roster,
        ClusterDir(root).identity,
        plan,
        Change(files=dict.fromkeys(keys, "target"), landed=landed),
        step_timeout=step,
        cache=cache_path(root, plan),
    )
    if landed and keys:
        from .told import tell_parent

        tell_parent(root, plan, roster, keys, step)
    return written


def lockfiles_of(spaces: Mapping[str, Path], keys: list[str]) -> list[str]:
    """The file keys of the existing lockfiles beside the manifests among `keys`
    (`manifests.beside`)."""
    from ..model.facts import file_key, file_of
    from ..model.manifests import beside

    found: list[str] = []
    for key in keys:
        agent, rel = key.partition(":")[0], file_of(key)
        root = spaces.get(agent)
        if rel is None or root is None:
            continue
        for lock in beside(rel):
            lkey = file_key(agent, lock)
            if lkey not in found and lkey not in keys and (Path(root) / lock).is_file():
                found.append(lkey)
    return found


def resolve_reads(spaces: Mapping[str, Path], cwd: str, operands: list[str]) -> list[str]:
    """The file keys of `operands` (as a reading command names them, relative to `cwd`; a
    leading `:` is relative to the worktree root, as `git show REV:PATH` names it) that are
    existing regular files whose real path is inside a served worktree."""
    from ..model.facts import file_key
    from ..place.config import locate, outside

    here = os.path.realpath(cwd)
    roots = [r for r in spaces.values() if Path(here).is_relative_to(os.path.realpath(r))]
    keys: list[str] = []
    for operand in operands:
        if operand.startswith(":"):
            if not roots:
                continue
            path = os.path.join(max(roots, key=lambda r: len(Path(r).parts)), operand[1:])
        else:
            path = os.path.join(cwd, operand)
        if not os.path.isfile(path) or outside(dict(spaces), cwd, (path,)):
            continue
        where = locate(dict(spaces), Path(path))
        if where is not None and file_key(*where) not in keys:
            keys.append(file_key(*where))
    return keys


def block_message(call: ToolCall, verdict: Verdict) -> str:
    """The reason the model reads when its session's plan drifted: the drift, then the one
    thing to do. A repository, branch or HEAD change: stop and tell the user (no re-read
    fixes it, so none is asked for, also when files changed too). Changed again after the
    plan's one replan: stop and report (saying a re-read file changed again only when one
    did, `Verdict.again`). Else: re-read the files named and retry."""
    from ..model.machine import UNDECIDED
    from .text import base_moved, stop_for_person, stopped_line
    from .text import block_message as trusted_message

    if verdict.level == UNDECIDED:
        return trusted_message(call, verdict)
    plan = verdict.plan
    lines = [
        f"PlanFence blocked {call.describe()}{call.subagent()}: plan {plan!r} (what this "
        f"{'subagent' if call.agent_id else 'session'} read and wrote) is stale "
        f"({verdict.level} drift).",
        *verdict.lines,
    ]
    if base_moved(verdict):
        lines.append(stop_for_person(plan))
    elif verdict.changed_again:
        lines.append(
            (
                "A file you already re-read has changed again"
                if verdict.again
                else "This plan was already re-made once after a re-read and has changed since"
            )
            + ": stop and report the drift above to the user; do not retry this call and "
            "do not re-read again."
        )
        lines.append(stopped_line(plan))
    elif verdict.reread:
        lines.append(
            f"Re-read {', '.join(verdict.reread)} (with Read, or cat in the shell), then retry "
            f"the same call: the re-read records what the files hold now. If one changes "
            f"again, stop and report."
        )
    else:
        lines.append(
            "Re-check what changed, then retry once; if it is blocked again, stop and report."
        )
    return "\n".join(lines + verdict.writer_lines())  # then who changed what, and how


def session_start(call: ToolCall, cdir: ClusterDir, timeout: float) -> Answer:
    """SessionStart in a served worktree: start the session's plan unless one is bound to it
    (a plan trusted without a session never captures it), and tell the model (Claude Code reads `hookSpecificOutput.additionalContext`)."""
    from .run import STEPS

    why = ""
    plan = working_plan(cdir, call, None)  # its own plan, whatever plan is shared
    if plan is not None:
        why = start_plan(call, cdir, plan, cdir.roster(), timeout / STEPS)
    return session_start_answer(why)


def session_start_answer(why: str) -> Answer:
    """SessionStart's answer: the context for the model on stdout, and on stderr why the
    session's plan could not be started (`why`, or nothing)."""
    from .run import ALLOW, Answer

    context = {"hookEventName": "SessionStart", "additionalContext": CONTEXT}
    note = f"PlanFence could not start this session's plan: {why}" if why else ""
    return Answer(ALLOW, note, json.dumps({"hookSpecificOutput": context}))
