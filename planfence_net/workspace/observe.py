"""Observing one worktree: the current value of each fact, cheaply.

A file is re-hashed only when its stat signature (inode, size, mtime, ctime) changed since the
last look, or when it was modified so recently that a same-size rewrite in the same clock tick
could hide behind an unchanged mtime (git's "racy" case). Branch and HEAD are read from the
git directory without running git; `status` runs `git status` for tracked files only, which
uses git's own index stat cache and never hashes the whole tree.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from .facts import BRANCH, FILE_PREFIX, HEAD, REPO, STATUS

RACY_NS = 2_000_000_000  # a file modified this recently is always re-hashed
GIT_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class GitDirs:
    """Where git keeps this worktree's HEAD (`git_dir`) and the shared refs (`common_dir`)."""

    git_dir: Path
    common_dir: Path
    toplevel: Path


class Observer:
    """The facts of the worktree at `root`. Sync: the owner calls it from a worker thread."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.git = find_git(self.root)
        self._cache: dict[str, tuple[tuple[int, int, int, int], int, dict[str, Any]]] = {}
        self.hashed = 0  # files hashed (not served from the stat cache), for statistics

    def observe(self, facts: list[str]) -> dict[str, Any]:
        """The current body of each fact (`repo`, `branch`, `head`, `status`, `file/REL`).

        Raises ConfigError when the worktree is gone or a fact is not one of these.
        """
        if not self.root.is_dir():
            raise ConfigError(f"worktree {self.root} is gone")
        bodies: dict[str, Any] = {}
        for fact in facts:
            if fact.startswith(FILE_PREFIX):
                bodies[fact] = self.file(fact[len(FILE_PREFIX) :])
            elif fact in (REPO, BRANCH, HEAD):
                bodies[fact] = self._git_fact(fact)
            elif fact == STATUS:
                bodies[fact] = {"changed": self.changed_tracked()}
            else:
                raise ConfigError(f"{fact!r} is not an observable fact")
        return bodies

    def file(self, rel: str) -> dict[str, Any]:
        """{"hash", "size", "mode"} of the file at `rel`, or {"missing": True}."""
        path = self.root / check_relative(rel)
        try:
            st = path.lstat()
        except (FileNotFoundError, NotADirectoryError):
            self._cache.pop(rel, None)
            return {"missing": True}
        signature = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        cached = self._cache.get(rel)
        if cached is not None and cached[0] == signature and st.st_mtime_ns < cached[1] - RACY_NS:
            return cached[2]
        hashed_at = time.time_ns()
        body = self._hash(path, st)
        self._cache[rel] = (signature, hashed_at, body)
        self.hashed += 1
        return body

    def _hash(self, path: Path, st: os.stat_result) -> dict[str, Any]:
        if stat.S_ISLNK(st.st_mode):
            data = os.readlink(path).encode()
        elif stat.S_ISREG(st.st_mode):
            data = path.read_bytes()
        else:
            return {"missing": True, "kind": "not a regular file"}
        if self.git is not None:  # git's blob id, as `git hash-object` prints it
            digest = "git:" + hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        else:
            digest = "blake2b:" + hashlib.blake2b(data, digest_size=32).hexdigest()
        return {"hash": digest, "size": len(data), "mode": f"{st.st_mode:o}"}

    def _git_fact(self, fact: str) -> Any:
        if self.git is None:
            return {
                REPO: {"git": None, "path": str(self.root)},
                BRANCH: {"branch": None},
                HEAD: {"head": None},
            }[fact]
        if fact == REPO:
            return {"git": str(self.git.common_dir), "path": str(self.root)}
        ref, sha = read_head(self.git)
        if fact == BRANCH:
            branch = ref.removeprefix("refs/heads/") if ref else None
            return {"branch": branch}
        return {"head": sha}

    def changed_tracked(self) -> list[list[Any]] | None:
        """Tracked files git reports as changed, each [path, size, mtime_ns] (None: no git).

        Size and mtime make a second edit of an already-changed file visible too.
        """
        if self.git is None:
            return None
        out = run_git(
            self.root,
            "--no-optional-locks",
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=no",
            "--no-renames",
        )
        rows = []
        for entry in filter(None, out.split("\0")):
            rel = entry[3:]
            try:
                st = (self.git.toplevel / rel).lstat()
                rows.append([rel, st.st_size, st.st_mtime_ns])
            except FileNotFoundError:
                rows.append([rel, None, None])
        return sorted(rows)


def check_relative(rel: str) -> str:
    """`rel` if it is a plain relative path inside the worktree; raises ConfigError."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or ".." in parts or "" in parts or "\0" in rel:
        raise ConfigError(f"{rel!r} is not a relative path inside the worktree")
    return rel


def run_git(cwd: Path, *args: str) -> str:
    """Run git in `cwd`; returns stdout. Raises ConfigError when git fails."""
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"git {args[0]} failed in {cwd}: {exc}") from None
    if proc.returncode != 0:
        raise ConfigError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.strip()}")
    return proc.stdout


def find_git(root: Path) -> GitDirs | None:
    """The git directories of the worktree at `root`, or None when it is not in a git repo."""
    if not root.is_dir():
        raise ConfigError(f"worktree {root} is not a folder")
    try:
        out = run_git(
            root, "rev-parse", "--absolute-git-dir", "--git-common-dir", "--show-toplevel"
        )
    except ConfigError:
        return None
    git_dir, common, top = out.splitlines()[:3]
    return GitDirs(
        Path(git_dir),
        (root / common).resolve() if not os.path.isabs(common) else Path(common),
        Path(top),
    )


def read_head(git: GitDirs) -> tuple[str | None, str | None]:
    """(symbolic ref or None when detached, commit id or None on an unborn branch), read from
    the git directory: HEAD, then the loose ref, then packed-refs."""
    text = (git.git_dir / "HEAD").read_text().strip()
    if not text.startswith("ref:"):
        return None, text
    ref = text[4:].strip()
    for base in (git.git_dir, git.common_dir):
        try:
            return ref, (base / ref).read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            continue
    try:
        for line in (git.common_dir / "packed-refs").read_text().splitlines():
            sha, _, name = line.partition(" ")
            if name == ref:
                return ref, sha
    except FileNotFoundError:
        pass
    return ref, None
