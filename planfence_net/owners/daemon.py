"""The owner daemon: serves one agent's records over Noise sessions (DESIGN section 6)."""

from __future__ import annotations

import errno
import hashlib
import math
import os
import signal
import time
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketStream, TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectSendStream

from ..errors import PlanfenceError, RecordError, RemoteProtocolError
from ..identity import Identity
from ..messages import (BadRequest, Request, decode_request, encode_error, encode_response,
                        parse_ack, parse_get, parse_heads, parse_put, parse_subscribe,
                        parse_subscribe_every, parse_subscribe_group, parse_synced,
                        request_id_of)
from ..records import Record, make_record
from ..roster import Agent, Roster
from ..transport import NoiseStream, pause_reading_until_receive
from .limits import Limits, RateLimit
from . import syncgroups
from .syncgroups import Subscription
from .logs import EventLog
from .store import Signer, Store

HANDSHAKE_DEADLINE = 5.0
SHUTDOWN_GRACE = 10.0
ACCEPT_BACKOFF = (0.05, 1.0)  # first and longest pause after accept() fails
# accept() errors that mean "out of descriptors or memory": wait for some to be freed.
EXHAUSTED = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


def fingerprint(key: bytes) -> str:
    """A short, stable name for a static key in logs: first 16 hex chars of its BLAKE2b."""
    return hashlib.blake2b(key, digest_size=8).hexdigest()


class Connection:
    """One authenticated session and its subscriptions."""

    def __init__(self, stream: NoiseStream, peer: Agent) -> None:
        self.stream = stream
        self.peer = peer
        self.subscriptions: dict[int, Subscription] = {}
        self.pushes: MemoryObjectSendStream[bytes] | None = None
        self.queued_bytes = 0  # pushes waiting to be sent
        self.scope = anyio.CancelScope()  # cancelled to drop the session


class OwnerDaemon:
    """Serves `identity`'s records. `run_owner` builds one and runs `serve`.

    `listen` overrides the roster address to bind (e.g. 0.0.0.0 inside a container).
    """

    def __init__(self, roster: Roster, identity: Identity, store: Store, log: EventLog,
                 *, max_message: int, listen: tuple[str, int] | None = None,
                 limits: Limits = Limits()) -> None:
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
        self.refused_peers = 0
        self.limits = limits.for_descriptors()
        self.open_connections = 0  # accepted and not yet closed
        self.unproven = 0  # of those, not yet proven by a valid transport message
        self.sessions_by_peer: dict[str, int] = {}
        self.refused_connections = 0
        self.accept_errors = 0
        self.dropped_subscribers = 0
        self._strangers = RateLimit(self.limits.stranger_burst, self.limits.stranger_rate,
                                    time.monotonic())
        self._idle = anyio.Event()
        self._idle.set()
        self._synced_changed = anyio.Event()  # an ack arrived or a session left
        store.on_commit.append(self._push_heads)

    async def serve(self, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen on the roster address, report the bound port, serve until cancelled.

        On SIGTERM or SIGINT: stop accepting, let in-flight requests finish (bounded by
        SHUTDOWN_GRACE), then return.
        """
        host, port = self.listen or (self.agent.host, self.agent.port)
        listener = await anyio.create_tcp_listener(local_host=host, local_port=port,
                                                   reuse_port=False)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        self.log.write("listening", address=f"{host}:{port}", pid=os.getpid())
        try:
            async with anyio.create_task_group() as tg:
                accepting = anyio.CancelScope()
                tg.start_soon(self.store.run_committer)
                tg.start_soon(self._wait_signal, tg.cancel_scope, accepting)
                tg.start_soon(self._accept, listener, tg, accepting)
                task_status.started(port)
        finally:
            with anyio.CancelScope(shield=True):
                await listener.aclose()
            self.log.write("stopped", requests=self.requests_served)

    async def _accept(self, listener: Any, tg: TaskGroup, accepting: anyio.CancelScope) -> None:
        with accepting:
            async with anyio.create_task_group() as loops:
                for one in getattr(listener, "listeners", [listener]):
                    loops.start_soon(self._accept_loop, one, tg)

    async def _accept_loop(self, listener: Any, tg: TaskGroup) -> None:
        """Accept connections until cancelled. Running out of descriptors or memory pauses
        accepting (backing off up to a second) instead of ending it; connections over the
        limits are closed at once."""
        pause = ACCEPT_BACKOFF[0]
        while True:
            try:
                raw = await listener.accept()
            except OSError as exc:
                self.accept_errors += 1
                self.stranger_event("accept_failed", reason=exc.strerror or repr(exc))
                if exc.errno in EXHAUSTED:
                    await anyio.sleep(pause)  # the pending connection keeps the listener ready
                    pause = min(pause * 2, ACCEPT_BACKOFF[1])
                continue
            pause = ACCEPT_BACKOFF[0]
            full = self._over_connection_limits()
            if full:
                self.refused_connections += 1
                self.stranger_event("connection_refused", remote=_remote_address(raw),
                                    reason=full)
                with anyio.CancelScope(shield=True):
                    await raw.aclose()
                continue
            self.open_connections += 1
            self.unproven += 1
            tg.start_soon(self._handle_connection, raw)

    def _over_connection_limits(self) -> str | None:
        if self.open_connections >= (self.limits.max_connections or 0):
            return f"{self.limits.max_connections} connections open"
        if self.unproven >= self.limits.max_handshakes:
            return f"{self.limits.max_handshakes} handshakes in progress"
        return None

    def stranger_event(self, event: str, **fields: Any) -> None:
        """Log an event anyone who can reach the port can cause, at a bounded rate; the
        number left out is logged with the next one (`suppressed`)."""
        if self._strangers.allow(time.monotonic()):
            suppressed = self._strangers.take_suppressed()
            self.log.write(event, **fields, **({"suppressed": suppressed} if suppressed else {}))

    async def _wait_signal(self, scope: anyio.CancelScope, accepting: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                self.log.write("shutdown", signal=signal.Signals(signum).name,
                               in_flight=self.in_flight)
                accepting.cancel()  # no new sessions; open ones finish what is in flight
                with anyio.move_on_after(SHUTDOWN_GRACE):
                    await self._idle.wait()
                scope.cancel()
                return

    async def _handle_connection(self, raw: SocketStream) -> None:
        proven = False
        try:
            pause_reading_until_receive(raw)
            remote = _remote_address(raw)
            self.stranger_event("connection", remote=remote)
            stream = await self._handshake(raw, remote)
            if stream is None:
                return
            try:
                first = await self._wait_first_message(stream, remote)
                if first is None:
                    return
                proven = True
                self.unproven -= 1
                await self._serve_peer(stream, remote, first)
            finally:
                await stream.aclose()
        finally:
            self.open_connections -= 1
            if not proven:
                self.unproven -= 1

    async def _handshake(self, raw: SocketStream, remote: str) -> NoiseStream | None:
        """The Noise handshake under its deadline; None (connection closed, event logged)
        when it fails."""
        refused: list[bytes] = []

        def accept_peer(key: bytes) -> bool:
            if self.roster.agent_by_noise_key(key) is None:
                refused.append(key)
                return False
            return True

        try:
            with anyio.fail_after(HANDSHAKE_DEADLINE):
                return await NoiseStream.wrap(raw, initiator=False, cluster=self.roster.cluster,
                                              static_private=self.identity.noise_private,
                                              accept_peer=accept_peer,
                                              max_message=self.max_message)
        except (PlanfenceError, TimeoutError) as exc:
            if refused:
                self.refused_peers += 1
                self.stranger_event("handshake_refused", remote=remote,
                                    fingerprint=fingerprint(refused[0]), reason="not in roster")
            else:
                self.stranger_event("handshake_failed", remote=remote,
                                    reason="timeout" if isinstance(exc, TimeoutError)
                                    else str(exc))
            with anyio.CancelScope(shield=True):
                await raw.aclose()
            return None

    async def _wait_first_message(self, stream: NoiseStream, remote: str) -> bytes | None:
        """The session's first application message, or None when none arrives within
        `first_message_deadline`. IK's first handshake message can be replayed by anyone who
        captured it; only a peer holding the session keys can send a valid transport
        message, so until one arrives the session is nobody's (logged as a stranger)."""
        claimed = fingerprint(stream.peer_key)
        try:
            with anyio.fail_after(self.limits.first_message_deadline):
                return await stream.receive_message()
        except TimeoutError:
            reason = (f"no valid message within {self.limits.first_message_deadline:g} s "
                      f"of the handshake")
        except PlanfenceError as exc:
            reason = f"first message: {exc}"
        self.stranger_event("handshake_failed", remote=remote, fingerprint=claimed,
                            reason=reason)
        return None

    async def _serve_peer(self, stream: NoiseStream, remote: str, first: bytes) -> None:
        peer = self.roster.agent_by_noise_key(stream.peer_key)
        assert peer is not None
        if self.sessions_by_peer.get(peer.name, 0) >= self.limits.sessions_per_peer:
            self.refused_connections += 1
            self.log.write("session_refused", remote=remote, peer=peer.name,
                           reason=f"{self.limits.sessions_per_peer} sessions of {peer.name} open")
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
            self._sync_progress()  # its group members no longer owe acknowledgements
            self.log.write("disconnected", remote=remote, peer=peer.name,
                           **stream.statistics())

    async def _serve_session(self, connection: Connection, first: bytes) -> None:
        send, receive = anyio.create_memory_object_stream[bytes](math.inf)
        connection.pushes = send
        limiter = anyio.Semaphore(self.limits.requests_per_session)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._send_pushes, connection, receive)
            try:
                data = first
                while True:
                    await limiter.acquire()  # at the cap, stop reading: the peer waits
                    self._begin()
                    tg.start_soon(self._answer, connection, data, limiter)
                    data = await connection.stream.receive_message()
            except PlanfenceError as exc:
                if isinstance(exc, RemoteProtocolError):
                    self.log.write("error", peer=connection.peer.name,
                                   reason=f"session closed: {exc}")
            finally:
                send.close()

    async def _send_pushes(self, connection: Connection, receive: Any) -> None:
        async with receive:
            async for message in receive:
                connection.queued_bytes -= len(message)
                try:
                    await connection.stream.send_message(message)
                except PlanfenceError:
                    return

    def _begin(self) -> None:
        self.in_flight += 1
        if self._idle.is_set():
            self._idle = anyio.Event()

    def _end(self) -> None:
        self.in_flight -= 1
        self.requests_served += 1
        if self.in_flight == 0:
            self._idle.set()

    async def _answer(self, connection: Connection, data: bytes,
                      limiter: anyio.Semaphore) -> None:
        started = time.perf_counter()
        op, keys, req_id = "?", [], request_id_of(data)
        try:
            request = decode_request(data)
            op = request.op
            keys = _keys_of(request)
            result = await self._dispatch(connection, request)
            reply, outcome = encode_response(request.req_id, True, result), "ok"
        except BadRequest as exc:
            reply, outcome = encode_error(req_id, exc.code, exc.message), exc.code
        except Exception as exc:  # a bug in one request must not kill the daemon
            self.log.write("error", peer=connection.peer.name, op=op, reason=repr(exc))
            reply, outcome = encode_error(req_id, "internal", "internal error"), "internal"
        try:
            await connection.stream.send_message(reply)
        except PlanfenceError:
            outcome += " (peer gone)"
        finally:
            self.log.write("request", peer=connection.peer.name, op=op, keys=keys[:64],
                           outcome=outcome,
                           latency_ms=round((time.perf_counter() - started) * 1000, 3))
            self._end()
            limiter.release()

    async def _dispatch(self, connection: Connection, request: Request) -> dict[str, Any]:
        if request.op == "ping":
            return {"agent": self.agent.name, "time": time.time()}
        if request.op == "heads":
            return await self._heads(*parse_heads(request.args))
        if request.op == "get":
            records = await self.store.get(parse_get(request.args))
            return {"records": [r.to_wire() for r in records]}
        if request.op == "put":
            return await self._put(connection.peer, *parse_put(request.args))
        if request.op == "subscribe":
            keys = parse_subscribe(request.args)
            every = parse_subscribe_every(request.args)
            if keys is not None:
                self._check_owned(keys)
            if len(connection.subscriptions) >= self.limits.subscriptions_per_session:
                raise BadRequest("limit_exceeded", f"at most "
                                 f"{self.limits.subscriptions_per_session} subscriptions "
                                 f"per session")
            connection.subscriptions[request.req_id] = Subscription(
                set(keys) if keys else None, every, parse_subscribe_group(request.args))
            return {"subscribed": True, "heads": self._head_rows(keys or list(self.store.heads))}
        if request.op == "ack":
            group, seq = parse_ack(request.args)
            if not syncgroups.acknowledge(connection.subscriptions.values(), group, seq):
                raise BadRequest("bad_request", f"this session has no subscription in {group!r}")
            self._sync_progress()
            return {"acked": seq}
        if request.op == "synced":
            return await self._wait_synced(*parse_synced(request.args))
        return self.statistics()

    def _subscriptions(self) -> list[Subscription]:
        return [s for c in self.connections for s in c.subscriptions.values()]

    def _sync_progress(self) -> None:
        self._synced_changed.set()
        self._synced_changed = anyio.Event()

    async def _wait_synced(self, group: str, keys: list[str]) -> dict[str, Any]:
        """Answer once every member of `group` has acknowledged every update of `keys`
        committed before this request (owners/syncgroups.py); held-back rows go out first."""
        self._check_owned(keys)
        target = max((self.store.heads[k].seq for k in keys if k in self.store.heads),
                     default=0)
        for connection in list(self.connections):
            for req_id, subscription in connection.subscriptions.items():
                rows = subscription.flush() if subscription.group == group else None
                if rows and connection.pushes is not None:
                    self._queue_push(connection, subscription.push(req_id, rows))
        while not syncgroups.is_synchronized(self._subscriptions(), group, target):
            await self._synced_changed.wait()
        return {"synced": target}

    def _check_owned(self, keys: list[str]) -> None:
        for key in keys:
            owner = self.roster.owner_of(key)
            if owner != self.agent.name:
                raise BadRequest("not_owner", f"{self.agent.name} does not own {key!r} "
                                              f"(owner: {owner or 'nobody'})")

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

    async def _heads(self, keys: list[str], expect: dict[str, bytes]) -> dict[str, Any]:
        self._check_owned(keys)
        await self.observe(keys)
        changed = [k for k in keys if k in expect and k in self.store.heads
                   and self.store.heads[k].id != expect[k]]
        records = await self.store.records_for(changed) if changed else []
        return {"heads": self._head_rows(keys), "records": [r.to_wire() for r in records]}

    async def _put(self, peer: Agent, key: str, kind: str, parents: list[bytes],
                   body: Any) -> dict[str, Any]:
        self._check_owned([key])
        if peer.name != self.agent.name:
            raise BadRequest("forbidden", f"only {self.agent.name} may write {key!r}; "
                                          f"this session is {peer.name}")
        try:
            record = await self.store.wait_put(key, kind, parents, body)
        except RecordError as exc:
            raise BadRequest("bad_request", str(exc)) from None
        self.log.write("put", key=key, id=record.id, seq=record.seq, kind=kind,
                       parents=list(record.parents))
        return {"id": record.id, "seq": record.seq}

    def _push_heads(self, records: list[Record]) -> None:
        for connection in list(self.connections):
            for req_id, subscription in connection.subscriptions.items():
                rows = subscription.add(records)
                if rows and connection.pushes is not None:
                    self._queue_push(connection, subscription.push(req_id, rows))

    def _queue_push(self, connection: Connection, message: bytes) -> None:
        """Queue a push for `connection`; a subscriber whose unsent pushes exceed
        `queued_push_bytes` has fallen behind and is dropped (its session closed)."""
        if connection.queued_bytes + len(message) > self.limits.queued_push_bytes:
            self.dropped_subscribers += 1
            self.log.write("subscriber_dropped", peer=connection.peer.name,
                           reason=f"fell behind: {connection.queued_bytes} bytes of pushes "
                                  f"unsent (limit {self.limits.queued_push_bytes})")
            assert connection.pushes is not None
            connection.pushes.close()
            connection.pushes = None
            connection.scope.cancel()
            return
        try:
            connection.pushes.send_nowait(message)  # type: ignore[union-attr]
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return
        connection.queued_bytes += len(message)

    def statistics(self) -> dict[str, Any]:
        return {"agent": self.agent.name, "sessions": len(self.connections),
                "in_flight": self.in_flight, "requests_served": self.requests_served,
                "refused_peers": self.refused_peers, "connections": self.open_connections,
                "refused_connections": self.refused_connections,
                "accept_errors": self.accept_errors,
                "dropped_subscribers": self.dropped_subscribers,
                "log_suppressed": self._strangers.suppressed_total,
                **self.log.statistics(), **self.store.statistics()}


def _keys_of(request: Request) -> list[str]:
    args = request.args
    if isinstance(args.get("keys"), list):
        return [k for k in args["keys"] if isinstance(k, str)]
    if isinstance(args.get("key"), str):
        return [args["key"]]
    return []


def _remote_address(stream: SocketStream) -> str:
    try:
        host, port = stream.extra(anyio.abc.SocketAttribute.remote_address)[:2]
        return f"{host}:{port}"
    except (anyio.TypedAttributeLookupError, ValueError, TypeError):
        return "?"


def signer(identity: Identity) -> Signer:
    """The store's signing callback: makes records owned and signed by `identity`."""
    def sign(key: str, kind: str, parents: list[bytes], body: Any, seq: int) -> Record:
        return make_record(identity.signing_key, key=key, owner=identity.name, seq=seq,
                           parents=parents, kind=kind, body=body)
    return sign


async def run_owner(roster: Roster, identity: Identity, db_path: Path, log_path: Path, *,
                    max_message: int = 16 * 1024 * 1024,
                    listen: tuple[str, int] | None = None, limits: Limits = Limits(),
                    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
    """Open the store and log, serve until a signal or cancellation, then close both.

    `listen` overrides the roster address to bind (e.g. 0.0.0.0 inside a container).
    """
    log = EventLog(log_path, identity.name)
    store = None
    try:
        store = await Store.open(db_path, signer(identity), identity.name)
        daemon = OwnerDaemon(roster, identity, store, log, max_message=max_message,
                             listen=listen, limits=limits)
        await daemon.serve(task_status=task_status)
    finally:
        if store is not None:
            await store.close()
        log.close()
