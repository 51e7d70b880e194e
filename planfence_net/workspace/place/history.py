"""What files held and who wrote them, kept in the cluster folder for the blocks that say who
changed what (`model.writers`, `plans.writers`):

    keep        the content of a small file (at most `writers.CONTENT_CAP` bytes), kept by
                its hash in both of the owner's forms (git's blob id, BLAKE2b-256), when a
                plan records its version (a read, a trust, the agent's own write):
                CLUSTER/run/contents/HASH
    content     the content kept for a hash, else None
    note_write  record a write of a file key (the hook's PostToolUse): the hashes of
                what the file holds after it, the session, subagent, client, worktree
                and time, one JSON line appended per write: CLUSTER/run/writes/DIGEST.jsonl
    last_write  the last of them, else None

Best effort: whatever cannot be kept or read is lost, never a failed hook call (a block then
says the diff was not kept, or names no session). Both folders are pruned to about
KEEP_FILES entries, oldest first.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..model.facts import file_of
from ..model.writers import CONTENT_CAP, MISSING, Write

KEEP_FILES = 2048  # entries kept in each folder (contents: two names per content)
CHUNK = 1024 * 1024  # a large file is hashed in pieces of this size
MAX_WRITES_BYTES = 16 * 1024  # a file's record of writes starts over past this size


def _folder(cluster: Path, name: str) -> Path:
    return cluster / "run" / name


def hashes(data: bytes) -> tuple[str, str]:
    """The hashes of `data` as the workspace owner writes them (`place.observe`): with git,
    and without."""
    blob = hashlib.sha1(b"blob %d\0" % len(data))
    blob.update(data)
    return "git:" + blob.hexdigest(), "blake2b:" + hashlib.blake2b(data, digest_size=32).hexdigest()


def read_small(path: Path) -> bytes | None:
    """The content of the regular file at `path` (no symlink followed at its last step)
    when it has at most CONTENT_CAP bytes, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > CONTENT_CAP:
            return None
        data = os.read(fd, CONTENT_CAP + 1)
        return data if len(data) <= CONTENT_CAP else None
    except OSError:
        return None
    finally:
        os.close(fd)


def file_hashes(path: Path) -> tuple[str, ...]:
    """`hashes` of the regular file at `path` of any size, streamed; () when it cannot be
    read (or is not a regular file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ()
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ()
        blob = hashlib.sha1(b"blob %d\0" % st.st_size)
        other = hashlib.blake2b(digest_size=32)
        done = 0
        while chunk := os.read(fd, CHUNK):
            blob.update(chunk)
            other.update(chunk)
            done += len(chunk)
        if done != st.st_size:
            return ()  # it changed while read
        return "git:" + blob.hexdigest(), "blake2b:" + other.hexdigest()
    except OSError:
        return ()
    finally:
        os.close(fd)


def keep(cluster: Path, path: Path) -> tuple[str, ...]:
    """Keep the content of the file at `path` if it is small (see `read_small`); returns
    the hashes it is kept under, () when it was not."""
    data = read_small(path)
    if data is None:
        return ()
    names = hashes(data)
    folder = _folder(cluster, "contents")
    first = folder / _safe(names[0])
    try:
        if first.exists():
            os.utime(first)  # in use again: pruned last
            return names
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = folder / f".{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # a copy of a file
        try:  # that may be private: readable by this user only
            os.write(fd, data)
        finally:
            os.close(fd)
        for name in names:
            try:
                os.link(tmp, folder / _safe(name))
            except FileExistsError:
                pass
        tmp.unlink()
        if names[0].endswith("0"):  # one new content in 16 looks at the folder's size
            _prune(folder, 2 * KEEP_FILES)
    except OSError:
        return ()
    return names


def keep_keys(cluster: Path, spaces: Mapping[str, Path], keys: Iterable[str]) -> None:
    """`keep` the files of the file keys `keys` (worktrees by agent: `spaces`); other keys
    and files outside them are skipped."""
    for key in keys:
        rel = file_of(key)
        root = spaces.get(key.partition(":")[0])
        if rel is not None and root is not None:
            keep(cluster, Path(root) / rel)


def content(cluster: Path, digest: str) -> bytes | None:
    """The content kept under the hash `digest`, or None."""
    try:
        return (_folder(cluster, "contents") / _safe(digest)).read_bytes()
    except (OSError, ValueError):
        return None


def note_write(cluster: Path, key: str, path: Path, write: Write) -> None:
    """Record `write` as the last write of the file key `key` (its file at `path`), with the
    hashes of what the file holds now (MISSING when it is gone), keeping its content."""
    if path.exists() or path.is_symlink():
        found = keep(cluster, path) or file_hashes(path)
    else:
        found = (MISSING,)
    if not found:
        return  # unreadable: no session is named for it
    row = {
        "key": key,
        "hashes": list(found),
        "session": write.session,
        "agent": write.agent,
        "agent_type": write.agent_type,
        "client": write.client,
        "worktree": write.worktree,
        "at": write.at,
    }
    folder = _folder(cluster, "writes")
    target = folder / _name(key)
    line = (json.dumps(row) + "\n").encode()
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)  # one write(2) with O_APPEND: lines never interleave
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if size > MAX_WRITES_BYTES:  # start over with this write alone (the last one counts)
            tmp = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(line)
            tmp.replace(target)
        elif size == len(line):  # a file written for the first time
            _prune(folder, KEEP_FILES)
    except OSError:
        pass


def last_write(cluster: Path, key: str) -> Write | None:
    """The last recorded write of the file key `key` (`note_write`), or None."""
    try:
        text = (_folder(cluster, "writes") / _name(key)).read_text()
        row = json.loads(text.rstrip("\n").rpartition("\n")[2])  # the last write
        if row["key"] != key:
            return None
        return Write(
            tuple(str(h) for h in row["hashes"]),
            str(row["session"]),
            row["agent"] if isinstance(row["agent"], str) else None,
            row["agent_type"] if isinstance(row["agent_type"], str) else None,
            str(row["client"]),
            str(row["worktree"]),
            float(row["at"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _name(key: str) -> str:
    return hashlib.blake2b(key.encode(), digest_size=12).hexdigest() + ".jsonl"


def _safe(digest: str) -> str:
    """The file name of a hash (`git:HEX` -> `git-HEX`); raises ValueError for anything that
    is not one."""
    kind, _, hexed = digest.partition(":")
    if (
        kind not in ("git", "blake2b")
        or not hexed
        or not all(c in "0123456789abcdef" for c in hexed)
    ):
        raise ValueError(f"not a content hash: {digest!r}")
    return f"{kind}-{hexed}"


def _prune(folder: Path, limit: int) -> None:
    """Remove the oldest entries of `folder` beyond `limit` (down to three quarters)."""
    try:
        entries = list(os.scandir(folder))
        if len(entries) <= limit:
            return
        aged = sorted(entries, key=lambda e: e.stat(follow_symlinks=False).st_mtime_ns)
        for entry in aged[: len(entries) - limit * 3 // 4]:
            try:
                os.unlink(entry.path)
            except OSError:
                pass
    except OSError:
        pass


def now() -> float:
    """The time a write is recorded at."""
    return round(time.time(), 3)
