"""Where the harness's records are written: each owner's own daemon, or the central store.

`OwnerWriter` writes every key as its owner on the owner's own daemon, over a direct session:
an owner writing its own records is local, so it is not coordination traffic. `CentralWriter`
signs each record client side as its owner (with the owner's own seq counter) and sends it to
the central store, through the owner's link and the store's when there are links; those bytes are the central
baseline's coordination traffic. Both return the signed `Record`, so the harness can hand a
plan and its lineage to the executor the way a planner would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup

from ..core.errors import ConfigError
from ..core.identity import Identity
from ..core.records import Record, make_record, record_from_wire
from ..core.roster import Roster
from ..executor.pool import SessionPool

CENTRAL = "central"


class Writer(Protocol):
    heads: dict[str, Record]

    async def put(
        self, key: str, body: Any, parents: tuple[bytes, ...] = (), kind: str = "fact"
    ) -> Record: ...
    def traffic(self) -> int: ...
    async def aclose(self) -> None: ...


class _Writers:
    def __init__(
        self, tg: TaskGroup, roster: Roster, identity_of: Callable[[str], Identity]
    ) -> None:
        self.tg = tg
        self.roster = roster
        self.identity_of = identity_of
        self.pools: dict[str, SessionPool] = {}
        self.heads: dict[str, Record] = {}

    def owner(self, key: str) -> str:
        owner = self.roster.owner_of(key)
        if owner is None:
            raise ConfigError(f"no agent owns {key!r}")
        return owner

    def _remember(self, record: Record) -> Record:
        self.heads[record.key] = record
        return record

    def traffic(self) -> int:
        return sum(sum(pool.traffic()) for pool in self.pools.values())

    async def aclose(self) -> None:
        for pool in self.pools.values():
            await pool.aclose()


class OwnerWriter(_Writers):
    """Each key written by its owner on its own daemon (direct, not counted as traffic)."""

    def _pool(self, owner: str) -> SessionPool:
        if owner not in self.pools:
            self.pools[owner] = SessionPool(self.tg, self.roster, self.identity_of(owner))
        return self.pools[owner]

    async def put(
        self, key: str, body: Any, parents: tuple[bytes, ...] = (), kind: str = "fact"
    ) -> Record:
        owner = self.owner(key)
        pool = self._pool(owner)
        result = await pool.request(
            owner, "put", {"key": key, "kind": kind, "parents": list(parents), "body": body}
        )
        # The owner signs deterministically: rebuild its record instead of fetching it back.
        record = make_record(
            self.identity_of(owner).signing_key,
            key=key,
            owner=owner,
            seq=result["seq"],
            parents=parents,
            kind=kind,
            body=body,
        )
        if record.id != result["id"]:
            fetched = await pool.request(owner, "get", {"ids": [result["id"]]})
            record = record_from_wire(fetched["records"][0])
        return self._remember(record)

    def traffic(self) -> int:
        return 0  # an owner writing to its own daemon is local, not coordination


class CentralWriter(_Writers):
    """Every record signed by its owner and stored at the central store (counted)."""

    def __init__(
        self,
        tg: TaskGroup,
        roster: Roster,
        identity_of: Callable[[str], Identity],
        addresses_of: Callable[[str], dict[str, tuple[str, int]]],
    ) -> None:
        super().__init__(tg, roster, identity_of)
        self.addresses_of = addresses_of
        self.seq: dict[str, int] = {}
        self._locks: dict[str, anyio.Lock] = {}

    async def _pool(self, owner: str) -> SessionPool:
        if owner not in self.pools:
            pool = SessionPool(
                self.tg, self.roster, self.identity_of(owner), self.addresses_of(owner)
            )
            stats = await pool.request(CENTRAL, "stats", {})
            self.seq[owner] = int(stats.get("last_seq_by_owner", {}).get(owner, 0))
            self.pools[owner] = pool
        return self.pools[owner]

    async def put(
        self, key: str, body: Any, parents: tuple[bytes, ...] = (), kind: str = "fact"
    ) -> Record:
        owner = self.owner(key)
        lock = self._locks.setdefault(owner, anyio.Lock())
        async with lock:  # one owner's seqs must reach the store in order
            pool = await self._pool(owner)
            record = make_record(
                self.identity_of(owner).signing_key,
                key=key,
                owner=owner,
                seq=self.seq[owner] + 1,
                parents=parents,
                kind=kind,
                body=body,
            )
            await pool.request(CENTRAL, "put", {"record": record.to_wire()})
            self.seq[owner] = record.seq
        return self._remember(record)
