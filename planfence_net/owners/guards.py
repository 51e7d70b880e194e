"""Files beside an owner's store that keep it honest: its lock and its seq mark.

    NAME.sqlite.lock   flock'ed by the one daemon serving the store; holds that daemon's pid
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
    """An exclusive flock on the store's lock file, held until `release` (or process exit,
    also kill -9). `acquire` raises StoreError `store_in_use` naming the holder's pid."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, store: Path) -> StoreLock:
        path = lock_path(store)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StoreError("store_damaged", f"cannot open {path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
                raise StoreError(
                    "store_in_use",
                    f"store {store} is in use by pid {holder}; stop that owner first",
                ) from None
            raise StoreError("store_damaged", f"cannot lock {path}: {exc.strerror}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None


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
