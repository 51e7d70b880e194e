"""The hook's own bounds: the fence's files are a person's to change (`model.guarded`), and a
plan stopped by a second change stays stopped until a person refreshes it (`place.stops`).
Imports are deferred so the hook stays lean (`hook`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...cluster.folder import ClusterDir
    from ..model.payload import ToolCall


def person_only_write(call: ToolCall, cdir: ClusterDir) -> str:
    """The reason to block a PreToolUse `call` that writes one of the fence's own files
    (the cluster folder, the clients' hook settings, the git gate), fresh plan or not, else
    ""."""
    if call.event != "PreToolUse" or not call.gated:
        return ""
    from ..model.guarded import person_only_path
    from ..place.config import workspaces
    from ..place.guarded import guarded_paths, real_paths
    from .text import person_path_message

    guarded = guarded_paths(cdir.root, workspaces(cdir).values())
    touched = person_only_path(call, guarded, real_paths(call.cwd, call.files))
    return person_path_message(call, touched) if touched else ""
