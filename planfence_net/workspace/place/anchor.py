"""Which cluster folder serves a folder, found from where the user put it (standard library
only: the hook's fast path, `hookclient`, runs it before anything else is imported).

    find_folder   the cluster folder for `--cluster`, $PLANFENCE_CLUSTER, or a working folder

The order: `--cluster`, then $PLANFENCE_CLUSTER, then the user's state directory's record of
the working folder or of a folder above it up to its git worktree root (never above it: a
worktree nested in another checkout, like Claude Code's .claude/worktrees/NAME, is not served
by its parent's folder), then the cluster the worktree joined (`workspace join`, recorded in
its git dir), and last the .planfence at the worktree root. A folder found in the last two
ways is refused (`paths.unsafe`) when git tracks it, another user owns it, or group or others
may write it. Nothing else in the repository is ever looked at. `config.find_cluster` is this
function wrapped in the project's error types.
"""

from __future__ import annotations

import os
from pathlib import Path

from .paths import joined, served_cluster, state_dir, unsafe, worktree_root

FOLDER = ".planfence"
ENV = "PLANFENCE_CLUSTER"
ROSTER = "cluster.toml"


class Unanchored(Exception):
    """No cluster folder may be used; the message is the one-line reason."""


class Unserved(Unanchored):
    """No cluster folder serves the folder asked about; `root` is its git worktree root."""

    def __init__(self, message: str, root: Path | None) -> None:
        super().__init__(message)
        self.root = root


def find_folder(explicit: Path | None = None, start: Path | None = None) -> Path:
    """The cluster folder serving `start` (default: the working folder), or `explicit`.
    Raises Unserved when none serves it, Unanchored when the one found or given must not be
    used (no roster, or `paths.unsafe`)."""
    given = explicit or (Path(os.environ[ENV]) if os.environ.get(ENV) else None)
    if given is not None:
        if not (given / ROSTER).is_file():
            raise Unanchored(f"no roster at {given / ROSTER}")
        return given
    here = (start or Path.cwd()).resolve()
    root = worktree_root(here)
    for folder in (here, *here.parents):  # the user's own records, never repository content
        recorded = served_cluster(folder)
        if recorded is not None and (recorded / ROSTER).is_file():
            return recorded
        if folder == root:
            break
    record = joined(root) if root is not None else None
    if record is not None and (Path(record["cluster"]) / ROSTER).is_file():
        joined_to = Path(record["cluster"])
        return safe(joined_to, worktree_root(joined_to))
    if root is not None and (root / FOLDER / ROSTER).is_file():
        return safe(root / FOLDER, root)
    raise Unserved(
        f"no workspace cluster serves {here}: `planfence workspace serve` records the "
        f"folders it serves in {state_dir()}"
        + (f", and no {FOLDER}/ at its worktree root {root}" if root is not None else "")
        + "; run `planfence workspace serve PATH`, `planfence workspace join`, or pass "
        "--cluster DIR",
        root,
    )


def safe(folder: Path, root: Path | None) -> Path:
    """`folder`, unless `paths.unsafe` refuses it (Unanchored, one line)."""
    why = unsafe(folder, root)
    if why is not None:
        raise Unanchored(f"refusing the cluster folder {folder}: {why}")
    return folder
