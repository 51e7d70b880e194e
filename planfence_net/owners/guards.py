"""Files beside an owner's store that keep it honest: its lock and its seq mark.

    NAME.sqlite.lock   flock'ed by the one daemon serving the store; holds that daemon's pid.
                       The store file itself is flock'ed too (SQLite's own locks are fcntl
                       locks, which flock does not meet), so a deleted lock file lets no
                       second daemon in.
    NAME.sqlite.seq    the highest seq the owner ever acknowledged, written durably before
                       the acknowledgement, kept apart from the records (and their WAL)

A store whose records end below the mark lost acknowledged records (a deleted WAL, a store
restored from an old copy, a 0-byte file): the owner refuses to start rather than sign a seq
it already used.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
from pathlib import Path

from ..core.errors import StoreError

_MARK_FORMAT = re.compile(rb"\A\d{20}\n\Z")


def lock_path(store: Path) -> Path:
    return store.with_name(store.name + ".lock")


def mark_path(store: Path) -> Path:
    return store.with_name(store.name + ".seq")


class StoreLock:
    """Exclusive flocks on the store's lock file and on the store file, held on open
    descriptors until `release` (or process exit, also kill -9). `acquire` raises StoreError
    `store_in_use` naming the holder's pid (found in /proc/locks when its lock file was
    deleted). The store file's descriptor stays open as long as SQLite has the store open:
    closing any descriptor of a file drops the process's fcntl locks on it."""

    def __init__(self, fds: list[int]) -> None:
        self._fds = fds

    @classmethod
    def acquire(cls, store: Path) -> StoreLock:
        fds: list[int] = []
        try:
            for path in (lock_path(store), store):
                fds.append(_locked(path, store))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        os.ftruncate(fds[0], 0)
        os.pwrite(fds[0], f"{os.getpid()}\n".encode(), 0)
        return cls(fds)

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)  # closing the only descriptor drops the flock
        self._fds = []


def _locked(path: Path, store: Path) -> int:
    """A descriptor of `path` (created if missing) holding its exclusive flock."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StoreError("store_damaged", f"cannot open {path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = _flock_holder(fd)
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
            raise StoreError(
                "store_in_use", f"store {store} is in use by pid {holder}; stop that owner first"
            ) from None
        raise StoreError("store_damaged", f"cannot lock {path}: {exc.strerror}") from None
    return fd


def _flock_holder(fd: int) -> str:
    """The pid holding a flock on `fd`'s file, from /proc/locks ("?" when not found)."""
    st = os.fstat(fd)
    file = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as locks:
            for line in locks:
                fields = line.split()
                if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == file:
                    return fields[4]
    except OSError:
        pass
    return "?"


class SeqMark:
    """The highest acknowledged seq, in a fixed-width file rewritten in place and fsynced.

    Rewriting the same 21 bytes in place needs no new disk blocks, so a full disk cannot
    stop the mark from advancing once it exists.
    """

    def __init__(self, path: Path, fd: int, value: int | None) -> None:
        self.path = path
        self._fd = fd
        self.value = value

    @classmethod
    def open(cls, store: Path) -> SeqMark:
        """Open (or create, empty) the mark beside `store`. `value` is None when the owner
        never acknowledged anything. Raises StoreError `store_damaged` for an unreadable
        mark."""
        path = mark_path(store)
        created = not path.exists()
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StoreError("store_damaged", f"cannot open {path}: {exc.strerror}") from None
        data = os.pread(fd, 64, 0)
        if created:
            _fsync_dir(path.parent)
        if not data:
            return cls(path, fd, None)
        if not _MARK_FORMAT.match(data):
            os.close(fd)
            raise StoreError(
                "store_damaged",
                f"seq mark {path} is damaged ({data[:24]!r}); "
                f"restore it with the store from a backup",
            )
        return cls(path, fd, int(data))

    def advance(self, seq: int) -> None:
        """Durably record `seq` as acknowledged (never moves back). Raises OSError."""
        if self.value is not None and seq <= self.value:
            return
        os.pwrite(self._fd, b"%020d\n" % seq, 0)
        os.fdatasync(self._fd)
        self.value = seq

    def close(self) -> None:
        os.close(self._fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
