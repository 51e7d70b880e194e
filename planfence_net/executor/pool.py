"""One persistent authenticated session per owner: lazy connect, reconnect after failure."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import anyio
from anyio.abc import TaskGroup

from ..core.errors import PlanfenceError, TransportError
from ..core.identity import Identity
from ..core.roster import Roster
from ..net.client import Reply, Session, start_session


class SessionPool:
    """Sessions from one executor identity to the owners of a roster.

    `addresses` overrides where an owner is reached (e.g. a shaper in front of it). Sessions
    live in `task_group`; a failed session is replaced on the next use. Traffic of closed
    sessions is kept, so `traffic()` counts every byte this pool ever moved.
    """

    def __init__(
        self,
        task_group: TaskGroup,
        roster: Roster,
        identity: Identity,
        addresses: dict[str, tuple[str, int]] | None = None,
    ) -> None:
        self._tg = task_group
        self.roster = roster
        self.identity = identity
        self.addresses = addresses or {}
        self._sessions: dict[str, Session] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._closed_sent = 0
        self._closed_received = 0
        self.connects = 0

    def live(self, owner: str) -> Session | None:
        """The live session to `owner`, if there is one (no waiting)."""
        session = self._sessions.get(owner)
        return session if session is not None and session.alive else None

    async def session(self, owner: str) -> Session:
        """A live session to `owner`, connecting when there is none. Raises TransportError."""
        current = self.live(owner)
        if current is not None:  # the steady state: no lock, no event-loop turn
            return current
        lock = self._locks.setdefault(owner, anyio.Lock())
        async with lock:
            current = self._sessions.get(owner)
            if current is not None and current.alive:
                return current
            if current is not None:
                self._retire(owner)
            host, port = self.addresses.get(owner, (None, None))
            session = await start_session(
                self._tg, self.roster, self.identity, self.roster.agent(owner), host=host, port=port
            )
            self.connects += 1
            self._sessions[owner] = session
            return session

    async def request(self, owner: str, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """One request to `owner` on its pooled session (connecting if needed)."""
        reply = await self.send_request(owner, op, args)
        try:
            return await reply.wait()
        except TransportError:
            self._retire(owner)
            raise

    async def connect_missing(self, owners: Iterable[str]) -> dict[str, PlanfenceError]:
        """Connect concurrently to each of `owners` that has no live session; returns the
        owners that could not be reached, with why."""
        missing = [owner for owner in owners if self.live(owner) is None]
        failed: dict[str, PlanfenceError] = {}

        async def connect(owner: str) -> None:
            try:
                await self.session(owner)
            except PlanfenceError as exc:
                failed[owner] = exc

        if len(missing) == 1:
            await connect(missing[0])
        elif missing:
            async with anyio.create_task_group() as tg:
                for owner in missing:
                    tg.start_soon(connect, owner)
        return failed

    async def send_request(self, owner: str, op: str, args: dict[str, Any]) -> Reply:
        """Put one request to `owner` on the wire (connecting if needed); wait for the
        answer with `reply.wait()`."""
        session = await self.session(owner)
        try:
            return await session.send_request(op, args)
        except TransportError:
            self._retire(owner)
            raise

    def prepare_on(
        self, session: Session, owner: str, op: str, args: dict[str, Any]
    ) -> tuple[Reply, bytes]:
        """One request on `session` (`live(owner)`, its socket `writable`), encrypted: the
        reply and the bytes for `write_on`, which must come before anything else is sent
        on it. Raises TransportError (the session is retired)."""
        try:
            return session.prepare_request(op, args)
        except TransportError:
            self._retire(owner)
            raise

    def write_on(self, session: Session, owner: str, data: bytes) -> None:
        """Hand `prepare_on`'s bytes to the socket, without waiting. Raises TransportError
        (the session is retired)."""
        try:
            session.stream.write_prepared(data)
        except TransportError:
            self._retire(owner)
            raise

    def _retire(self, owner: str) -> None:
        session = self._sessions.pop(owner, None)
        if session is not None:
            self._closed_sent += session.stream.traffic.bytes_sent
            self._closed_received += session.stream.traffic.bytes_received
            self._tg.start_soon(session.aclose)

    def traffic(self) -> tuple[int, int]:
        """(bytes sent, bytes received) over all sessions, encrypted and framed."""
        sent, received = self._closed_sent, self._closed_received
        for session in self._sessions.values():
            traffic = session.stream.traffic
            sent += traffic.bytes_sent
            received += traffic.bytes_received
        return sent, received

    async def aclose(self) -> None:
        for owner in list(self._sessions):
            session = self._sessions.pop(owner)
            self._closed_sent += session.stream.traffic.bytes_sent
            self._closed_received += session.stream.traffic.bytes_received
            await session.aclose()

    def statistics(self) -> dict[str, Any]:
        sent, received = self.traffic()
        return {
            "sessions": len(self._sessions),
            "connects": self.connects,
            "bytes_sent": sent,
            "bytes_received": received,
        }


__all__ = ["SessionPool", "PlanfenceError"]
