"""Where the harness's records are written: each owner's own daemon, or the central store.

`OwnerWriter` writes every key as its owner on the owner's own daemon, over a direct session:
an owner writing its own records is local, so it is not coordination traffic. `CentralWriter`
signs each record client side as its owner (with the owner's own seq counter) and sends it to
the central store, through the owner's link and the store's when there are links; those bytes are the central
baseline's coordination traffic, except a plan's and its summaries' (plan delivery is charged
to no policy: every executor receives its plan by handoff). `SyncWriter` completes an update
of a sync group only once every participant has acknowledged it (bench/policies/sync.py). All return
the signed `Record`, so the harness can hand a plan and its lineage to the executor the way a
planner would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup

from ...core.errors import ConfigError, PlanfenceError
from ...core.identity import Identity
from ...core.records import Record, make_record, record_from_wire
from ...core.roster import Roster
from ...executor.pool import SessionPool
from ...protocol.messages import pack

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
    """Every record signed by its owner and stored at the central store (counted).

    An owner's puts are pipelined on its one session to the store: a put takes the owner's
    next seq and goes on the wire in the same event-loop step (no wait between them), so its
    records reach the store in seq order while many are in flight at once (the store answers
    each once durable, group-committing the ones that arrive together). With `hold_plans` on
    (the `central` policy, while it validates) a plan is signed and held instead of sent:
    `take_held` hands it to the executor's next `validate`, which writes it at the store and
    re-validates in one round trip (the put-if)."""

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
        self._opening: dict[str, anyio.Lock] = {}
        self.plan_bytes = 0  # bytes of plan and summary puts: plan delivery, charged to none
        self.hold_plans = False
        self.held: list[Record] = []
        self.in_flight = 0
        self.peak_in_flight = 0  # the most puts on the wire at once

    async def _pool(self, owner: str) -> SessionPool:
        """The owner's pool with a live session to the store (its seq counter read once)."""
        if owner not in self.pools:
            async with self._opening.setdefault(owner, anyio.Lock()):
                if owner not in self.pools:
                    pool = SessionPool(
                        self.tg, self.roster, self.identity_of(owner), self.addresses_of(owner)
                    )
                    stats = await pool.request(CENTRAL, "stats", {})
                    self.seq[owner] = int(stats.get("last_seq_by_owner", {}).get(owner, 0))
                    self.pools[owner] = pool
        return self.pools[owner]

    def _sign(
        self, owner: str, key: str, body: Any, parents: tuple[bytes, ...], kind: str
    ) -> Record:
        """The owner's next record (takes its next seq)."""
        self.seq[owner] += 1
        return make_record(
            self.identity_of(owner).signing_key,
            key=key,
            owner=owner,
            seq=self.seq[owner],
            parents=parents,
            kind=kind,
            body=body,
        )

    async def put(
        self, key: str, body: Any, parents: tuple[bytes, ...] = (), kind: str = "fact"
    ) -> Record:
        owner = self.owner(key)
        pool = await self._pool(owner)
        session = await pool.session(CENTRAL)
        # from here to the wire no await: seq order is wire order (class docstring)
        record = self._sign(owner, key, body, parents, kind)
        if self.hold_plans and kind == "plan":
            self.held.append(record)
            return self._remember(record)
        before = sum(pool.traffic())
        reply, data = pool.prepare_on(session, CENTRAL, "put", {"record": record.to_wire()})
        pool.write_on(session, CENTRAL, data)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            await reply.wait()
        finally:
            self.in_flight -= 1
        if kind in ("plan", "summary"):
            self.plan_bytes += sum(pool.traffic()) - before
        return self._remember(record)

    def take_held(self) -> list[Record]:
        """The plans held for the next `validate` (emptied). Their encoded size is plan
        delivery, charged to none, as a plan's own put is."""
        held, self.held = self.held, []
        self.plan_bytes += sum(len(pack(r.to_wire())) for r in held)
        return held

    def drop_held(self) -> None:
        """Forget the plans no `validate` carried (the action blocked before)."""
        self.held = []

    def statistics(self) -> dict[str, int]:
        """Puts on the wire now and at most at once."""
        return {"in_flight": self.in_flight, "peak_in_flight": self.peak_in_flight}

    def traffic(self) -> int:
        """Bytes to and from the store, less plan delivery (module docstring)."""
        return super().traffic() - self.plan_bytes


class SyncWriter(OwnerWriter):
    """Each key written by its owner on its own daemon (as `OwnerWriter`); an update of a key
    in a sync group (bench/policies/sync.py) completes only once every member of the group has
    acknowledged it. The writer's session joins the group with a subscription to the owner's
    own keys (`join`), so it may ask its daemon `synced`: with K = 1 every `put` waits for
    it; with K > 1 updates gather and `settle` completes them, pushing what is held back."""

    def __init__(
        self, tg: TaskGroup, roster: Roster, identity_of: Callable[[str], Identity]
    ) -> None:
        super().__init__(tg, roster, identity_of)
        self.groups: dict[str, str] = {}  # key -> its sync group
        self.k = 1
        self.pending: dict[tuple[str, str], list[str]] = {}  # (owner, group) -> keys

    async def join(self, group: str, owned: dict[str, list[str]], k: int) -> None:
        """Join `group` for each owner's keys in `owned`; pushes every `k` updates."""
        self.k = k
        for owner, keys in owned.items():
            session = await self._pool(owner).session(owner)
            stream = await session.subscribe(list(dict.fromkeys(keys)), every=k, group=group)
            self.tg.start_soon(_acknowledge, session, stream, group)
            self.groups.update(dict.fromkeys(keys, group))

    async def put(
        self, key: str, body: Any, parents: tuple[bytes, ...] = (), kind: str = "fact"
    ) -> Record:
        record = await super().put(key, body, parents, kind)
        group = self.groups.get(key)
        if group is not None and self.k == 1:
            await self._complete(record.owner, group, [key])
        elif group is not None:
            self.pending.setdefault((record.owner, group), []).append(key)
        return record

    async def settle(self) -> None:
        """Wait until every update written so far has been acknowledged by every member."""
        pending, self.pending = self.pending, {}
        async with anyio.create_task_group() as tg:
            for (owner, group), keys in pending.items():
                tg.start_soon(self._complete, owner, group, list(dict.fromkeys(keys)))

    async def _complete(self, owner: str, group: str, keys: list[str]) -> None:
        await self._pool(owner).request(owner, "synced", {"group": group, "keys": keys})


async def _acknowledge(session: Any, stream: Any, group: str) -> None:
    """Acknowledge every push of the writer's own subscription until the session ends."""
    async with stream:
        async for push in stream:
            try:
                await session.request("ack", {"group": group, "seq": push["seq"]})
            except PlanfenceError:
                return
