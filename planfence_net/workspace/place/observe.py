"""Observing one worktree: the current value of each fact, cheaply.

A file is re-hashed only when its stat signature (inode, size, mtime, ctime) changed since the
last look, or when it was modified so recently that a same-size rewrite in the same clock tick
could hide behind an unchanged mtime (git's "racy" case). Branch and HEAD are read from the
git directory without running git; `status` runs `git status` for tracked files only, which
uses git's own index stat cache and never hashes the whole tree.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.errors import ConfigError
from ..model.facts import BRANCH, FILE_PREFIX, HEAD, REPO, STATUS

RACY_NS = 2_000_000_000  # a file modified this recently is always re-hashed
GIT_TIMEOUT = 10.0
MAX_FILE_BYTES = 64 * 1024 * 1024  # a declared file larger than this is refused, never read
CHUNK = 1024 * 1024  # hashing streams the file in pieces of this size
HASH_TRIES = 3  # reads of a file whose size changes while it is hashed
MAX_LINKS = 40  # symlinks followed for one path, as the kernel allows


@dataclass(frozen=True, slots=True)
class GitDirs:
    """Where git keeps this worktree's HEAD (`git_dir`) and the shared refs (`common_dir`)."""

    git_dir: Path
    common_dir: Path
    toplevel: Path


class Observer:
    """The facts of the worktree at `root`. Sync: the owner calls it from a worker thread."""

    def __init__(self, root: Path, max_bytes: int = MAX_FILE_BYTES) -> None:
        self.root = root.resolve()
        self.max_bytes = max_bytes
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
        folders: dict[str, int | BaseException] = {}  # one walk per folder in one look
        try:
            for fact in facts:
                if fact.startswith(FILE_PREFIX):
                    bodies[fact] = self.file(fact[len(FILE_PREFIX) :], folders)
                elif fact in (REPO, BRANCH, HEAD):
                    bodies[fact] = self._git_fact(fact)
                elif fact == STATUS:
                    bodies[fact] = {"changed": self.changed_tracked()}
                else:
                    raise ConfigError(f"{fact!r} is not an observable fact")
        finally:
            for fd in folders.values():
                if isinstance(fd, int):
                    os.close(fd)
        return bodies

    def file(
        self, rel: str, folders: dict[str, int | BaseException] | None = None
    ) -> dict[str, Any]:
        """{"hash", "size", "mode"} of the file at `rel`, {"missing": True} (with a "kind"
        for something that is not a regular file or symlink), or {"refused": WHY, ...} for a
        file it will not or cannot hash: over `max_bytes`, unreadable (permissions), in a
        folder it may not enter, or reached through a symlink that leads out of the worktree. A symlink at `rel` itself is hashed as its target text, as git does.

        `folders` keeps the folders walked to (descriptors, or why not) for the caller to
        close; without it, the folder is closed before returning.
        """
        parts = check_relative(rel).split("/")
        where, name = "/".join(parts[:-1]), parts[-1]
        walked = {} if folders is None else folders
        if where not in walked:
            try:
                walked[where] = walk_inside(self.root, parts[:-1])
            except (Outside, FileNotFoundError, NotADirectoryError, PermissionError) as exc:
                walked[where] = exc
        folder = walked[where]
        try:
            if isinstance(folder, Outside):
                self._cache.pop(rel, None)
                return {"refused": str(folder)}
            if isinstance(folder, PermissionError):
                self._cache.pop(rel, None)
                return {"refused": f"cannot enter its folder: {folder.strerror}"}
            if isinstance(folder, BaseException):
                self._cache.pop(rel, None)
                return {"missing": True}
            return self._file_in(folder, name, rel)
        finally:
            if folders is None and isinstance(folder, int):
                os.close(folder)

    def _file_in(self, folder: int, name: str, rel: str) -> dict[str, Any]:
        try:
            st = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            self._cache.pop(rel, None)
            return {"missing": True}
        signature = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        cached = self._cache.get(rel)
        if cached is not None and cached[0] == signature and st.st_mtime_ns < cached[1] - RACY_NS:
            return cached[2]
        hashed_at = time.time_ns()
        body = self._hash(folder, name, st)
        self._cache[rel] = (signature, hashed_at, body)
        self.hashed += 1
        return body

    def _hash(self, folder: int, name: str, st: os.stat_result) -> dict[str, Any]:
        if stat.S_ISLNK(st.st_mode):
            text = os.readlink(name, dir_fd=folder).encode(errors="surrogateescape")
            return self._body(self._hasher(len(text), text), len(text), st.st_mode)
        if not stat.S_ISREG(st.st_mode):
            return {"missing": True, "kind": "not a regular file"}
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
        except FileNotFoundError:
            return {"missing": True}
        except PermissionError as exc:  # there, but not for us to read: never "missing"
            return _refused(f"cannot read it: {exc.strerror}", st)
        except OSError as exc:  # replaced by a symlink or a fifo since the stat
            return {"missing": True, "kind": f"cannot open: {exc.strerror}"}
        try:
            return self._hash_open(fd)
        finally:
            os.close(fd)

    def _hash_open(self, fd: int) -> dict[str, Any]:
        """Stream the open file through the hash, never holding more than CHUNK bytes."""
        for _ in range(HASH_TRIES):
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return {"missing": True, "kind": "not a regular file"}
            if st.st_size > self.max_bytes:
                return _refused(f"{st.st_size} bytes, over the cap of {self.max_bytes}", st)
            hasher, done = self._hasher(st.st_size), 0
            os.lseek(fd, 0, os.SEEK_SET)
            while done <= st.st_size:
                chunk = os.read(fd, CHUNK)
                if not chunk:
                    break
                hasher.update(chunk)
                done += len(chunk)
            if done == st.st_size:  # else it changed size while read: read it again
                return self._body(hasher, done, st.st_mode)
        return {"refused": "its size kept changing while it was hashed"}

    def _hasher(self, size: int, data: bytes = b"") -> Any:
        hasher: Any = (
            hashlib.sha1(b"blob %d\0" % size)  # git's blob id, as `git hash-object` prints it
            if self.git is not None
            else hashlib.blake2b(digest_size=32)
        )
        hasher.update(data)
        return hasher

    def _body(self, hasher: Any, size: int, mode: int) -> dict[str, Any]:
        prefix = "git:" if self.git is not None else "blake2b:"
        return {"hash": prefix + hasher.hexdigest(), "size": size, "mode": f"{mode:o}"}

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
                rows.append([printable(rel), st.st_size, st.st_mtime_ns])
            except FileNotFoundError:
                rows.append([printable(rel), None, None])
        return sorted(rows)


def _refused(why: str, st: os.stat_result) -> dict[str, Any]:
    """The body of a file that is there but not hashed (`why`): its size and stat signature
    stand in for the content, so any rewrite of it still shows as a change."""
    return {"refused": why, "size": st.st_size, "stat": [st.st_ino, st.st_mtime_ns, st.st_ctime_ns]}


class Outside(Exception):
    """A path whose directories, symlinks resolved, lead out of the worktree."""


def walk_inside(root: Path, folders: list[str]) -> int:
    """An open descriptor of the folder ROOT/FOLDERS, every component resolved one at a time
    (no component is followed by the kernel), so a symlink anywhere on the way is followed
    only while it stays inside `root` (a resolved path). Raises Outside when it leaves,
    FileNotFoundError or NotADirectoryError when a component is missing or not a folder.
    """
    stack = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
    todo, links = list(folders), 0
    try:
        while todo:
            part = todo.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if len(stack) == 1:
                    raise Outside("a symlink on its path leads outside the worktree")
                os.close(stack.pop())
                continue
            try:
                stack.append(
                    os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=stack[-1])
                )
                continue
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                try:
                    target = os.readlink(part, dir_fd=stack[-1])
                except OSError:
                    raise NotADirectoryError(part) from None
            links += 1
            if links > MAX_LINKS:
                raise Outside("too many symlinks on its path")
            if target.startswith("/"):
                inside = Path(target).parts[1:]
                if inside[: len(root.parts) - 1] != root.parts[1:]:
                    raise Outside("a symlink on its path leads outside the worktree")
                while len(stack) > 1:
                    os.close(stack.pop())
                target = "/".join(inside[len(root.parts) - 1 :])
            todo[:0] = target.split("/")
        while len(stack) > 1:
            os.close(stack.pop(0))
        return stack[0]
    except BaseException:
        for fd in stack:
            os.close(fd)
        raise


def check_relative(rel: str) -> str:
    """`rel` if it is a plain relative path inside the worktree; raises ConfigError."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or ".." in parts or "" in parts or "\0" in rel:
        raise ConfigError(f"{rel!r} is not a relative path inside the worktree")
    return rel


def printable(name: str) -> str:
    """`name` as UTF-8 text: bytes that are not UTF-8 (kept as surrogate escapes) become
    backslash escapes, so a record body can always be encoded."""
    return name.encode(errors="surrogateescape").decode(errors="backslashreplace")


def run_git(cwd: Path, *args: str) -> str:
    """Run git in `cwd`; returns stdout. Raises ConfigError when git fails."""
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            encoding="utf-8",
            errors="surrogateescape",  # file names are bytes: keep them, see `printable`
            timeout=GIT_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"git {args[0]} failed in {cwd}: {exc}") from None
    if proc.returncode != 0:
        raise ConfigError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.strip()}")
    return proc.stdout


def commit_changes(root: Path, old: str | None, new: str) -> dict[str, str | None]:
    """The files under `root` (a worktree or a folder of it) whose content differs between
    commits `old` (None: an unborn branch, the empty tree) and `new`: path relative to `root`
    -> its hash in `new` as `Observer` writes it ("git:<blob id>"), or None where `new` has
    none. Raw `diff-tree` output only: no textconv, external diff or pager runs. Raises
    ConfigError when git cannot tell (a commit that is gone, not a repository)."""
    base = old or run_git(root, "hash-object", "-t", "tree", "--stdin").strip()
    out = run_git(
        root, "diff-tree", "-r", "-z", "--no-renames", "--relative", "--no-commit-id", base, new
    )
    fields = out.split("\0")
    changed: dict[str, str | None] = {}
    for meta, path in zip(fields[::2], fields[1::2], strict=False):
        parts = meta.lstrip(":").split()
        if len(parts) < 5:
            raise ConfigError(f"git diff-tree printed {meta!r}")
        blob = parts[3]
        changed[printable(path)] = None if parts[4] == "D" else "git:" + blob
    return changed


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
