"""A blocking Noise client for short-lived processes: the hook and `workspace check`.

The hook is a fresh process before every tool call, and importing anyio with asyncio costs
more than its whole time budget. The Noise session is sans-IO (`protocol.session`), so this
module is one more loop over it, as `planfence_net.net.transport` is, on blocking sockets:
one session per owner, and a round of requests to several owners runs one thread per owner,
all under one deadline. Errors are the project's: TransportError (cannot connect, connection
lost, deadline passed), HandshakeError, RemoteProtocolError, RequestError.

A long-lived process that runs many short checks (the workspace owner answering hook calls)
keeps its sessions warm: inside `keeping(pool)`, `SyncSessions` made in that context (and
the worker threads it starts) take an idle session from the `SessionPool` before opening one,
and give theirs back on `close()` instead of closing them. An owner process that checks
against itself also passes `keeping` a `Local`: requests to that owner are then answered
in-process (`Local.request`), not over a session to itself.
"""

from __future__ import annotations

import _thread
import contextlib
import contextvars
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from ..core.errors import (
    HandshakeError,
    PlanfenceError,
    RemoteProtocolError,
    RequestError,
    TransportError,
)
from ..core.identity import Identity
from ..core.roster import Agent, Roster
from ..protocol.session import HANDSHAKE_FAILED, Event, Response, Session

Outcome = dict[str, Any] | PlanfenceError  # a result, or the error the request failed with


class SyncSession:
    """One authenticated session to an owner over a blocking socket; one request at a time.
    The protocol (handshake, chunks, req-ids) is `protocol.session.Session`'s; this is the
    blocking loop around it."""

    def __init__(self, sock: socket.socket, agent: Agent, session: Session) -> None:
        self.sock, self.agent, self._session = sock, agent, session
        self.bytes_sent = self.bytes_received = 0

    @classmethod
    def open(
        cls,
        roster: Roster,
        identity: Identity,
        agent: Agent,
        address: tuple[str, int],
        deadline: float,
    ) -> SyncSession:
        """Connect to `address` and run the IK handshake as `identity` by `deadline` (a
        time.monotonic() value). Raises TransportError or HandshakeError."""
        host = address[0].encode() if address[0].isascii() else address[0]  # bytes: no idna
        try:
            sock = socket.create_connection(
                (host, address[1]),  # type: ignore[arg-type]
                timeout=_left(deadline),
            )
        except OSError as exc:
            raise TransportError(
                f"cannot connect to {agent.name} at {address[0]}:"
                f"{address[1]}: {exc.strerror or exc}"
            ) from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            session = Session(
                initiator=True,
                cluster=roster.cluster,
                static_private=identity.noise_private,
                remote_static=agent.noise_key,
            )
            self = cls(sock, agent, session)
            self._write(session.initiate(), deadline)
            try:
                self._event(deadline)  # Established: nothing else comes first
            except HandshakeError as exc:
                reason = str(exc).removeprefix(HANDSHAKE_FAILED)
                raise HandshakeError(f"handshake with {agent.name} failed: {reason}") from None
            return self
        except BaseException:
            sock.close()
            raise

    def request(self, op: str, args: dict[str, Any], deadline: float) -> dict[str, Any]:
        """Send one request and return its result by `deadline`. Raises RequestError for a
        typed error, TransportError, RemoteProtocolError."""
        req_id, data = self._session.send_request(op, args)
        self._write(data, deadline)
        while not isinstance(event := self._event(deadline), Response):
            pass  # the chunks of a large answer
        outcome = event.outcome()  # the one request pending: its id was matched
        if isinstance(outcome, RequestError):
            raise outcome
        return outcome

    def _write(self, data: bytes, deadline: float) -> None:
        try:
            self.sock.settimeout(_left(deadline))
            self.sock.sendall(data)
        except OSError as exc:
            raise TransportError(f"connection to {self.agent.name} lost: {exc}") from None
        self.bytes_sent += len(data)

    def _event(self, deadline: float) -> Event:
        """The session's next event, reading the socket until there is one."""
        while (event := self._session.next_event()) is None:
            try:
                self.sock.settimeout(_left(deadline))
                data = self.sock.recv(65536)
            except OSError as exc:
                raise TransportError(f"connection to {self.agent.name} lost: {exc}") from None
            if not data:
                raise TransportError(f"{self.agent.name} closed the connection")
            self.bytes_received += len(data)
            self._session.receive_data(data)
        return event

    def close(self) -> None:
        self.sock.close()

    def idle(self) -> bool:
        """True when the connection is open and nothing is waiting to be read on it (a
        session that is safe to send the next request on)."""
        try:
            self.sock.setblocking(False)  # a timeout would make recv wait for data first
            self.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return True
        except OSError:
            return False
        return False  # the owner closed it (b""), or sent what nobody asked for


PoolKey = tuple[str, bytes, str, bytes, tuple[str, int]]


class SessionPool:
    """Idle sessions kept open between checks, at most `idle` in all (past it, the oldest
    session of the longest-kept key is closed). A session is taken by one `SyncSessions` at a time, so sessions are never shared
    by two requests; one that the owner closed while it was idle is closed and passed over.
    Thread-safe."""

    def __init__(self, idle: int = 32) -> None:
        self.limit = idle
        self._idle: dict[PoolKey, list[SyncSession]] = {}
        self._count = 0
        self._lock = _thread.allocate_lock()
        self.opened = self.reused = 0  # counters for `statistics`

    def take(self, key: PoolKey) -> SyncSession | None:
        """An idle, open session for `key`, or None."""
        while True:
            with self._lock:
                sessions = self._idle.get(key)
                if not sessions:
                    return None
                session = sessions.pop()
                self._count -= 1
            if session.idle():
                self.reused += 1
                return session
            session.close()

    def give(self, key: PoolKey, session: SyncSession) -> None:
        """Keep `session` (idle, its last request answered) for the next `take` of `key`."""
        oldest = None
        with self._lock:
            self._idle.setdefault(key, []).append(session)
            self._count += 1
            if self._count > self.limit:
                first = next(k for k, v in self._idle.items() if v)
                oldest = self._idle[first].pop(0)
                self._count -= 1
        if oldest is not None:
            oldest.close()

    def close(self) -> None:
        """Close every idle session."""
        with self._lock:
            sessions = [s for each in self._idle.values() for s in each]
            self._idle.clear()
            self._count = 0
        for session in sessions:
            session.close()

    def statistics(self) -> dict[str, int]:
        return {"idle": self._count, "opened": self.opened, "reused": self.reused}


class Local(Protocol):
    """An owner answering in the caller's own process (the workspace owner's hook doors)."""

    def serves(self, roster: Roster, agent: Agent) -> bool:
        """Whether `agent` of `roster` is this owner."""

    def request(
        self, identity: Identity, op: str, args: dict[str, Any], deadline: float
    ) -> dict[str, Any]:
        """`SyncSession.request`'s answer, from `identity`, given in-process; raises as it
        does (HandshakeError for an identity the owner would not let in)."""


class _Counts(threading.local):
    local_requests = 0


_THREAD = _Counts()


def local_requests() -> int:
    """How many requests this thread has had answered in-process (`Local`) so far."""
    return _THREAD.local_requests


_POOL: contextvars.ContextVar[SessionPool | None] = contextvars.ContextVar(
    "planfence_session_pool", default=None
)
_LOCAL: contextvars.ContextVar[Local | None] = contextvars.ContextVar(
    "planfence_local_owner", default=None
)


@contextlib.contextmanager
def keeping(pool: SessionPool, local: Local | None = None) -> Iterator[SessionPool]:
    """Within the block (and the tasks and worker threads started from it, which copy the
    context), `SyncSessions` use `pool`'s warm sessions, and ask `local` itself for what it
    owns (module doc)."""
    token, local_token = _POOL.set(pool), _LOCAL.set(local)
    try:
        yield pool
    finally:
        _LOCAL.reset(local_token)
        _POOL.reset(token)


class SyncSessions:
    """Sessions from `identity` to the owners of `roster`, opened on first use.

    `addresses` overrides where an owner is reached (a shaper in front of it). A session that
    failed is dropped; the next round to that owner opens a new one. Requests to one owner
    run one at a time (a thread a round gave up on finishes before the next request to its
    owner starts), and `traffic()` counts every byte moved, dropped sessions included.
    """

    def __init__(
        self,
        roster: Roster,
        identity: Identity,
        addresses: dict[str, tuple[str, int]] | None = None,
    ) -> None:
        self.roster, self.identity = roster, identity
        self.addresses = addresses or {}
        self._sessions: dict[str, SyncSession] = {}
        self._turns: dict[str, _thread.LockType] = {}  # owner -> held while a request runs
        self._dropped = [0, 0]  # bytes sent and received by dropped sessions
        self._pool = _POOL.get()  # read here: the threads of `round` do not copy the context
        self._local = _LOCAL.get()
        self.local_requests = 0  # answered in-process (`Local`)

    def request(self, owner: str, op: str, args: dict[str, Any], deadline: float) -> dict[str, Any]:
        """One request to `owner`; raises as SyncSession.request does. An owner answering
        in this process (`keeping`'s `local`, reached at its roster address) answers here."""
        if self._local is not None and owner not in self.addresses:
            agent = self.roster.agent(owner)
            if self._local.serves(self.roster, agent):
                self.local_requests += 1
                _THREAD.local_requests = local_requests() + 1
                return self._local.request(self.identity, op, args, deadline)
        turn = self._turns.setdefault(owner, _thread.allocate_lock())
        if not turn.acquire(timeout=_left(deadline)):
            raise TransportError("deadline passed")
        try:
            return self._request(owner, op, args, deadline)
        finally:
            turn.release()

    def _request(
        self, owner: str, op: str, args: dict[str, Any], deadline: float
    ) -> dict[str, Any]:
        session = self._sessions.get(owner)
        try:
            if session is None:
                agent = self.roster.agent(owner)
                address = self.addresses.get(owner, (agent.host, agent.port))
                key = self._key(agent, address)
                session = self._pool.take(key) if self._pool is not None else None
                if session is None:
                    session = SyncSession.open(self.roster, self.identity, agent, address, deadline)
                    if self._pool is not None:
                        self._pool.opened += 1
                self._sessions[owner] = session
            return session.request(op, args, deadline)
        except (TransportError, RemoteProtocolError):
            self._drop(owner)
            raise

    def round(
        self,
        requests: dict[str, tuple[str, dict[str, Any]]],
        deadline: float,
        *,
        settled: Callable[[dict[str, Outcome]], bool] | None = None,
    ) -> dict[str, Outcome]:
        """Send each owner its request, all concurrently; return each owner's outcome once all
        answered, or `settled(outcomes so far)` is true (called in this thread), or the
        deadline passed. Owners still pending are left out; at the deadline their sessions
        are dropped, when settled they are kept (the next request waits for the answer)."""
        outcomes: dict[str, Outcome] = {}
        if len(requests) == 1:  # the common case of one owner needs no thread
            [(owner, (op, args))] = requests.items()
            try:
                outcomes[owner] = self.request(owner, op, args, deadline)
            except PlanfenceError as exc:
                outcomes[owner] = exc
            return outcomes
        done = threading.Condition()

        def ask(owner: str, op: str, args: dict[str, Any]) -> None:
            try:
                outcome: Outcome = self.request(owner, op, args, deadline)
            except PlanfenceError as exc:
                outcome = exc
            with done:
                outcomes[owner] = outcome
                done.notify()

        for owner, (op, args) in requests.items():
            threading.Thread(target=ask, args=(owner, op, args), daemon=True).start()
        with done:
            in_time = done.wait_for(
                lambda: (
                    len(outcomes) == len(requests)
                    or (settled is not None and settled(dict(outcomes)))
                ),
                timeout=max(0.0, deadline - time.monotonic()),
            )
            finished = dict(outcomes)
        if not in_time:
            for owner in requests.keys() - finished.keys():
                self._drop(owner)  # its thread may still be using the socket: close it
        return finished

    def traffic(self) -> tuple[int, int]:
        sessions = list(self._sessions.values())
        return (
            self._dropped[0] + sum(s.bytes_sent for s in sessions),
            self._dropped[1] + sum(s.bytes_received for s in sessions),
        )

    def _drop(self, owner: str) -> None:
        session = self._sessions.pop(owner, None)
        if session is not None:
            session.close()
            self._dropped[0] += session.bytes_sent
            self._dropped[1] += session.bytes_received

    def _key(self, agent: Agent, address: tuple[str, int]) -> PoolKey:
        """Which pooled sessions may serve `agent` at `address`: the same cluster, the same
        identity on our side, the same key on the owner's, the same address."""
        return (self.roster.cluster, self.identity.public_key, agent.name, agent.noise_key, address)

    def close(self) -> None:
        """Close the sessions, or, in `keeping`, give the idle ones back to the pool (a
        session whose request a round gave up on is still busy: it is closed)."""
        for owner in list(self._sessions):
            turn = self._turns.get(owner)
            if self._pool is None or turn is None or not turn.acquire(blocking=False):
                self._drop(owner)
                continue
            try:
                session = self._sessions.pop(owner)
                agent = self.roster.agent(owner)
                address = self.addresses.get(owner, (agent.host, agent.port))
                self._dropped[0] += session.bytes_sent
                self._dropped[1] += session.bytes_received
                session.bytes_sent = session.bytes_received = 0
                self._pool.give(self._key(agent, address), session)
            finally:
                turn.release()


def _left(deadline: float) -> float:
    """Seconds until `deadline`; raises TransportError once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TransportError("deadline passed")
    return left
