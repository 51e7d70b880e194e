"""The owner daemon: serves one agent's records over Noise sessions (docs/ARCHITECTURE.md).

This module runs the sessions: start-up (`run_owner`, `serve`), the hand-off from the door,
each session's request loop (cheap ops answered inline, the others in tasks under a cap),
replies and the budgets they hold, and shutdown once idle. What it serves is a `Service`
(service.py: one table of operations) it is given; the ordinary owner's is
`ops.owner_operations()`. How pushes reach subscribers is `Pushes` (pushes.py), which
`OwnerDaemon` inherits.
"""

from __future__ import annotations

import functools
import math
import os
import signal
import time
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from ..core.errors import PlanfenceError, RemoteProtocolError, StoreError
from ..core.identity import Identity
from ..core.records import Record, make_record
from ..core.roster import Roster
from ..net.transport import NoiseStream
from ..protocol.messages import BadRequest, RawValue, Request, encode_error, encode_response
from ..protocol.requestread import Schema, decode_request, screen_request
from .door import Door
from .limits import Limits
from .logs import EventLog
from .now import AnswersNow
from .ops import keys_of, owner_operations
from .pushes import Pushes
from .replies import ByteBudget
from .service import Call, Connection, Service
from .store import Signer, Store

SHUTDOWN_GRACE = 10.0
# Reply bytes the request being answered reserved from `replies` (one list per task).
_RESERVED: ContextVar[list[int]] = ContextVar("reserved")


class OwnerDaemon(Pushes):
    """Serves `identity`'s records through `service` (default: an ordinary owner's
    operations). `run_owner` builds one and runs `serve`.

    `listen` overrides the roster address to bind (e.g. 0.0.0.0 inside a container). It is
    the `Owner` its operations see (service.py).
    """

    def __init__(
        self,
        roster: Roster,
        identity: Identity,
        store: Store,
        log: EventLog,
        *,
        max_message: int,
        listen: tuple[str, int] | None = None,
        limits: Limits = Limits(),
        service: Service | None = None,
    ) -> None:
        self.service = service if service is not None else owner_operations()
        self.schema: Schema = self.service.schema  # the arguments each op's requests are read with
        self.roster = roster
        self.identity = identity
        self.agent = roster.agent(identity.name)
        self.store = store
        self.log = log
        self.max_message = max_message
        self.connections: set[Connection] = set()
        self.in_flight = 0
        self.requests_served = 0
        self.listen = listen
        self.limits = limits.for_descriptors()
        self.door = Door(
            roster,
            identity,
            log,
            self.limits,
            max_message,
            self._serve_peer,
            lambda prefix: screen_request(prefix, self.schema),
        )
        self.sessions_by_peer: dict[str, int] = {}
        self.dropped_subscribers = 0
        self.replies = ByteBudget(self.limits.reply_budget)
        self.requests = ByteBudget(self.limits.request_budget)
        self.unread_replies = 0  # sessions closed because a reply waited too long
        self._idle: anyio.Event | None = None  # made by _wait_idle: not one per request
        self._synced_changed = anyio.Event()  # an ack arrived or a session left
        self.put_if_lock = anyio.Lock()
        self.now = AnswersNow(self, self.schema, self.service)
        self.init_pushes()
        store.on_commit.append(self.push_heads)

    async def serve(self, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen on the roster address, report the bound port, serve until cancelled.

        On SIGTERM or SIGINT: stop accepting, let in-flight requests finish (bounded by
        SHUTDOWN_GRACE), then return.
        """
        host, port = self.listen or (self.agent.host, self.agent.port)
        listener = await anyio.create_tcp_listener(
            local_host=host, local_port=port, reuse_port=False
        )
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        self.log.write("listening", address=f"{host}:{port}", pid=os.getpid())
        try:
            async with anyio.create_task_group() as tg:
                accepting = anyio.CancelScope()
                tg.start_soon(self.store.run_committer)
                tg.start_soon(self.run_pusher)
                tg.start_soon(self._wait_signal, tg.cancel_scope, accepting)
                tg.start_soon(self._accept, listener, tg, accepting)
                task_status.started(port)
        finally:
            with anyio.CancelScope(shield=True):
                await listener.aclose()
            self.log.write("stopped", requests=self.requests_served)

    async def _accept(self, listener: Any, tg: TaskGroup, accepting: anyio.CancelScope) -> None:
        with accepting:
            await self.door.serve(listener, tg)

    async def _wait_signal(self, scope: anyio.CancelScope, accepting: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                self.log.write(
                    "shutdown", signal=signal.Signals(signum).name, in_flight=self.in_flight
                )
                accepting.cancel()  # no new sessions; open ones finish what is in flight
                with anyio.move_on_after(SHUTDOWN_GRACE):
                    await self._wait_idle()
                scope.cancel()
                return

    async def _serve_peer(
        self, stream: NoiseStream, remote: str, first: list[bytes | PlanfenceError | None]
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
            connection.stream.set_answer_now(functools.partial(self.now.answer, connection, tg))
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
            with anyio.fail_after(self.limits.send_deadline):
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

    async def _wait_idle(self) -> None:
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

    async def _reply(
        self, connection: Connection, request: Request | BadRequest
    ) -> tuple[bytes, str, list[str], str]:
        """Serve a decoded request and encode the answer: (reply, op, keys, outcome)."""
        op, keys, req_id = "?", [], None
        try:
            if isinstance(request, BadRequest):
                raise request
            op, req_id, keys = request.op, request.req_id, keys_of(request)
            result = await self.service.serve(Call(self, connection, request.req_id), request)
            return encode_response(request.req_id, True, result), op, keys, "ok"
        except BadRequest as exc:
            req_id = exc.req_id if req_id is None else req_id
            return encode_error(req_id, exc.code, exc.message), op, keys, exc.code
        except StoreError as exc:  # a damaged record or a full disk: say so, keep serving
            self.log.write("error", peer=connection.peer.name, op=op, reason=exc.message)
            return encode_error(req_id, exc.code, exc.message), op, keys, exc.code
        except Exception as exc:  # a bug in one request must not kill the daemon
            self.log.write("error", peer=connection.peer.name, op=op, reason=repr(exc))
            return encode_error(req_id, "internal", "internal error"), op, keys, "internal"

    async def _send_reply(self, connection: Connection, reply: bytes) -> str:
        """Send `reply`; a peer that has not read it within `send_deadline` loses its session
        (the reply is not held forever). Returns what to add to the request's outcome."""
        try:
            connection.stream.write_message(reply)
            if not connection.stream.writable:  # a deadline (a timer) only when it waits
                with anyio.fail_after(self.limits.send_deadline):
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
            f"for {self.limits.send_deadline:g} s",
        )
        connection.scope.cancel()

    async def reserve_reply(self, size: int) -> None:
        """Wait until the reply budget has room for a reply of `size` bytes, counted twice:
        a reply the peer does not read is held both as itself and in the socket's buffer
        (released once the reply has been sent)."""
        _RESERVED.get().append(await self.replies.wait_reserve(2 * size))

    def sync_progress(self) -> None:
        """Wake every `synced` waiting: an ack arrived or a session left."""
        self._synced_changed.set()
        self._synced_changed = anyio.Event()

    async def wait_sync_progress(self) -> None:
        """Wait for the next `sync_progress`."""
        await self._synced_changed.wait()

    def statistics(self) -> dict[str, Any]:
        """The daemon's counters, its door's, log's, store's and its service's: what `stats`
        answers."""
        return {
            "agent": self.agent.name,
            "sessions": len(self.connections),
            "in_flight": self.in_flight,
            "requests_served": self.requests_served,
            **self.door.statistics(),
            "dropped_subscribers": self.dropped_subscribers,
            "unread_replies": self.unread_replies,
            "reply_bytes_held": self.replies.used,
            "request_bytes_held": self.requests.used,
            **self.log.statistics(),
            **self.store.statistics(),
            **self.service.statistics(),
        }


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


def signer(identity: Identity) -> Signer:
    """The store's signing callback: makes records owned and signed by `identity`."""

    def sign(key: str, kind: str, parents: list[bytes], body: Any, seq: int) -> Record:
        if isinstance(body, RawValue):  # a body as a client sent it: kept byte for byte
            return make_record(
                identity.signing_key,
                key=key,
                owner=identity.name,
                seq=seq,
                parents=parents,
                kind=kind,
                body_raw=body.data,
            )
        return make_record(
            identity.signing_key,
            key=key,
            owner=identity.name,
            seq=seq,
            parents=parents,
            kind=kind,
            body=body,
        )

    return sign


async def run_owner(
    roster: Roster,
    identity: Identity,
    db_path: Path,
    log_path: Path,
    *,
    max_message: int = 16 * 1024 * 1024,
    listen: tuple[str, int] | None = None,
    limits: Limits = Limits(),
    accept_loss: bool = False,
    service: Service | None = None,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Open the store and log, serve `service` (default: an ordinary owner's operations)
    until a signal or cancellation, then close both.

    `listen` overrides the roster address to bind (e.g. 0.0.0.0 inside a container).
    Raises StoreError, before listening, when the store is damaged, in use or lost
    acknowledged records (`accept_loss`: see Store.open).
    """
    log = EventLog(log_path, identity.name)
    store = None
    try:
        try:
            store = await Store.open(
                db_path, signer(identity), identity.name, accept_loss=accept_loss
            )
        except StoreError as exc:
            log.write("store_refused", code=exc.code, reason=exc.message)
            raise
        daemon = OwnerDaemon(
            roster,
            identity,
            store,
            log,
            max_message=max_message,
            listen=listen,
            limits=limits,
            service=service,
        )
        await daemon.serve(task_status=task_status)
    finally:
        if store is not None:
            await store.close()
        log.close()
