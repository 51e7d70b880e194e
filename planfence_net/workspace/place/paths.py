"""Where things are, found without running git (the hook imports this; it must stay lean).

    worktree_root   the git worktree holding a folder: the nearest folder with a `.git`
                    file or folder, never above it (None outside git)
    git_dirs        a worktree's own git dir and the repository's common git dir
    marker          COMMON/planfence.json: "this repository uses PlanFence" and its clusters
    joined          GITDIR/planfence-worktree.json: the cluster and agent a worktree joined
    executable      this installation's `planfence`, by absolute path
    served_cluster  the cluster `workspace serve` recorded for a folder in the user's state
                    directory ($XDG_STATE_HOME/planfence, ~/.local/state/planfence)
    unsafe          why a cluster folder found inside a worktree must not be trusted

The hook's trust anchor lives outside every repository: the user's state directory and the
join record. The marker and the join record live in git's own folders, outside every work tree: nothing
an agent writes through Write/Edit/apply_patch in a worktree changes them by accident, no
commit carries them, and every worktree of the repository sees the marker.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

# Imports inside functions are deliberate: each hook call is a fresh process that loads only
# its own path (measured in `workspace/hook/run.py`).

TYPE_CHECKING = False  # not `typing`'s: the hook's fast path imports this module (`hookclient`)
if TYPE_CHECKING:
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
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
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


STATE_ENV = "XDG_STATE_HOME"


def state_dir() -> Path:
    """The user's PlanFence state directory: $XDG_STATE_HOME/planfence, else
    ~/.local/state/planfence."""
    base = os.environ.get(STATE_ENV) or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "planfence"


def _served_path(folder: Path) -> Path:
    import hashlib

    real = os.path.realpath(folder)
    return state_dir() / "served" / (hashlib.blake2b(real.encode(), digest_size=16).hexdigest())


def record_served(folder: Path, cluster: Path) -> Path:
    """Remember, in the user's state directory (mode 0700), that `cluster` serves `folder`
    (keyed by its real path)."""
    path = _served_path(folder)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent.parent, 0o700)
    os.chmod(path.parent, 0o700)
    value = {"path": os.path.realpath(folder), "cluster": os.path.realpath(cluster)}
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(value, indent=2) + "\n")
    os.chmod(tmp, 0o600)  # O_CREAT keeps an existing file's mode
    tmp.replace(path)
    return path


def served_cluster(folder: Path) -> Path | None:
    """The cluster `workspace serve` recorded for `folder` (its real path), or None. A record
    (or its folder) that another user owns or others may write is ignored."""
    path = _served_path(folder)
    for each in (path.parent, path):
        try:
            info = each.stat()
        except OSError:
            return None
        if info.st_uid != os.geteuid() or info.st_mode & 0o022:
            return None
    value = _read(path)
    if value.get("path") != os.path.realpath(folder) or not isinstance(value.get("cluster"), str):
        return None
    return Path(value["cluster"])


def unsafe(folder: Path, root: Path | None) -> str | None:
    """Why the cluster folder `folder` (inside the worktree `root`, or None) must not be
    trusted, or None: a folder or roster another user owns or group/others may write, or a
    folder git tracks (a repository cannot choose the cluster that checks it). A file inside
    counts as writable by others only when others may enter the folder."""
    enter = 0o011  # the folder itself is always checked
    for each in (folder, folder / "cluster.toml", folder / "workspace.json"):
        try:
            info = os.lstat(each)
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"cannot read {each}: {exc.strerror}"
        if info.st_uid != os.geteuid():
            return f"{each} belongs to another user (uid {info.st_uid})"
        if info.st_mode & 0o022 and enter:
            return f"{each} is writable by group or others (mode {info.st_mode & 0o777:o})"
        if each == folder:
            enter = info.st_mode & 0o011
    if root is not None and _tracked(root, folder):
        return (
            f"git tracks files in {folder} (a repository cannot choose the cluster that checks it)"
        )
    return None


def _tracked(root: Path, folder: Path) -> bool:
    """Whether git tracks any file under `folder` in the worktree `root` (fails safe: an
    error counts as tracked)."""
    import subprocess

    try:
        rel = os.path.relpath(folder, root)
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--", rel],
            capture_output=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, ValueError, subprocess.SubprocessError):
        return True
    return out.returncode != 0 or out.stdout != b""


def session_marker(cluster: Path, plan: str) -> Path:
    """The file that says a session works under its automatic plan `plan` (CLUSTER/run/)."""
    return cluster / "run" / f"{plan}.session"
