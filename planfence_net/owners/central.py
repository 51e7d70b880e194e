"""The central store of the `central` baseline (DESIGN section 4): one process, every record.

    python -m planfence_net.owners.central DIR [--agent central]

It is an owner daemon whose store holds every agent's records, so every write and every
validation of the centralized-lineage baseline goes through one place. Records stay signed
by their owners: a writer signs its record client side (with its own per-owner seq) and sends
the whole wire array as `put {"record": [...]}`. The central store verifies the record (id,
Ed25519 signature, that its owner owns its key), accepts it only from a session authenticated
as that owner and only with a seq above the owner's last one, and logs a `put` event exactly
like an owner does, so the invalid-action oracle reads its log unchanged. `heads` and `get`
serve every key that some roster agent owns; `stats` adds each owner's last seq under
`last_seq_by_owner` so a writer can resume its counter.

The central agent is a roster member (for the Noise handshake) that owns no keys.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import aiosqlite
import anyio

from ..cluster import ClusterDir
from ..errors import RecordError
from ..messages import BadRequest, Request, pack, unpack
from ..records import Record, record_from_wire, verify
from ..roster import Agent
from .daemon import OwnerDaemon, _Connection
from .logs import EventLog

CENTRAL_AGENT = "central"
SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id BLOB PRIMARY KEY, key TEXT NOT NULL, owner TEXT NOT NULL, seq INTEGER NOT NULL,
    wire BLOB NOT NULL, UNIQUE (owner, seq));
CREATE TRIGGER IF NOT EXISTS records_no_update BEFORE UPDATE ON records
BEGIN SELECT RAISE(ABORT, 'records are insert-only'); END;
CREATE TRIGGER IF NOT EXISTS records_no_delete BEFORE DELETE ON records
BEGIN SELECT RAISE(ABORT, 'records are insert-only'); END;
"""


@dataclass(frozen=True, slots=True)
class Head:
    key: str
    id: bytes
    seq: int


class _Pending:
    __slots__ = ("record", "done", "error")

    def __init__(self, record: Record) -> None:
        self.record = record
        self.done = anyio.Event()
        self.error: Exception | None = None


class CentralStore:
    """Every owner's records (WAL, synchronous=FULL, group commit, heads in memory)."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db
        self.heads: dict[str, Head] = {}
        self.last_seq: dict[str, int] = {}
        self.commits = self.records_written = 0
        self.on_commit: list[Callable[[list[Record]], None]] = []
        self._send, self._receive = anyio.create_memory_object_stream[_Pending](math.inf)

    @classmethod
    async def open(cls, path: Path) -> CentralStore:
        db = await aiosqlite.connect(path)
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=FULL")
        await db.executescript(SCHEMA)
        await db.commit()
        store = cls(db)
        async with db.execute("SELECT key, id, seq, owner FROM records ORDER BY rowid") as cur:
            async for key, rid, seq, owner in cur:
                store.heads[key] = Head(key, rid, seq)
                store.last_seq[owner] = max(seq, store.last_seq.get(owner, 0))
        return store

    async def wait_put(self, record: Record) -> None:
        """Queue a verified record; returns once durable. Raises BadRequest for a stale seq."""
        pending = _Pending(record)
        await self._send.send(pending)
        await pending.done.wait()
        if pending.error is not None:
            raise pending.error

    async def run_committer(self) -> None:
        async for first in self._receive:
            batch = [first]
            while True:
                try:
                    batch.append(self._receive.receive_nowait())
                except anyio.WouldBlock:
                    break
            await self._commit(batch)

    async def _commit(self, batch: list[_Pending]) -> None:
        good, seqs = [], dict(self.last_seq)
        for pending in batch:
            record = pending.record
            if record.seq <= seqs.get(record.owner, 0):
                pending.error = BadRequest("stale_seq", f"seq {record.seq} of {record.owner} "
                                                        f"is not above {seqs[record.owner]}")
                pending.done.set()
                continue
            seqs[record.owner] = record.seq
            good.append(pending)
        records = [p.record for p in good]
        try:
            with anyio.CancelScope(shield=True):
                await self._db.executemany(
                    "INSERT INTO records (id, key, owner, seq, wire) VALUES (?, ?, ?, ?, ?)",
                    [(r.id, r.key, r.owner, r.seq, pack(r.to_wire())) for r in records])
                await self._db.commit()
        except Exception as exc:
            with anyio.CancelScope(shield=True):
                await self._db.rollback()
            for pending in good:
                pending.error = exc
                pending.done.set()
            return
        self.last_seq = seqs
        self.commits += 1
        self.records_written += len(records)
        for record in records:
            self.heads[record.key] = Head(record.key, record.id, record.seq)
        for pending in good:
            pending.done.set()
        for callback in self.on_commit:
            callback(records)

    async def get(self, ids: list[bytes]) -> list[Record]:
        found: dict[bytes, Record] = {}
        marks = ",".join("?" * len(ids))
        async with self._db.execute(f"SELECT id, wire FROM records WHERE id IN ({marks})",
                                    ids) as cursor:
            async for rid, wire in cursor:
                found[rid] = record_from_wire(unpack(wire))
        return [found[rid] for rid in ids if rid in found]

    async def records_for(self, keys: list[str]) -> list[Record]:
        ids = [self.heads[k].id for k in keys if k in self.heads]
        return await self.get(ids) if ids else []

    async def close(self) -> None:
        self._send.close()
        with anyio.CancelScope(shield=True):
            await self._db.close()

    def statistics(self) -> dict[str, Any]:
        return {"keys": len(self.heads), "last_seq_by_owner": dict(self.last_seq),
                "commits": self.commits, "records_written": self.records_written}


class CentralDaemon(OwnerDaemon):
    """An owner daemon serving every key, accepting owner-signed records (module docstring)."""

    def _check_owned(self, keys: list[str]) -> None:
        for key in keys:
            if self.roster.owner_of(key) is None:
                raise BadRequest("not_owner", f"no roster agent owns {key!r}")

    async def _dispatch(self, connection: _Connection, request: Request) -> dict[str, Any]:
        if request.op == "put":
            return await self._put_record(connection.peer, request.args.get("record"))
        return await super()._dispatch(connection, request)

    async def _put_record(self, peer: Agent, wire: Any) -> dict[str, Any]:
        try:
            record = record_from_wire(wire)
            verify(record, public_key_of=self.roster.public_key_of,
                   owner_of=self.roster.owner_of)
        except RecordError as exc:
            raise BadRequest("bad_request", f"record rejected: {exc}") from None
        if record.owner != peer.name:
            raise BadRequest("forbidden", f"a record of {record.owner} sent by {peer.name}")
        await self.store.wait_put(record)  # type: ignore[attr-defined]
        self.log.write("put", key=record.key, id=record.id, seq=record.seq, kind=record.kind,
                       parents=list(record.parents), owner=record.owner)
        return {"id": record.id, "seq": record.seq}


async def run_central(cdir: ClusterDir, agent: str = CENTRAL_AGENT) -> None:
    """Serve the central store of the cluster at `cdir` until SIGTERM/SIGINT."""
    roster = cdir.roster()
    identity = cdir.identity(agent)
    log = EventLog(cdir.log(agent), agent)
    store = None
    try:
        store = await CentralStore.open(cdir.db(agent))
        daemon = CentralDaemon(roster, identity, store, log,  # type: ignore[arg-type]
                               max_message=16 * 1024 * 1024)
        await daemon.serve()
    finally:
        if store is not None:
            await store.close()
        log.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m planfence_net.owners.central")
    parser.add_argument("dir", type=Path)
    parser.add_argument("--agent", default=CENTRAL_AGENT)
    args = parser.parse_args(argv)
    anyio.run(run_central, ClusterDir(args.dir), args.agent, backend="asyncio")


if __name__ == "__main__":
    main()
