"""Where things are, found without running git (the hook imports this; it must stay lean).

    worktree_root   the git worktree holding a folder: the nearest folder with a `.git`
                    file or folder, never above it (None outside git)
    git_dirs        a worktree's own git dir and the repository's common git dir
    marker          COMMON/planfence.json: "this repository uses PlanFence" and its clusters
    joined          GITDIR/planfence-worktree.json: the cluster and agent a worktree joined
    executable      this installation's `planfence`, by absolute path

The marker and the join record live in git's own folders, outside every work tree: nothing
an agent writes through Write/Edit/apply_patch in a worktree changes them by accident, no
commit carries them, and every worktree of the repository sees the marker.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

MARKER = "planfence.json"
JOINED = "planfence-worktree.json"


def worktree_root(start: Path) -> Path | None:
    """The nearest folder at or above `start` that holds `.git` (file or folder)."""
    here = Path(os.path.abspath(start))
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return None


def git_dirs(root: Path) -> tuple[Path, Path] | None:
    """(this worktree's git dir, the common git dir) of the worktree at `root`, read from
    `.git` (a folder, or a file `gitdir: PATH` whose folder may name a `commondir`)."""
    dot = root / ".git"
    if dot.is_dir():
        return dot, dot
    try:
        text = dot.read_text()
    except OSError:
        return None
    if not text.startswith("gitdir:"):
        return None
    own = Path(text[len("gitdir:") :].strip())
    own = own if own.is_absolute() else (root / own)
    own = Path(os.path.normpath(own))
    try:
        common = (own / "commondir").read_text().strip()
    except OSError:
        return own, own
    return own, Path(os.path.normpath(own / common))


def _read(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _write(path: Path, value: dict[str, Any]) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value, indent=2) + "\n")
    tmp.replace(path)


def marker(root: Path) -> dict[str, Any] | None:
    """The repository's PlanFence marker seen from the worktree at `root` (None: the
    repository does not use PlanFence, or `root` is not a git worktree)."""
    dirs = git_dirs(root)
    if dirs is None or not (dirs[1] / MARKER).is_file():
        return None
    return _read(dirs[1] / MARKER)


def mark(root: Path, cluster: Path | None) -> Path | None:
    """Record that the repository of the worktree at `root` uses PlanFence (and `cluster`);
    returns the marker file, or None outside git."""
    dirs = git_dirs(root)
    if dirs is None:
        return None
    path = dirs[1] / MARKER
    value = _read(path)
    clusters = [c for c in value.get("clusters", []) if isinstance(c, str)]
    if cluster is not None and str(cluster) not in clusters:
        clusters.append(str(cluster))
    _write(path, {**value, "clusters": clusters})
    return path


def joined(root: Path) -> dict[str, Any] | None:
    """{"cluster", "agent"} when the worktree at `root` joined a cluster, else None."""
    dirs = git_dirs(root)
    if dirs is None:
        return None
    value = _read(dirs[0] / JOINED)
    return value if isinstance(value.get("cluster"), str) else None


def record_join(root: Path, cluster: Path, agent: str) -> Path:
    """Remember in the worktree's own git dir which cluster and agent serve it."""
    dirs = git_dirs(root)
    if dirs is None:
        raise ValueError(f"{root} is not a git worktree")
    path = dirs[0] / JOINED
    _write(path, {"cluster": str(cluster), "agent": agent})
    return path


def executable() -> str:
    """This installation's `planfence` by absolute path (what a block message tells the
    model to run, and what `hook install` writes), or plain `planfence` when there is none
    next to the interpreter (`python -m planfence_net`)."""
    exe = Path(sys.executable).parent / "planfence"
    return str(exe) if exe.exists() else "planfence"
