"""What an owner does for each operation: `OwnerOps`, the half of `OwnerDaemon` that serves ops.

`daemon.py` runs the sessions (the request loop, replies, pushes, shutdown) and hands each
decoded request to `_dispatch` here, which checks its arguments (`messages.parse_*`) and
serves it: `heads` (observe, then read the heads and the changed records that fit in one
reply), `get`, `put` (durable before it answers), `subscribe`, `ack`, `synced` and `stats`.
Errors are raised as BadRequest and answered by the session as typed errors.

The extension points of a subclass are methods here: `observe` (bring facts kept outside
the store up to date before `heads`), `_check_owned` (which keys this owner serves),
`_dispatch` and `_put`, next to the daemon's `schema`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from ..core.errors import RecordError
from ..core.roster import Agent, Roster
from ..protocol.messages import (
    BadRequest,
    Request,
    parse_ack,
    parse_get,
    parse_heads,
    parse_heads_short,
    parse_put,
    parse_put_head,
    parse_subscribe,
    parse_subscribe_every,
    parse_subscribe_group,
    parse_synced,
)
from . import syncgroups
from .limits import Limits
from .logs import EventLog
from .replies import ENVELOPE, ID_ENTRY, check_readable, fit_records, rows_size, unique
from .store import Store
from .syncgroups import Subscription

if TYPE_CHECKING:  # daemon.py imports this module: the session type is only annotated here
    from .daemon import Connection


class OwnerOps:
    """The ops of an owner daemon; mixed into `OwnerDaemon`, which provides the rest."""

    # Provided by OwnerDaemon (daemon.py): its state and the session side it calls.
    roster: Roster
    agent: Agent
    store: Store
    log: EventLog
    limits: Limits
    max_message: int
    connections: set[Connection]
    _synced_changed: anyio.Event
    put_if_lock: anyio.Lock  # conditional puts ("head") check and write one at a time
    statistics: Callable[[], dict[str, Any]]
    _reserve_reply: Callable[[int], Awaitable[None]]
    _queue_push: Callable[[Connection, bytes], None]

    async def _dispatch(self, connection: Connection, request: Request) -> dict[str, Any]:
        """Serve `request` on `connection`: the result map, or BadRequest."""
        if request.op == "ping":
            return {"agent": self.agent.name, "time": time.time()}
        if request.op == "heads":
            return await self._heads(
                *parse_heads(request.args), short=parse_heads_short(request.args)
            )
        if request.op == "get":
            return await self._records(unique(parse_get(request.args)), room=0)
        if request.op == "put":
            put = parse_put(request.args)
            head = parse_put_head(request.args)
            if head is None:
                return await self._put(connection.peer, *put)
            return await self._put_if(connection.peer, head, *put)
        if request.op == "subscribe":
            return await self._subscribe(connection, request)
        if request.op == "ack":
            return self._ack(connection, request.args)
        if request.op == "synced":
            return await self._wait_synced(connection.peer.name, *parse_synced(request.args))
        return self.statistics()

    def _check_owned(self, keys: list[str]) -> None:
        for key in keys:
            owner = self.roster.owner_of(key)
            if owner != self.agent.name:
                raise BadRequest(
                    "not_owner",
                    f"{self.agent.name} does not own {key!r} (owner: {owner or 'nobody'})",
                )

    def _head_rows(self, keys: list[str]) -> list[list[Any]]:
        rows = []
        for key in keys:
            head = self.store.heads.get(key)
            rows.append([key, head.id, head.seq] if head else [key, None, 0])
        return rows

    async def observe(self, keys: list[str]) -> None:
        """Extension point, awaited before `heads` reads the store for `keys` (all owned).

        An owner whose facts live outside its store (a workspace owner: files, branch, HEAD)
        brings them up to date here by writing new records, so the answer that follows is
        current. Raising BadRequest answers the request with that typed error. The default
        does nothing.
        """

    async def _heads(
        self, keys: list[str], expect: dict[str, bytes], *, short: bool = False
    ) -> dict[str, Any]:
        keys = list(dict.fromkeys(keys))  # a key asked twice is answered once
        self._check_owned(keys)
        await self.observe(keys)
        rows = self._head_rows(keys)
        changed = [
            row[1]
            for row in rows
            if row[0] in expect and row[1] is not None and row[1] != expect[row[0]]
        ]
        if short:  # the client knows the ids it expected: [key, seq] says "that one"
            rows = [[row[0], row[2]] if expect.get(row[0]) == row[1] else row for row in rows]
        result = await self._records(changed, room=rows_size(rows))
        return {"heads": rows, **result}

    async def _records(self, ids: list[bytes], room: int) -> dict[str, Any]:
        """{"records": [...]} for the stored records among `ids` (no repeats), as many as
        fit in one reply next to `room` bytes of other content, and {"omitted": [...]} for
        the ids of those that did not. Sizes are read first; only chosen records load."""
        if not ids:
            await self._reserve_reply(room)
            return {"records": []}
        sizes = await self.store.sizes(ids)
        stored = [(rid, sizes[rid]) for rid in ids if rid in sizes]
        limit = min(self.max_message, self.limits.reply_budget) - ENVELOPE - room
        chosen, omitted = fit_records(stored, limit)
        await self._reserve_reply(
            room + sum(sizes[rid] for rid in chosen) + ID_ENTRY * len(omitted)
        )
        records = await self.store.get(chosen) if chosen else []
        result: dict[str, Any] = {"records": [r.to_wire() for r in records]}
        if omitted:
            result["omitted"] = omitted
        return result

    async def _put(
        self, peer: Agent, key: str, kind: str, parents: list[bytes], body: Any
    ) -> dict[str, Any]:
        self._check_owned([key])
        if peer.name != self.agent.name:
            raise BadRequest(
                "forbidden",
                f"only {self.agent.name} may write {key!r}; this session is {peer.name}",
            )
        check_readable(key, self.agent.name, kind, parents, body, self.max_message)
        try:
            record = await self.store.wait_put(key, kind, parents, body)
        except RecordError as exc:
            raise BadRequest("bad_request", str(exc)) from None
        self.log.write(
            "put", key=key, id=record.id, seq=record.seq, kind=kind, parents=list(record.parents)
        )
        return {"id": record.id, "seq": record.seq}

    async def _put_if(
        self, peer: Agent, head: bytes, key: str, kind: str, parents: list[bytes], body: Any
    ) -> dict[str, Any]:
        """A compare-and-set put: written only while the key's head is `head` (b"": none);
        else `conflict`. Conditional puts are serialized, so two writers that read the same
        head cannot both succeed."""
        self._check_owned([key])
        async with self.put_if_lock:
            current = self.store.heads.get(key)
            if (current.id if current else b"") != head:
                raise BadRequest("conflict", f"the head of {key!r} is not the one expected")
            return await self._put(peer, key, kind, parents, body)

    async def _subscribe(self, connection: Connection, request: Request) -> dict[str, Any]:
        keys = parse_subscribe(request.args)
        every = parse_subscribe_every(request.args)
        if keys is not None:
            self._check_owned(keys)
        if len(connection.subscriptions) >= self.limits.subscriptions_per_session:
            raise BadRequest(
                "limit_exceeded",
                f"at most {self.limits.subscriptions_per_session} subscriptions per session",
            )
        group = parse_subscribe_group(request.args)
        await self._reserve_reply(rows_size(self._head_rows(keys or list(self.store.heads))))
        connection.subscriptions[request.req_id] = Subscription(
            set(keys) if keys else None, every, group
        )
        # the current heads, read after the last wait: no commit falls in between
        return {"subscribed": True, "heads": self._head_rows(keys or list(self.store.heads))}

    def _ack(self, connection: Connection, args: dict[str, Any]) -> dict[str, Any]:
        group, seq = parse_ack(args)
        if not syncgroups.acknowledge(connection.subscriptions.values(), group, seq):
            raise BadRequest("bad_request", f"this session has no subscription in {group!r}")
        self._sync_progress()
        return {"acked": seq}

    def _subscriptions(self) -> list[Subscription]:
        return [s for c in self.connections for s in c.subscriptions.values()]

    def _sync_progress(self) -> None:
        """Wake every `synced` waiting: an ack arrived or a session left."""
        self._synced_changed.set()
        self._synced_changed = anyio.Event()

    async def _wait_synced(self, peer: str, group: str, keys: list[str]) -> dict[str, Any]:
        """Answer once every member of `group` has acknowledged every update of `keys`
        committed before this request (owners/syncgroups.py); held-back rows go out first.
        Only a member may ask: an answer for a group the asker is not in says nothing about
        the asker's copy (and a mistyped group would be trivially synchronized)."""
        self._check_owned(keys)
        if not any(
            s.group == group
            for c in self.connections
            if c.peer.name == peer
            for s in c.subscriptions.values()
        ):
            raise BadRequest("bad_request", f"{peer} has no subscription in {group!r}")
        target = max((self.store.heads[k].seq for k in keys if k in self.store.heads), default=0)
        for connection in list(self.connections):
            for req_id, subscription in connection.subscriptions.items():
                rows = subscription.flush() if subscription.group == group else None
                if rows and connection.pushes is not None:
                    self._queue_push(connection, subscription.push(req_id, rows))
        while not syncgroups.is_synchronized(self._subscriptions(), group, target):
            await self._synced_changed.wait()
        return {"synced": target}


def keys_of(request: Request) -> list[str]:
    """The keys `request` names, for its log line (none when its args are malformed)."""
    args = request.args
    keys = args.get("keys")
    if (
        not isinstance(keys, list)
        and request.op == "heads"
        and isinstance(args.get("expect"), dict)
    ):
        keys = list(args["expect"])  # heads by `expect` alone
    if isinstance(keys, list):
        return [k for k in keys if isinstance(k, str)]
    if isinstance(args.get("key"), str):
        return [args["key"]]
    return []
