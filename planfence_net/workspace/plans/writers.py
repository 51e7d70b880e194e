"""Who changed what, for a blocking check: the thin I/O around `model.writers`.

For each drifted file of the verdict (`Verdict.drifted`) it reads the last recorded write of
the file (`place.history.last_write`), the content the plan read and the content now (kept
by hash in `place.history`, read from the file when it still holds the current version, or
from git's object store for a version git has), and the file's modification time; for a
HEAD change, the commit and its author and the paths it changed (git). `model.writers` says
what that means. Runs only on a block; never raises: what cannot be read is said, never
guessed.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from ...cluster.folder import ClusterDir
from ...core.errors import ConfigError
from ..model.facts import file_of
from ..model.machine import Verdict
from ..model.writers import (
    CONTENT_CAP,
    MISSING,
    Commit,
    Drifted,
    Writer,
    file_writer,
    hash_of,
    head_writer,
    size_of,
)
from ..place import history
from ..place.config import workspaces

MAX_NAMED = 10  # drifted files (and HEADs) a block says who changed; the rest are counted
TIMEOUT = 2.0  # seconds the git commands of one block may take together


def attributed(cluster: Path, verdict: Verdict, timeout: float = TIMEOUT) -> Verdict:
    """`verdict` with its `writers` when it blocks on drifted files or HEAD (the cluster
    folder `cluster` keeps the recorded writes and contents), else `verdict`: the first
    MAX_NAMED drifted keys, git asked within `timeout` seconds in all (what git could not
    say in time is said as not kept, so a block is never late). Never raises."""
    if verdict.exit_code != 2 or not verdict.drifted:
        return verdict
    try:
        spaces = workspaces(ClusterDir(cluster))
    except (ConfigError, OSError, ValueError):
        spaces = {}
    git = _Git(time.monotonic() + timeout)
    agents = {d.key.partition(":")[0] for d in verdict.drifted}
    writers = []
    for drifted in verdict.drifted[:MAX_NAMED]:
        agent = drifted.key.partition(":")[0]
        root = spaces.get(agent)
        rel = file_of(drifted.key)
        try:
            if rel is None:
                writers.append(_head(git, root, drifted))
            else:
                name = f"{agent}:{rel}" if len(agents) > 1 else rel
                writers.append(_file(cluster, git, root, rel, name, drifted))
        except (OSError, ValueError):
            continue  # never a failed check for what cannot be said
    return dataclasses.replace(verdict, writers=tuple(writers))


@dataclasses.dataclass(frozen=True)
class _Git:
    """git commands in a worktree, each within what is left until `deadline`."""

    deadline: float

    def run(self, root: Path, *args: str) -> bytes | None:
        """git's stdout, or None when it failed or there is no time left."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            proc = subprocess.run(
                ["git", *args],
                cwd=root,
                capture_output=True,
                timeout=left,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout if proc.returncode == 0 else None


def _file(
    cluster: Path, git: _Git, root: Path | None, rel: str, name: str, drifted: Drifted
) -> Writer:
    path = root / rel if root is not None else None
    old = _version(cluster, git, root, None, drifted.old)
    new = _version(cluster, git, root, path, drifted.new)
    contents = (old[1], new[1]) if old[0] and new[0] else None
    write = history.last_write(cluster, drifted.key)
    modified = None
    if path is not None and hash_of(drifted.new) != MISSING:
        try:
            modified = round(os.lstat(path).st_mtime, 3)
        except OSError:
            modified = None
    return file_writer(name, drifted, [write] if write else [], modified, contents)


def _version(
    cluster: Path, git: _Git, root: Path | None, path: Path | None, body: Any
) -> tuple[bool, bytes | None]:
    """(found, content) of the version a file body names: (True, None) for no file; the
    file itself at `path` while it holds that version, else the kept content, else git's
    blob; (False, None) when none has it (or it is over the cap)."""
    digest = hash_of(body)
    if digest == MISSING:
        return True, None
    if digest is None or size_of(body) > CONTENT_CAP:
        return False, None
    if path is not None:
        data = history.read_small(path)
        if data is not None and digest in history.hashes(data):
            return True, data
    kept = history.content(cluster, digest)
    if kept is not None:
        return True, kept
    if root is not None and digest.startswith("git:"):
        blob = git.run(root, "cat-file", "blob", digest[4:])
        if blob is not None and digest in history.hashes(blob):
            return True, blob
    return False, None


def _head(git: _Git, root: Path | None, drifted: Drifted) -> Writer:
    """The commit HEAD moved to, its author, and the paths it changed since the plan's."""
    old, new = (_sha(b) for b in (drifted.old, drifted.new))
    if root is None or new is None:
        return head_writer(None, [], new or "")
    shown = git.run(root, "log", "-1", "--format=%H%x00%an <%ae>%x00%ct%x00%s", new, "--")
    try:
        sha, author, at, subject = (shown or b"").decode().rstrip("\n").split("\0", 3)
        commit = Commit(sha, author, float(at), subject)
    except (ValueError, UnicodeDecodeError):
        return head_writer(None, [], new)
    out = (
        git.run(root, "diff-tree", "-r", "--name-status", "--no-renames", old, new) if old else None
    )
    text = out.decode(errors="replace") if out else ""
    changed = [" ".join(line.split("\t", 1)) for line in text.splitlines() if line]
    return head_writer(commit, changed, new)


def _sha(body: Any) -> str | None:
    sha = body.get("head") if isinstance(body, dict) else None
    return sha if isinstance(sha, str) else None
