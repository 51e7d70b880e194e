"""The owner's record store: aiosqlite, WAL, synchronous=FULL, insert-only, group commit.

A put is acknowledged only after the transaction holding it has committed and the owner's
seq mark (guards.SeqMark) has durably moved past it. Concurrent puts are collected by one
committer task and written in one transaction (group commit); a put_many's records are
written in one transaction, all or none. Heads are served from memory: loaded at open from
the `heads` table (one row per key, kept by an insert trigger in each insert's transaction,
so start-up reads as many rows as there are keys, not records), updated after each commit.

The store never lies: one daemon at a time holds it (guards.StoreLock); it refuses to open
when SQLite's quick_check finds damage or when acknowledged records are missing (its seqs end
below the mark); every record read is checked against its id before it is served.
"""

from __future__ import annotations

import errno
import math
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiosqlite
import anyio
from anyio.lowlevel import checkpoint
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..core.errors import PlanfenceError, StoreError
from ..core.records import Record, record_from_wire
from ..protocol.messages import pack, unpack
from .guards import SeqMark, StoreLock
from .heads import Head, last_seqs, load_heads, rebuild_heads

RECENT = 256  # records written last, kept in memory by id

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id BLOB PRIMARY KEY,
    key TEXT NOT NULL,
    owner TEXT NOT NULL,
    seq INTEGER NOT NULL,
    wire BLOB NOT NULL,
    UNIQUE (owner, seq)
);
CREATE INDEX IF NOT EXISTS records_key_seq ON records (key, seq);
CREATE TRIGGER IF NOT EXISTS records_no_update BEFORE UPDATE ON records
BEGIN SELECT RAISE(ABORT, 'records are insert-only'); END;
CREATE TRIGGER IF NOT EXISTS records_no_delete BEFORE DELETE ON records
BEGIN SELECT RAISE(ABORT, 'records are insert-only'); END;
CREATE TABLE IF NOT EXISTS heads (
    key TEXT PRIMARY KEY,
    id BLOB NOT NULL,
    seq INTEGER NOT NULL,
    rid INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS records_head AFTER INSERT ON records
BEGIN INSERT OR REPLACE INTO heads (key, id, seq, rid)
VALUES (NEW.key, NEW.id, NEW.seq, NEW.rowid); END;
"""

Signer = Callable[[str, str, list[bytes], Any, int], Record]


class StaleSeq(Exception):
    """A pre-signed record whose seq is not above its owner's last one."""


Fields = tuple[str, str, list[bytes], Any]  # a put's key, kind, parents and body
SIGN_TURN = 256  # records signed between two yields to the event loop (a put_many's batch)


class PutItemError(Exception):
    """Item `item` of a `wait_put_many` could not become a record (`error` says why);
    nothing of that put_many was written."""

    def __init__(self, item: int, error: Exception) -> None:
        super().__init__(f"item {item}: {error}")
        self.item = item
        self.error = error


class _PendingPut:
    """Puts waiting for the committer, written in one transaction or not at all: fields to
    sign (one put, or a put_many's items), or a record signed elsewhere."""

    __slots__ = ("fields", "done", "records", "error", "many")

    def __init__(self, fields: list[Fields], records: list[Record], many: bool = False) -> None:
        self.fields = fields
        self.done = anyio.Event()
        self.records = records
        self.error: Exception | None = None
        self.many = many  # an item's error is raised as PutItemError


class Store:
    """Records in one SQLite file. Open with `Store.open`, run `run_committer` in a task group.

    An owner's store signs what it is given as `owner` (`wait_put`); the central store of the
    centralized baseline takes records their owners signed (`wait_put_record`). Seqs are
    counted per owner in both cases.
    """

    def __init__(
        self,
        db: aiosqlite.Connection,
        sign: Signer | None,
        owner: str | None,
        path: Path,
        lock: StoreLock,
        mark: SeqMark,
    ) -> None:
        self._db = db
        self.path = path
        self._lock = lock
        self._mark = mark
        self._sign = sign
        self.owner = owner
        self.heads: dict[str, Head] = {}
        self.last_seq_by_owner: dict[str, int] = {}
        self.commits = 0
        self.records_written = 0
        self._send: MemoryObjectSendStream[_PendingPut]
        self._receive: MemoryObjectReceiveStream[_PendingPut]
        self._send, self._receive = anyio.create_memory_object_stream[_PendingPut](math.inf)
        self.on_commit: list[Callable[[list[Record]], None]] = []
        # The records written last, by id, with their stored size: a changed head's record,
        # sent inline to every executor that asks, and a new plan every executor fetches,
        # are served without a read behind the committer (records never change)
        self.recent: dict[bytes, tuple[Record, int]] = {}

    @classmethod
    async def open(
        cls,
        path: Path,
        sign: Signer | None = None,
        owner: str | None = None,
        *,
        accept_loss: bool = False,
    ) -> Store:
        """Open (or create) the store at `path` and load heads into memory. `sign` and
        `owner` are needed for `wait_put` only.

        Raises StoreError: `store_in_use` (another daemon holds it), `store_damaged` (SQLite
        finds the file damaged), `store_lost_records` (its records end below the seq mark;
        with `accept_loss` it opens anyway and signs above the mark, never reusing a seq).
        """
        lock = StoreLock.acquire(path)
        mark: SeqMark | None = None
        db: aiosqlite.Connection | None = None
        store: Store | None = None
        try:
            mark = SeqMark.open(path)
            db = await aiosqlite.connect(path)
            store = cls(db, sign, owner, path, lock, mark)
            await store._load()
            store._check_mark(accept_loss)
            return store
        except BaseException as exc:
            if store is not None:  # the committer's queue, never used
                store._send.close()
                store._receive.close()
            # a failed open must not leave aiosqlite's worker thread keeping the process alive
            with anyio.CancelScope(shield=True):
                if db is not None:
                    await db.close()
            if mark is not None:
                mark.close()
            lock.release()
            if isinstance(exc, (sqlite3.Error, OSError)):
                raise _open_error(path, exc) from None
            raise

    async def _load(self) -> None:
        db = self._db
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=FULL")
        async with db.execute("PRAGMA quick_check") as cursor:
            problems = [row[0] async for row in cursor if row[0] != "ok"]
        if problems:
            more = f" and {len(problems) - 1} more problems" if len(problems) > 1 else ""
            first = " ".join(problems[0].split())  # SQLite's report may span lines
            raise StoreError(
                "store_damaged",
                f"store {self.path} is damaged ({first}{more}); restore it from a backup",
            )
        await db.executescript(SCHEMA)
        await db.commit()
        self.last_seq_by_owner = await last_seqs(db)
        if self.last_seq_by_owner and not await db.execute_fetchall("SELECT 1 FROM heads LIMIT 1"):
            await rebuild_heads(db)  # a store from before the heads table
        self.heads, wrong = await load_heads(
            db, self.last_seq_by_owner, self._checked, strict=False
        )
        if wrong is None:
            return
        await rebuild_heads(db)  # stale (an older compaction's VACUUM) or damaged
        self.heads, wrong = await load_heads(db, self.last_seq_by_owner, self._checked, strict=True)
        if wrong is not None:
            raise StoreError(
                "store_damaged", f"store {self.path} is damaged ({wrong}); restore it from a backup"
            )

    def _check_mark(self, accept_loss: bool) -> None:
        """Refuse a store that lost acknowledged records; bring a missing mark up to date."""
        if self.owner is None:  # the central store keeps other owners' records
            return
        last, acked = self.last_seq_by_owner.get(self.owner, 0), self._mark.value or 0
        if last < acked and not accept_loss:
            raise StoreError(
                "store_lost_records",
                f"store {self.path} holds seqs up to {last} but seq {acked} was "
                f"acknowledged: acknowledged records were lost; restore the store "
                f"from a backup, or start with --accept-loss to sign above seq "
                f"{acked} (the lost records stay lost)",
            )
        if last < acked:
            self.last_seq_by_owner[self.owner] = acked  # never sign a used seq again
        elif last > acked or self._mark.value is None:
            self._mark.advance(last)

    @property
    def last_seq(self) -> int:
        """The highest seq stored (an owner's store holds one owner's records)."""
        return max(self.last_seq_by_owner.values(), default=0)

    async def wait_put(self, key: str, kind: str, parents: list[bytes], body: Any) -> Record:
        """Sign a record as this store's owner with the next seq and wait until it is
        durable; returns it."""
        if self._sign is None or self.owner is None:
            raise TypeError("this store was opened without a signer")
        return (await self._wait(_PendingPut([(key, kind, parents, body)], [])))[0]

    async def wait_put_many(self, items: list[Fields]) -> list[Record]:
        """Sign one record per item, as `wait_put` would, with consecutive seqs in item
        order, and wait until all are durable, written in one transaction; returns them.
        Raises PutItemError (nothing written) when an item cannot become a record."""
        if self._sign is None or self.owner is None:
            raise TypeError("this store was opened without a signer")
        return await self._wait(_PendingPut(items, [], many=True))

    async def wait_put_record(self, record: Record) -> Record:
        """Store a record its owner signed (already verified) once durable. Raises StaleSeq
        when its seq is not above the owner's last one."""
        return (await self._wait(_PendingPut([], [record])))[0]

    async def _wait(self, pending: _PendingPut) -> list[Record]:
        await self._send.send(pending)
        await pending.done.wait()
        if pending.error is not None:
            raise pending.error
        return pending.records

    async def run_committer(self) -> None:
        """Commit queued puts in groups until cancelled."""
        async for first in self._receive:
            batch = [first]
            while True:
                try:
                    batch.append(self._receive.receive_nowait())
                except anyio.WouldBlock:
                    break
            await self._commit(batch)

    async def _prepare(self, batch: list[_PendingPut], seqs: dict[str, int]) -> list[_PendingPut]:
        """Give every put of `batch` its records and seqs; fail the ones that cannot have
        them (a put_many as a whole). Yields to the event loop every SIGN_TURN signatures, so
        a large put_many does not hold up other sessions' answers."""
        good = []
        for pending in batch:
            before = dict(seqs)
            try:
                await self._sign_fields(pending, seqs.get(self.owner or "", 0))
                for record in pending.records:
                    last = seqs.get(record.owner, 0)
                    if record.seq <= last:
                        raise StaleSeq(f"seq {record.seq} of {record.owner} is not above {last}")
                    seqs[record.owner] = record.seq
            except Exception as exc:  # a bad body or a stale seq fails its own put only
                seqs.clear()
                seqs.update(before)  # its seqs are free again
                pending.records = []
                pending.error = exc
                pending.done.set()
                continue
            good.append(pending)
        return good

    async def _sign_fields(self, pending: _PendingPut, last: int) -> None:
        """Sign `pending`'s fields with the seqs after `last`, in order."""
        if not pending.fields:
            return
        assert self._sign is not None and self.owner is not None
        records = []
        for index, fields in enumerate(pending.fields):
            if index and index % SIGN_TURN == 0:
                await checkpoint()
            try:
                records.append(self._sign(*fields, last + index + 1))
            except Exception as exc:
                raise PutItemError(index, exc) if pending.many else exc from None
        pending.records = records

    async def _commit(self, batch: list[_PendingPut]) -> None:
        seqs = dict(self.last_seq_by_owner)
        with anyio.CancelScope(shield=True):  # the puts of `batch` wait for their answer
            good = await self._prepare(batch, seqs)
        records = [r for p in good for r in p.records]
        try:
            with anyio.CancelScope(shield=True):
                await self._write(records)
        except Exception as exc:
            with anyio.CancelScope(shield=True):
                await self._rollback()
            for pending in good:
                pending.error = _store_error(exc)
                pending.done.set()
            return
        self.last_seq_by_owner = seqs
        self.commits += 1
        self.records_written += len(records)
        for record in records:
            self.heads[record.key] = Head(record.key, record.id, record.seq)
        error = await self._advance_mark(seqs)
        for pending in good:
            pending.error = error
            pending.done.set()
        for callback in self.on_commit:
            callback(records)

    async def _write(self, records: list[Record]) -> None:
        rows = [(r.id, r.key, r.owner, r.seq, pack(r.to_wire())) for r in records]
        await self._db.executemany(
            "INSERT INTO records (id, key, owner, seq, wire) VALUES (?, ?, ?, ?, ?)", rows
        )
        await self._db.commit()
        for record, row in zip(records[-RECENT:], rows[-RECENT:], strict=True):
            self.recent[record.id] = (record, len(row[4]))
        while len(self.recent) > RECENT:
            del self.recent[next(iter(self.recent))]

    async def _rollback(self) -> None:
        try:
            await self._db.rollback()
        except sqlite3.Error:  # SQLite may have rolled back already (a full disk)
            pass

    async def _advance_mark(self, seqs: dict[str, int]) -> Exception | None:
        """Move the seq mark past the committed records before they are acknowledged;
        the error to answer the puts with when it cannot (they are stored, not acked)."""
        if self.owner is None or self.owner not in seqs:
            return None
        try:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._mark.advance, seqs[self.owner])
        except OSError as exc:
            return _store_error(exc)
        return None

    async def get(self, ids: list[bytes]) -> list[Record]:
        """The records among `ids` that this store holds, in the order asked. Raises
        StoreError `store_damaged` when a stored record no longer hashes to its id."""
        recent = self.recent
        if all(rid in recent for rid in ids):
            return [recent[rid][0] for rid in ids]
        found: dict[bytes, Record] = {}
        marks = ",".join("?" * len(ids))
        async with self._db.execute(
            f"SELECT id, wire FROM records WHERE id IN ({marks})", ids
        ) as cursor:
            async for rid, wire in cursor:
                found[rid] = self._checked(rid, wire)
        return [found[rid] for rid in ids if rid in found]

    async def sizes(self, ids: list[bytes]) -> dict[bytes, int]:
        """The encoded size (msgpack of the wire form, as in a reply) of each record among
        `ids` that this store holds, read without loading the records."""
        recent = self.recent
        if all(rid in recent for rid in ids):
            return {rid: recent[rid][1] for rid in ids}
        marks = ",".join("?" * len(ids))
        async with self._db.execute(
            f"SELECT id, length(wire) FROM records WHERE id IN ({marks})", ids
        ) as cursor:
            return {rid: size async for rid, size in cursor}

    def _checked(self, rid: bytes, wire: bytes) -> Record:
        try:
            record = record_from_wire(unpack(wire))
        except (PlanfenceError, ValueError, TypeError) as exc:
            record, why = None, f"unreadable ({exc})"
        else:
            why = "does not hash to its id"
        if record is None or record.id != rid:
            raise StoreError(
                "store_damaged",
                f"record {rid.hex()} in store {self.path.name} {why}: the store is damaged",
            )
        return record

    async def records_for(self, keys: list[str]) -> list[Record]:
        """The head records of `keys` (those that exist)."""
        ids = [self.heads[k].id for k in keys if k in self.heads]
        return await self.get(ids) if ids else []

    async def close(self) -> None:
        self._send.close()
        self._receive.close()
        with anyio.CancelScope(shield=True):
            await self._db.close()
        self._mark.close()
        self._lock.release()

    def statistics(self) -> dict[str, Any]:
        return {
            "keys": len(self.heads),
            "last_seq": self.last_seq,
            "last_seq_by_owner": dict(self.last_seq_by_owner),
            "commits": self.commits,
            "records_written": self.records_written,
        }


SQLITE_FULL = 13


def _store_error(exc: Exception) -> Exception:
    """A full disk as StoreError `store_full`; any other error unchanged."""
    full = (
        isinstance(exc, sqlite3.Error)
        and getattr(exc, "sqlite_errorcode", None) == SQLITE_FULL
        or isinstance(exc, OSError)
        and exc.errno == errno.ENOSPC
    )
    if full:
        return StoreError("store_full", "the owner's disk is full; the put is not acknowledged")
    return exc


def _open_error(path: Path, exc: sqlite3.Error | OSError) -> StoreError:
    """Why the store at `path` cannot be opened, as one line."""
    if isinstance(_store_error(exc), StoreError):
        return StoreError("store_full", f"cannot open store {path}: the disk is full")
    if isinstance(exc, OSError):
        return StoreError("store_damaged", f"cannot open store {path}: {exc.strerror}")
    return StoreError("store_damaged", f"store {path} is damaged ({exc}); restore it from a backup")
