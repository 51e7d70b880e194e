"""What an owner daemon serves: a `Service`, one table of operations.

The daemon (daemon.py) runs sessions and knows no operation: it reads each request with the
service's `schema`, answers the `inline` ones in the session's loop and the others in tasks,
and hands each decoded request to `Service.serve`. Each operation is one row:

    Operation(name, args, parse, handle, inline)

`args` is its argument schema (protocol/requestread.py: every argument capped before it is
decoded), `parse` turns the decoded args into checked values or raises BadRequest, and
`handle(call, parsed)` returns the result map or raises BadRequest (a typed error).
A handler made with `answers_now(now)` also has `now(call, parsed)`, which gives the same
answer without awaiting anything, or None when it would have to wait (then the handler
answers): the daemon answers such requests in the socket's callback, without waking the
session's task. `now` belongs to the handler, so a row whose handler is replaced (wrapped,
slowed down) loses it with the handler. The owner's own table is `ops.owner_operations()`; the workspace owner and the central store
are services built from it, with rows of their own.

A handler reaches the daemon through `Call.owner` (the `Owner` protocol below: its state and
the few session-side services an operation needs), never through the daemon's class.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from ..core.records import Record
from ..core.roster import Agent, Roster
from ..net.transport import NoiseStream
from ..protocol.messages import BadRequest, Request
from ..protocol.requestread import ArgKind, Schema
from .limits import Limits
from .logs import EventLog
from .store import Store
from .syncgroups import Subscription


class Connection:
    """One authenticated session and its subscriptions."""

    def __init__(self, stream: NoiseStream, peer: Agent) -> None:
        self.stream = stream
        self.peer = peer
        self.subscriptions: dict[int, Subscription] = {}
        self.pushes: MemoryObjectSendStream[bytes] | None = None
        self.queued_bytes = 0  # pushes waiting to be sent (pending rows included)
        # commits' rows (and records) not yet pushed, each for the first n subscriptions
        self.pending: list[tuple[list[list[Any]], list[Record], int]] = []
        self.pending_bytes = 0
        self.parked = False  # its socket buffer is full: the pusher skips it (pushes.py)
        self.scope = anyio.CancelScope()  # cancelled to drop the session


class Owner(Protocol):
    """The daemon as its operations see it."""

    roster: Roster
    agent: Agent
    store: Store
    log: EventLog
    limits: Limits
    max_message: int
    connections: set[Connection]
    put_if_lock: anyio.Lock  # conditional puts ("head") check and write one at a time

    def statistics(self) -> dict[str, Any]:
        """The daemon's counters (what `stats` answers)."""

    async def reserve_reply(self, size: int) -> None:
        """Wait until the reply budget has room for a reply of `size` bytes (held until the
        reply of the request being served has been sent)."""

    def queue_push(self, connection: Connection, message: bytes) -> None:
        """Queue a push for `connection` (a subscriber fallen too far behind is dropped)."""

    def sync_progress(self) -> None:
        """Wake every operation waiting in `wait_sync_progress`."""

    async def wait_sync_progress(self) -> None:
        """Wait until an acknowledgement arrives or a session leaves."""


@dataclass(frozen=True, slots=True)
class Call:
    """One request being served: the owner, the session it came on, its request id."""

    owner: Owner
    connection: Connection
    req_id: int


Handler = Callable[[Call, Any], Awaitable[dict[str, Any]]]
# The same answer as the row's handler, given without waiting; None: only `handle` can.
# Raises BadRequest where the handler would (nothing else: anything else is a bug).
AnswerNow = Callable[[Call, Any], dict[str, Any] | None]


@dataclass(frozen=True, slots=True)
class Operation:
    """One row of a service's table (module docstring). `inline` ops never wait for a
    commit or for another session, so the session's loop answers them itself."""

    name: str
    args: dict[str, ArgKind]
    parse: Callable[[dict[str, Any]], Any]
    handle: Handler
    inline: bool = False

    @property
    def now(self) -> AnswerNow | None:
        """The handler's answer without waiting (`answers_now`), if it has one."""
        return getattr(self.handle, "answer_now", None)

    @property
    def repeatable(self) -> bool:
        """Whether the handler's answer without waiting may be given again (`answers_now`)."""
        return bool(getattr(self.handle, "answer_now_repeatable", False))


def answers_now(now: AnswerNow, *, repeatable: bool = False) -> Callable[[Handler], Handler]:
    """Decorate a handler with `now`: the same answer without awaiting anything, or None
    when only the handler can give it (module docstring); `now` raises BadRequest where the
    handler would, and nothing else. `repeatable`: that answer depends
    on the request's args and the store's committed records alone (not the session, its
    peer or the time), so the daemon may give it again to the same args while nothing is
    committed (owners/now.py)."""

    def mark(handle: Handler) -> Handler:
        handle.answer_now = now  # type: ignore[attr-defined]
        handle.answer_now_repeatable = repeatable  # type: ignore[attr-defined]
        return handle

    return mark


class Service:
    """The operations an owner serves, by name, and what it adds to `stats`.

    Raises ValueError for two rows with one name.
    """

    def __init__(
        self,
        operations: Iterable[Operation],
        statistics: Callable[[], dict[str, Any]] = dict,
    ) -> None:
        self.operations: dict[str, Operation] = {}
        for operation in operations:
            if operation.name in self.operations:
                raise ValueError(f"operation {operation.name!r} is in the table twice")
            self.operations[operation.name] = operation
        self.schema: Schema = {name: op.args for name, op in self.operations.items()}
        self.statistics = statistics

    def with_rows(
        self, *rows: Operation, statistics: Callable[[], dict[str, Any]] | None = None
    ) -> Service:
        """This service with `rows` added, or replacing the rows of the same name. A
        service that replaces `put` without giving `put_many` a row of its own loses
        `put_many`: it writes as `put` does, so it must not bypass a new `put`'s rules."""
        given = {row.name: row for row in rows}
        table = {**self.operations, **given}
        if "put" in given and "put_many" not in given:
            table.pop("put_many", None)
        return Service(table.values(), statistics or self.statistics)

    def inline(self, op: str) -> bool:
        """Whether requests of `op` are answered in the session's loop."""
        operation = self.operations.get(op)
        return operation is not None and operation.inline

    async def serve(self, call: Call, request: Request) -> dict[str, Any]:
        """Parse and handle `request`: the result map, or BadRequest (`unknown_op` for an op
        this service has no row for)."""
        operation = self.operations.get(request.op)
        if operation is None:
            raise BadRequest("unknown_op", f"unknown op {request.op!r}", request.req_id)
        return await operation.handle(call, operation.parse(request.args))
