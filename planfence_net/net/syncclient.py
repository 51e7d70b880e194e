"""A blocking Noise client for short-lived processes: the hook and `workspace check`.

The hook is a fresh process before every tool call, and importing anyio with asyncio costs
more than its whole time budget. The Noise session is sans-IO (`protocol.session`), so this
module is one more loop over it, as `planfence_net.net.transport` is, on blocking sockets:
one session per owner, and a round of requests to several owners runs one thread per owner,
all under one deadline. Errors are the project's: TransportError (cannot connect, connection
lost, deadline passed), HandshakeError, RemoteProtocolError, RequestError.
"""

from __future__ import annotations

import _thread
import socket
import time
from collections.abc import Callable
from typing import Any

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

    def request(self, owner: str, op: str, args: dict[str, Any], deadline: float) -> dict[str, Any]:
        """One request to `owner`; raises as SyncSession.request does."""
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
                session = SyncSession.open(
                    self.roster,
                    self.identity,
                    agent,
                    self.addresses.get(owner, (agent.host, agent.port)),
                    deadline,
                )
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
        import threading

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

    def close(self) -> None:
        for owner in list(self._sessions):
            self._drop(owner)


def _left(deadline: float) -> float:
    """Seconds until `deadline`; raises TransportError once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TransportError("deadline passed")
    return left
