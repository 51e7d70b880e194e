"""The hook's own bounds: the fence's files are a person's to change (`model.guarded`), and a
plan stopped by a second change stays stopped until a person refreshes it (`place.stops`).
Imports are deferred (each hook call is a fresh process; measured in `run`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...cluster.folder import ClusterDir
    from ..model.machine import Verdict
    from ..model.payload import ToolCall


def person_only_write(call: ToolCall, cdir: ClusterDir) -> str:
    """The reason to block a PreToolUse `call` that writes one of the fence's own files
    (the cluster folder, the clients' hook settings, the git gate), fresh plan or not, else
    ""."""
    if call.event != "PreToolUse" or not call.gated:
        return ""
    from ..model.guarded import person_only_path
    from ..place.config import workspaces
    from ..place.guarded import guarded_paths, real_paths, untracked
    from .text import person_path_message

    roots = list(workspaces(cdir).values())
    guarded = guarded_paths(cdir.root, roots)
    if call.command is not None and "clean" in call.command:  # a plain `git clean` may be
        guarded = untracked(guarded, roots)  # refused only where it removes one: ask git
    touched = person_only_path(call, guarded, real_paths(call.cwd, call.files))
    return person_path_message(call, touched) if touched else ""


def stopped_plan(call: ToolCall, cluster: Path, verdict: Verdict) -> str:
    """After a check: stop the plan when it changed again (its block message says so), and
    the reason to block a call of a plan stopped earlier that a person has not re-based
    since (a re-read does not lift it; who changed what, when it drifted), else ""."""
    from ..model.machine import UNDECIDED
    from ..place import stops

    if verdict.level == UNDECIDED:
        return ""  # blocked anyway, and its count is not known
    if verdict.changed_again:
        stops.stop(cluster, verdict.plan, verdict.trust)
        return ""
    if stops.lifted(cluster, verdict.plan, verdict.trust):
        return ""
    from .text import stopped_message

    return "\n".join([stopped_message(call, verdict.plan), *verdict.writer_lines()])


def forget_failed(call: ToolCall, cluster: Path | None) -> None:
    """A call the client reports failed (Claude Code's PostToolUseFailure) made no change:
    it is no longer in flight (`place.inflight`). Nothing to do without a cluster."""
    if call.event != "PostToolUseFailure" or not call.tool_use_id:
        return
    from ...core.errors import PlanfenceError
    from ..place import inflight
    from ..place.config import find_cluster
    from .record import owner

    try:
        cdir = find_cluster(cluster, Path(call.cwd))
    except (PlanfenceError, OSError):
        return
    inflight.failed(cdir.root, call.tool_use_id, owner(call))
