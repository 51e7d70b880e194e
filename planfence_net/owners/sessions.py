"""The sessions of an owner daemon: each session's request loop and the replies it sends.

`Sessions` holds the methods of `OwnerDaemon` (daemon.py) that serve one authenticated
session, from the hand-off by the door (`serve_peer`: at most `sessions_per_peer` of one
peer) to shutdown: the request loop (cheap ops answered inline, the others in tasks under
`requests_per_session`), the count of requests in flight that shutdown waits on, and the
replies and the budgets they hold (a request waiting in a task is held against the request
budget; a reply against the reply budget until sent; a peer not reading a reply within
`send_timeout` loses its session). What a request is answered with is the daemon's
(`OwnerDaemon._reply`: its service's answer, encoded). `Sessions` builds on `Pushes`
(pushes.py): each session runs a sender of its pushes.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING

import anyio

from ..core.errors import PlanfenceError, RemoteProtocolError
from ..net.transport import NoiseStream
from ..protocol.messages import BadRequest, Request
from ..protocol.requestread import Schema, decode_request
from .pushes import Pushes
from .service import Connection

if TYPE_CHECKING:
    from ..core.roster import Roster
    from .door import Door
    from .now import AnswersNow
    from .replies import ByteBudget
    from .service import Service

# Reply bytes the request being answered reserved from `replies` (one list per task).
_RESERVED: ContextVar[list[int]] = ContextVar("reserved")


class Sessions(Pushes):
    """The session side of `OwnerDaemon` (module docstring); its state is set up by the
    daemon's `__init__`, which also serves each request (`_reply`)."""

    roster: Roster
    door: Door
    schema: Schema
    service: Service
    sessions_by_peer: dict[str, int]
    requests: ByteBudget
    replies: ByteBudget
    now: AnswersNow
    requests_served: int
    unread_replies: int
    _idle: anyio.Event | None
    sync_progress: Callable[[], None]
    _reply: Callable[
        [Connection, Request | BadRequest], Awaitable[tuple[bytes, str, list[str], str]]
    ]

    async def serve_peer(
        self,
        stream: NoiseStream,
        remote: str,
        first: list[bytes | PlanfenceError | None],
    ) -> None:
        peer = self.roster.agent_by_noise_key(stream.peer_key)
        assert peer is not None
        if self.sessions_by_peer.get(peer.name, 0) >= self.limits.sessions_per_peer:
            self.door.refused_connections += 1
            self.log.write(
                "session_refused",
                remote=remote,
                peer=peer.name,
                reason=f"{self.limits.sessions_per_peer} sessions of {peer.name} open",
            )
            return
        self.log.write("handshake", remote=remote, peer=peer.name)
        connection = Connection(stream, peer)
        self.connections.add(connection)
        self.sessions_by_peer[peer.name] = self.sessions_by_peer.get(peer.name, 0) + 1
        try:
            with connection.scope:
                await self._serve_session(connection, first)
        finally:
            self.sessions_by_peer[peer.name] -= 1
            self.connections.discard(connection)
            self.sync_progress()  # its group members no longer owe acknowledgements
            self.log.write("disconnected", remote=remote, peer=peer.name, **stream.statistics())

    async def _serve_session(
        self, connection: Connection, first: list[bytes | PlanfenceError | None]
    ) -> None:
        """Answer the session's requests, starting with `first` (a one-item list, emptied
        here: no frame keeps a message alive once its answer no longer needs it).

        Inline ops (the service's rows say which) are answered here, one after the other:
        no task, no semaphore; they never wait for a commit or for another session (a heads
        reading changed records or waiting for the reply budget holds back only its own
        session). The others (a put waits for its group commit, synced for other sessions) each get a
        task, at most `requests_per_session` at once."""
        send, receive = anyio.create_memory_object_stream[bytes](math.inf)
        connection.pushes = send
        limiter = anyio.Semaphore(self.limits.requests_per_session)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.send_pushes, connection, receive)
            connection.stream.set_answer_now(
                functools.partial(self.now.answer, connection),
                functools.partial(self.now.stalled, connection, tg),
            )
            try:
                data = first.pop()
                while data is not None:
                    request, size = _request_of(data, self.schema)
                    data = None
                    if isinstance(request, Request) and not self.service.inline(request.op):
                        await limiter.acquire()  # at the cap, stop reading: the peer waits
                        # a decoded request waiting in a task (a synced may wait long) is
                        # held against the request budget, about its encoded size
                        held = await self.requests.wait_reserve(size)
                        self._begin()
                        tg.start_soon(self._answer, connection, request, limiter, held)
                    else:
                        self._begin()
                        await self._answer(connection, request, None, 0)
                    data = await connection.stream.receive()
            except PlanfenceError as exc:
                if isinstance(exc, RemoteProtocolError):
                    self.log.write(
                        "error", peer=connection.peer.name, reason=f"session closed: {exc}"
                    )
            finally:
                connection.stream.set_answer_now(None)
                send.close()

    async def drain(self, connection: Connection, size: int) -> None:
        """Wait for the peer to read a reply of `size` bytes sent in the socket's callback
        (now.py), as `_send_reply` does; its request counts as in flight until then."""
        try:
            with anyio.fail_after(self.limits.send_timeout):
                await connection.stream.wait_writable()
        except TimeoutError:
            self._unread(connection, size)
        finally:
            self.in_flight -= 1
            if self.in_flight == 0 and self._idle is not None:
                self._idle.set()

    def _begin(self) -> None:
        self.in_flight += 1

    def _end(self) -> None:
        self.in_flight -= 1
        self.requests_served += 1
        if self.in_flight == 0 and self._idle is not None:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Wait until no request is in flight (any number of waiters share one event)."""
        while self.in_flight:
            if self._idle is None or self._idle.is_set():
                self._idle = anyio.Event()
            await self._idle.wait()

    async def _answer(
        self,
        connection: Connection,
        request: Request | BadRequest,
        limiter: anyio.Semaphore | None,
        held: int,
    ) -> None:
        """Answer one request; `held` is what it took from the request budget."""
        started = time.perf_counter()
        reserved = _RESERVED.set([])
        op, keys, outcome = "?", list[str](), "?"
        try:
            reply, op, keys, outcome = await self._reply(connection, request)
            del request  # answered: not held while the reply waits for the peer
            self.requests.release(held)
            held = 0
            outcome += await self._send_reply(connection, reply)
        finally:
            self.requests.release(held)
            for size in _RESERVED.get():
                self.replies.release(size)
            _RESERVED.reset(reserved)
            self.log.write_soon(
                "request",
                peer=connection.peer.name,
                op=op,
                keys=keys[:64],
                outcome=outcome,
                latency_ms=round((time.perf_counter() - started) * 1000, 3),
            )
            self._end()
            if limiter is not None:
                limiter.release()

    async def _send_reply(self, connection: Connection, reply: bytes) -> str:
        """Send `reply`; a peer that has not read it within `send_timeout` loses its session
        (the reply is not held forever). Returns what to add to the request's outcome."""
        try:
            connection.stream.write_message(reply)
            if not connection.stream.writable:  # a deadline (a timer) only when it waits
                with anyio.fail_after(self.limits.send_timeout):
                    await connection.stream.wait_writable()
        except TimeoutError:
            self._unread(connection, len(reply))
            return " (peer not reading)"
        except PlanfenceError:
            return " (peer gone)"
        return ""

    def _unread(self, connection: Connection, size: int) -> None:
        """Close a session whose peer left a reply of `size` bytes unread too long."""
        self.unread_replies += 1
        self.log.write(
            "error",
            peer=connection.peer.name,
            reason=f"session closed: a reply of {size} bytes unread "
            f"for {self.limits.send_timeout:g} s",
        )
        connection.scope.cancel()

    async def reserve_reply(self, size: int) -> None:
        """Wait until the reply budget has room for a reply of `size` bytes, counted twice:
        a reply the peer does not read is held both as itself and in the socket's buffer
        (released once the reply has been sent)."""
        _RESERVED.get().append(await self.replies.wait_reserve(2 * size))


def _request_of(
    message: bytes | PlanfenceError, schema: Schema
) -> tuple[Request | BadRequest, int]:
    """The request in a received message, or why it cannot be served, and the message's
    size. A message the screen refused from its first chunk comes as that BadRequest (size 0:
    nothing of it is held); any other error ends the session."""
    if isinstance(message, BadRequest):
        return message, 0
    if isinstance(message, PlanfenceError):
        raise message
    return _decode(message, schema), len(message)


def _decode(data: bytes, schema: Schema) -> Request | BadRequest:
    """The request in `data` (read once), or why it cannot be served."""
    try:
        return decode_request(data, schema)
    except BadRequest as exc:
        # Kept until answered: without its traceback, whose frames hold the request's
        # bytes and the reader's copy of them (32 MiB for a 16 MiB request).
        exc.__context__ = None
        return exc.with_traceback(None)
