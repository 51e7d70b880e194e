"""Who gets in: an owner's connections from accept() until the peer has proven itself.

The door admits connections members first (admission.py: strangers, claimants and the
limits on each; at a limit the oldest stranger is closed, not the newcomer refused), backs
off when accept() runs out of descriptors, runs the Noise handshake under its deadlines, and
waits for the session's first valid transport message before handing the session to the
daemon. Until then a connection is a stranger's: what it causes is logged at a bounded rate
(`stranger_event`), never in the name of the peer whose key it claims.
Connections are accepted on the listener's sockets with asyncio's public API
(`net.socketwire.accept_socket`), and each runs the responder's side of a
`protocol.session.Session` (`net.transport.accept`).
"""

from __future__ import annotations

import errno
import hashlib
import math
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import SocketAttribute, TaskGroup

from ..core.errors import PlanfenceError
from ..core.identity import Identity
from ..core.roster import Roster
from ..net.slots import MessageSlots
from ..net.socketwire import accept_socket
from ..net.transport import NoiseStream, accept
from ..protocol.framing import Screen
from ..protocol.session import Session
from .admission import Admission, Place, source_of
from .limits import Limits, RateLimit
from .logs import EventLog

HANDSHAKE_TIMEOUT = 5.0
ACCEPT_BACKOFF = (0.05, 1.0)  # first and longest pause after accept() fails
# accept() errors that mean "out of descriptors or memory": wait for some to be freed.
EXHAUSTED = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}

# Called with a proven session: its stream, the remote address and its first message, or
# the screen's refusal of it (in a one-item list the callee empties, so that no frame here
# keeps the message alive).
Admit = Callable[[NoiseStream, str, list["bytes | PlanfenceError | None"]], Awaitable[None]]


def fingerprint(key: bytes) -> str:
    """A short, stable name for a static key in logs: first 16 hex chars of its BLAKE2b."""
    return hashlib.blake2b(key, digest_size=8).hexdigest()


class Door:
    """Accepts, authenticates and admits an owner's connections (module docstring).
    `clock` (seconds, `time.monotonic` unless a test injects one) paces the stranger
    events logged; the handshake's and the limits' timeouts run on the event loop's clock
    (`anyio.fail_after`, cancel scopes), as every await does."""

    def __init__(
        self,
        roster: Roster,
        identity: Identity,
        log: EventLog,
        limits: Limits,
        max_message: int,
        admit: Admit,
        screen: Screen | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.roster = roster
        self.identity = identity
        self.log = log
        self.limits = limits
        self.max_message = max_message
        self._admit = admit
        self._screen = screen
        self.slots = MessageSlots(limits.large_messages, limits.message_stall)
        self.open_connections = 0  # accepted and not yet closed
        self.admission = Admission(limits)  # those not yet proven
        self.refused_connections = 0
        self.evicted_connections = 0
        self.refused_peers = 0
        self.accept_errors = 0
        self._strangers = RateLimit(limits.stranger_burst, limits.stranger_rate, clock)

    async def serve(self, listener: Any, tg: TaskGroup) -> None:
        """Accept on `listener` (every socket of a multi-listener) until cancelled; each
        connection is handled in `tg`."""
        async with anyio.create_task_group() as loops:
            for one in getattr(listener, "listeners", [listener]):
                loops.start_soon(self._accept_loop, one.extra(SocketAttribute.raw_socket), tg)

    async def _accept_loop(self, listener: socket.socket, tg: TaskGroup) -> None:
        """Accept connections until cancelled. Running out of descriptors or memory pauses
        accepting (backing off up to a second) instead of ending it; connections over the
        limits are closed at once."""
        pause = ACCEPT_BACKOFF[0]
        while True:
            try:
                sock, remote = await accept_socket(listener)
            except OSError as exc:
                self.accept_errors += 1
                self.stranger_event("accept_failed", reason=exc.strerror or repr(exc))
                if exc.errno in EXHAUSTED:
                    await anyio.sleep(pause)  # the pending connection keeps the listener ready
                    pause = min(pause * 2, ACCEPT_BACKOFF[1])
                continue
            pause = ACCEPT_BACKOFF[0]
            closer = anyio.CancelScope(deadline=anyio.current_time() + self.limits.stranger_timeout)
            place, evicted, reason = self.admission.arrive(
                source_of(remote), closer, self.open_connections
            )
            if evicted is not None:
                self._evict(evicted)
            if place is None:
                self.refused_connections += 1
                self.stranger_event("connection_refused", remote=remote, reason=reason)
                sock.close()
                continue
            self.open_connections += 1
            tg.start_soon(self._handle_connection, sock, remote, place)

    def _evict(self, place: Place) -> None:
        """Close an unproven connection that lost its place to a newcomer."""
        self.evicted_connections += 1
        self.stranger_event("connection_evicted", address=place.address, reason=place.evicted)
        place.closer.cancel()

    def stranger_event(self, event: str, **fields: Any) -> None:
        """Log an event anyone who can reach the port can cause, at a bounded rate; the
        number left out is logged with the next one (`suppressed`)."""
        if self._strangers.allow():
            suppressed = self._strangers.take_suppressed()
            self.log.write(event, **fields, **({"suppressed": suppressed} if suppressed else {}))

    async def _handle_connection(self, sock: socket.socket, remote: str, place: Place) -> None:
        stream: NoiseStream | None = None
        first: list[bytes | PlanfenceError | None] = [None]
        try:
            self.stranger_event("connection", remote=remote)
            with place.closer:  # cancelled on eviction or at the stranger deadline
                stream = await self._handshake(sock, remote, place)
                if stream is not None:
                    first = [await self._wait_first_message(stream, remote)]
            if place.closer.cancelled_caught and not place.evicted:
                self.stranger_event(
                    "handshake_failed",
                    remote=remote,
                    reason=f"no first message naming a member within "
                    f"{self.limits.stranger_timeout:g} s",
                )
            self.admission.leave(place)
            if first[0] is not None:
                assert stream is not None
                await self._admit(stream, remote, first)
        finally:
            self.admission.leave(place)
            self.open_connections -= 1
            if stream is not None:
                await stream.aclose()
            else:
                sock.close()  # the handshake closed it, unless cancelled before it began

    async def _handshake(
        self, sock: socket.socket, remote: str, place: Place
    ) -> NoiseStream | None:
        """The Noise handshake under its deadline; None (connection closed, event logged)
        when it fails. A first message naming a member makes `place` a claimant."""
        refused: list[bytes] = []

        def accept_peer(key: bytes) -> bool:
            if self.roster.agent_by_noise_key(key) is None:
                refused.append(key)
                return False
            place.closer.deadline = math.inf  # the handshake's own deadline applies
            evicted = self.admission.claim(place)
            if evicted is not None:
                self._evict(evicted)
            return True

        session = Session(
            initiator=False,
            cluster=self.roster.cluster,
            static_private=self.identity.noise_private,
            max_message=self.max_message,
            screen=self._screen,
        )
        try:
            with anyio.fail_after(HANDSHAKE_TIMEOUT):
                return await accept(sock, session, accept_peer, self.slots)
        except (PlanfenceError, TimeoutError) as exc:
            if refused:
                self.refused_peers += 1
                self.stranger_event(
                    "handshake_refused",
                    remote=remote,
                    fingerprint=fingerprint(refused[0]),
                    reason="not in roster",
                )
            else:
                self.stranger_event(
                    "handshake_failed",
                    remote=remote,
                    reason="timeout" if isinstance(exc, TimeoutError) else str(exc),
                )
            return None

    async def _wait_first_message(
        self, stream: NoiseStream, remote: str
    ) -> bytes | PlanfenceError | None:
        """The session's first application message (or the screen's refusal of it: its
        first chunk was valid), or None when no valid chunk of one arrives within
        `first_message_timeout`. IK's first handshake message can be replayed by anyone who
        captured it; only a peer holding the session keys can send a valid transport
        message, so until one arrives the session is nobody's (logged as a stranger)."""
        claimed = fingerprint(stream.peer_key)
        try:
            # The deadline covers the first chunk, which proves the session; the rest of a
            # large first message may take longer on a slow uplink (a 256 KiB put at
            # 0.8 Mbit/s takes ~3 s and more), under the large-message rules (`slots`).
            with anyio.fail_after(self.limits.first_message_timeout):
                await stream.wait_first_chunk()
            return await stream.receive()
        except TimeoutError:
            reason = (
                f"no valid message within {self.limits.first_message_timeout:g} s of the handshake"
            )
        except PlanfenceError as exc:
            reason = f"first message: {exc}"
        self.stranger_event("handshake_failed", remote=remote, fingerprint=claimed, reason=reason)
        return None

    def statistics(self) -> dict[str, int]:
        return {
            "refused_peers": self.refused_peers,
            "connections": self.open_connections,
            "refused_connections": self.refused_connections,
            "evicted_connections": self.evicted_connections,
            "accept_errors": self.accept_errors,
            "large_message_waits": self.slots.waits,
            "stalled_senders": self.slots.evicted,
            "log_suppressed": self._strangers.suppressed_total,
        }
