"""The owner's record store: aiosqlite, WAL, synchronous=FULL, insert-only, group commit.

A put is acknowledged only after the transaction holding it has committed. Concurrent puts
are collected by one committer task and written in one transaction (group commit). Heads
are served from memory: loaded at open, updated after each commit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import aiosqlite
import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..records import Record, record_from_wire
from ..messages import pack, unpack

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id BLOB PRIMARY KEY,
    key TEXT NOT NULL,
    seq INTEGER NOT NULL UNIQUE,
    wire BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS records_key_seq ON records (key, seq);
CREATE TRIGGER IF NOT EXISTS records_no_update BEFORE UPDATE ON records
BEGIN SELECT RAISE(ABORT, 'records are insert-only'); END;
CREATE TRIGGER IF NOT EXISTS records_no_delete BEFORE DELETE ON records
BEGIN SELECT RAISE(ABORT, 'records are insert-only'); END;
"""

Signer = Callable[[str, str, list[bytes], Any, int], Record]


@dataclass(frozen=True, slots=True)
class Head:
    key: str
    id: bytes
    seq: int


class _PendingPut:
    __slots__ = ("key", "kind", "parents", "body", "done", "record", "error")

    def __init__(self, key: str, kind: str, parents: list[bytes], body: Any) -> None:
        self.key, self.kind, self.parents, self.body = key, kind, parents, body
        self.done = anyio.Event()
        self.record: Record | None = None
        self.error: Exception | None = None


class Store:
    """Records of one owner. Open with `Store.open`, run `run_committer` in a task group."""

    def __init__(self, db: aiosqlite.Connection, sign: Signer) -> None:
        self._db = db
        self._sign = sign
        self.heads: dict[str, Head] = {}
        self.last_seq = 0
        self.commits = 0
        self.records_written = 0
        self._send: MemoryObjectSendStream[_PendingPut]
        self._receive: MemoryObjectReceiveStream[_PendingPut]
        self._send, self._receive = anyio.create_memory_object_stream[_PendingPut](math.inf)
        self.on_commit: list[Callable[[list[Record]], None]] = []

    @classmethod
    async def open(cls, path: Path, sign: Signer) -> Store:
        """Open (or create) the store at `path` and load heads into memory."""
        db = await aiosqlite.connect(path)
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=FULL")
        await db.executescript(SCHEMA)
        await db.commit()
        store = cls(db, sign)
        query = ("SELECT key, id, seq FROM records WHERE seq IN "
                 "(SELECT MAX(seq) FROM records GROUP BY key)")
        async with db.execute(query) as cursor:
            async for key, rid, seq in cursor:
                store.heads[key] = Head(key, rid, seq)
        async with db.execute("SELECT COALESCE(MAX(seq), 0) FROM records") as cursor:
            row = await cursor.fetchone()
            store.last_seq = row[0] if row else 0
        return store

    async def wait_put(self, key: str, kind: str, parents: list[bytes], body: Any) -> Record:
        """Queue a put and wait until it is durable; returns the signed record."""
        pending = _PendingPut(key, kind, parents, body)
        await self._send.send(pending)
        await pending.done.wait()
        if pending.error is not None:
            raise pending.error
        assert pending.record is not None
        return pending.record

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

    async def _commit(self, batch: list[_PendingPut]) -> None:
        records: list[Record] = []
        good: list[_PendingPut] = []
        seq = self.last_seq
        for pending in batch:
            try:
                record = self._sign(pending.key, pending.kind, pending.parents, pending.body,
                                    seq + 1)
            except Exception as exc:  # a bad body fails its own put only
                pending.error = exc
                pending.done.set()
                continue
            seq += 1
            records.append(record)
            good.append(pending)
        try:
            with anyio.CancelScope(shield=True):
                await self._db.executemany(
                    "INSERT INTO records (id, key, seq, wire) VALUES (?, ?, ?, ?)",
                    [(r.id, r.key, r.seq, pack(r.to_wire())) for r in records])
                await self._db.commit()
        except Exception as exc:
            with anyio.CancelScope(shield=True):
                await self._db.rollback()
            for pending in good:
                pending.error = exc
                pending.done.set()
            return
        self.last_seq = seq
        self.commits += 1
        self.records_written += len(records)
        for record in records:
            self.heads[record.key] = Head(record.key, record.id, record.seq)
        for pending, record in zip(good, records):
            pending.record = record
            pending.done.set()
        for callback in self.on_commit:
            callback(records)

    async def get(self, ids: list[bytes]) -> list[Record]:
        """The records among `ids` that this store holds, in the order asked."""
        found: dict[bytes, Record] = {}
        marks = ",".join("?" * len(ids))
        async with self._db.execute(f"SELECT id, wire FROM records WHERE id IN ({marks})",
                                    ids) as cursor:
            async for rid, wire in cursor:
                found[rid] = record_from_wire(unpack(wire))
        return [found[rid] for rid in ids if rid in found]

    async def records_for(self, keys: list[str]) -> list[Record]:
        """The head records of `keys` (those that exist)."""
        ids = [self.heads[k].id for k in keys if k in self.heads]
        return await self.get(ids) if ids else []

    async def close(self) -> None:
        self._send.close()
        self._receive.close()
        with anyio.CancelScope(shield=True):
            await self._db.close()

    def statistics(self) -> dict[str, Any]:
        return {"keys": len(self.heads), "last_seq": self.last_seq, "commits": self.commits,
                "records_written": self.records_written}
