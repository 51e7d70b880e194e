"""Pushing head updates to subscribers without making puts wait for them.

A commit costs the put path one step per subscribing session, not per subscription: its rows
are appended to the session's pending list (`push_heads`). One pusher task (`run_pusher`)
builds and sends the pushes of the sessions with rows pending, oldest first: every
subscription's rows of all the commits pending by then go in one push, so a busy owner sends
fewer, larger pushes instead of falling behind. Requests come first: while any is in flight
the pusher waits for them to finish, at most `PUSH_PATIENCE`, and then works one turn of at
most `PUSH_TURN` (at least one session) before it lets the loop poll again; so a put waits
for about one session's pushes, not for the whole fan-out, and pushes still get a share
under a steady stream of requests. A session whose socket buffer is full is skipped until it
drains (its sender task waits for that).

Subscriptions in a sync group are pushed at once, through the session's sender, as before
(their `sent` seq must be known when the commit is: owners/syncgroups.py). A subscriber whose
unsent pushes (counted before they are built, from the rows' size) exceed
`queued_push_bytes` is dropped.

A subscriber that asked for records (`subscribe {"records": true}`) gets, in each push, the
records of its rows as far as they fit in the subscription's budget (`push_record_bytes`,
owners/syncgroups.py); the rest go as rows only, and the subscriber reads them with `get`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

from ..core.errors import PlanfenceError
from ..core.records import Record
from .limits import Limits
from .logs import EventLog
from .replies import rows_size
from .syncgroups import record_bytes

if TYPE_CHECKING:
    from .service import Connection

PUSH_TURN = 0.0003  # seconds of pushing, all sessions together, per event-loop turn
PUSH_PATIENCE = 0.002  # seconds the pusher waits for requests in flight before a turn


class Pushes:
    """The push side of `OwnerDaemon` (module docstring); its state is set up by `__init__`
    of the daemon through `init_pushes`."""

    log: EventLog
    limits: Limits
    connections: set[Connection]
    dropped_subscribers: int
    in_flight: int
    wait_idle: Callable[[], Awaitable[None]]

    def init_pushes(self) -> None:
        self._dirty: dict[Connection, None] = {}  # sessions with rows pending, oldest first
        self._dirty_changed = anyio.Event()

    def push_heads(self, records: list[Record]) -> None:
        """A commit's records: owed to every subscription (store.on_commit)."""
        if not any(connection.subscriptions for connection in self.connections):
            return  # nobody subscribes (a put_many of 4,096 would build rows for nothing)
        rows = [[r.key, r.id, r.seq] for r in records]
        size = rows_size(rows)
        bodies: int | None = None  # the records' wire size, once a subscriber wants them
        for connection in list(self.connections):
            lazy = owed = 0
            for req_id, subscription in connection.subscriptions.items():
                if subscription.group is None:
                    lazy += 1
                    if subscription.budget:
                        if bodies is None:
                            bodies = sum(record_bytes(r) for r in records)
                        owed += min(bodies, subscription.budget)
                    continue
                ready = subscription.add(records)
                if ready and connection.pushes is not None:
                    self.queue_push(connection, subscription.push(req_id, ready))
            if lazy and connection.pushes is not None:
                self._queue_rows(
                    connection, (rows, records), len(connection.subscriptions), lazy * size + owed
                )

    def _queue_rows(
        self,
        connection: Connection,
        commit: tuple[list[list[Any]], list[Record]],
        subscribed: int,
        size: int,
    ) -> None:
        """Add a commit's rows (and records) to `connection`'s pending list (for its first
        `subscribed` subscriptions: one made later already has these heads) and wake its
        sender; `size` bounds what its pushes add."""
        if self._falls_behind(connection, size):
            return
        connection.pending.append((*commit, subscribed))
        connection.queued_bytes += size
        connection.pending_bytes += size
        if not connection.parked:
            self._mark_dirty(connection)

    def _mark_dirty(self, connection: Connection) -> None:
        if not self._dirty:
            self._dirty_changed.set()
            self._dirty_changed = anyio.Event()
        self._dirty[connection] = None

    def queue_push(self, connection: Connection, message: bytes) -> None:
        """Queue a push for `connection`'s sender (or, empty, the sign to wait until its
        socket buffer drains, then hand its pending rows back to the pusher)."""
        if self._falls_behind(connection, len(message)):
            return
        try:
            connection.pushes.send_nowait(message)  # type: ignore[union-attr]
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return
        connection.queued_bytes += len(message)

    def _falls_behind(self, connection: Connection, size: int) -> bool:
        """True, and the subscriber dropped (its session closed), when `size` more bytes
        would take its unsent pushes over `queued_push_bytes`."""
        if connection.pushes is None:
            return True
        if connection.queued_bytes + size <= self.limits.queued_push_bytes:
            return False
        self._dirty.pop(connection, None)
        self.dropped_subscribers += 1
        self.log.write(
            "subscriber_dropped",
            peer=connection.peer.name,
            reason=f"fell behind: {connection.queued_bytes} bytes of pushes "
            f"unsent (limit {self.limits.queued_push_bytes})",
        )
        connection.pushes.close()
        connection.pushes = None
        connection.scope.cancel()
        return True

    async def send_pushes(self, connection: Connection, receive: Any) -> None:
        """The session's sender: queued pushes in order; on an empty one, wait until the
        socket buffer drains and hand the session back to the pusher."""
        async with receive:
            async for message in receive:
                connection.queued_bytes -= len(message)
                try:
                    if message:
                        await connection.stream.send_message(message)
                    else:
                        await connection.stream.wait_writable()
                        connection.parked = False
                        if connection.pending:
                            self._mark_dirty(connection)
                except PlanfenceError:
                    return

    async def run_pusher(self) -> None:
        """Push the pending rows of every session, oldest first, `PUSH_TURN` at a time
        (module docstring); runs until cancelled."""
        while True:
            if not self._dirty:
                await self._dirty_changed.wait()
            if self.in_flight:
                with anyio.move_on_after(PUSH_PATIENCE):
                    await self.wait_idle()
            turn_started = time.perf_counter()
            while self._dirty and time.perf_counter() - turn_started < PUSH_TURN:
                connection = next(iter(self._dirty))
                del self._dirty[connection]
                if connection.pushes is not None and connection in self.connections:
                    self._push_pending(connection)
            await anyio.lowlevel.checkpoint()  # the loop polls: requests waiting are read

    def _push_pending(self, connection: Connection) -> None:
        """Build and write one push per subscription of `connection` that has rows ready,
        covering every commit pending now; park the session when its buffer is full."""
        batches, connection.pending = connection.pending, []
        connection.queued_bytes -= connection.pending_bytes
        connection.pending_bytes = 0
        subscriptions = list(connection.subscriptions.items())
        ready: dict[int, list[list[Any]]] = {}
        for rows, records, subscribed in batches:
            for req_id, subscription in subscriptions[:subscribed]:
                if subscription.group is None:
                    out = subscription.add_rows(rows, records)
                    if out:
                        ready.setdefault(req_id, []).extend(out)
        try:
            connection.stream.write_messages(
                [connection.subscriptions[r].push(r, rows) for r, rows in ready.items()]
            )
        except PlanfenceError:
            return  # the session is gone: its loop ends it
        if not connection.stream.writable:
            connection.parked = True
            self.queue_push(connection, b"")
