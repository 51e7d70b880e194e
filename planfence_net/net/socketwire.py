"""The socket under a Noise session: an asyncio protocol that hands received bytes on in the
callback that received them and writes straight to the transport.

A `Wire` is the protocol of a connection made with asyncio's public API
(`loop.create_connection`, `loop.connect_accepted_socket`), on asyncio's loop or uvloop's.
A client's wire (`coalesce`) holds the writes of one event-loop round and hands them to the
socket in one write at its end. It stops reading while anyone holds it (`hold`): the session's reader is behind ("backlog"),
the session has read its share of this event-loop round ("turn"), or its large message
waits for a slot ("slot"); reading resumes when every hold is released.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from ..core.errors import PlanfenceError, TransportError

# Bytes one session reads before it lets the event loop's other callbacks run. libuv (uvloop)
# reads a readable socket up to 32 times in one callback round, 8 MiB: decrypting that took
# 10 ms a session, and four sessions flooding the owner held every other peer's request up
# to 100 ms (measured, docs/FAULTS.md).
TURN_BYTES = 256 * 1024
# A client's writes of one event-loop round leave in one write at its end (`coalesce`), up
# to this many bytes: the executors of one process that share a session send their requests
# to an owner together, and the owner reads them together and answers them in one write.
COALESCE_BYTES = 16 * 1024

CloseHandler = Callable[[PlanfenceError], None]
DataHandler = Callable[[bytes], None]


@dataclass(slots=True)
class Traffic:
    """Bytes and messages on one connection, counted at the socket (encrypted, framed)."""

    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    writes: int = 0  # writes handed to the socket (several messages may share one)


class Wire(asyncio.Protocol):
    """The socket of one session: received bytes go to `on_data` (a PlanfenceError it raises
    ends the connection with that error), which calls `wake` when they give the task in
    `wait_readable` something to look at; writes go straight to the transport."""

    def __init__(self, on_data: DataHandler, traffic: Traffic) -> None:
        self.transport: asyncio.Transport | None = None
        self.on_data = on_data
        self.traffic = traffic
        self.on_close: CloseHandler | None = None
        self.error: PlanfenceError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None  # set while writing is paused
        self._held: set[str] = set()  # why reading is paused ("backlog", "turn", "slot")
        self._turn = 0  # bytes read since this session last let others run
        self._corked: list[bytes] | None = None  # writes held for one write (`cork`)
        self.coalesce = False  # hold writes until the end of the event-loop round
        self._soon: list[bytes] = []  # writes held for the end of this round
        self._soon_bytes = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transport does not subclass asyncio.Transport but has its methods
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.error is not None:  # closed before it was connected
            self.transport.abort()
        elif self._held:
            self.transport.pause_reading()

    def data_received(self, data: bytes) -> None:
        if self.error is not None:
            return
        self.traffic.bytes_received += len(data)
        self._turn += len(data)
        if self._turn >= TURN_BYTES and "turn" not in self._held:
            self.hold("turn")  # read on after the loop has run everyone else's callbacks
            asyncio.get_running_loop().call_soon(self._next_turn)
        try:
            self.on_data(data)
        except PlanfenceError as exc:
            self.fail(exc)

    def hold(self, reason: str) -> None:
        """Stop reading until `release(reason)` (and every other hold is released)."""
        if not self._held and self._open():
            self.transport.pause_reading()  # type: ignore[union-attr]
        self._held.add(reason)

    @property
    def reading(self) -> bool:
        """False while any hold pauses reading."""
        return not self._held

    def release(self, reason: str) -> None:
        if reason not in self._held:
            return
        self._held.discard(reason)
        if not self._held and self._open():
            self.transport.resume_reading()  # type: ignore[union-attr]

    def _open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def _next_turn(self) -> None:
        self._turn = 0
        self.release("turn")

    def eof_received(self) -> bool:
        self.fail(TransportError("connection closed by peer"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(
            TransportError(f"connection closed: {exc!r}" if exc else "connection closed by peer")
        )
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    @property
    def writable(self) -> bool:
        """False while the socket's send buffer is over its high-water mark."""
        return self._writable is None

    def fail(self, exc: PlanfenceError) -> None:
        """End the connection with `exc`: later sends and receives raise it (once set, kept)."""
        if self.error is not None:
            return
        self.flush()  # what was written before the end goes out first, as unheld writes did
        self.error = exc
        if self.transport is not None:
            self.transport.abort()
        self.wake()
        if self.on_close is not None:
            self.on_close(exc)

    def wake(self) -> None:
        """Let the task in `wait_readable` (if any) run."""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait_readable(self) -> None:
        """Wait until `wake` or a failure (cancellable)."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def write(self, data: bytes) -> None:
        """Hand `data` to the socket (held until `uncork` while corked); raises the error
        that ended the connection."""
        if self.error is not None:
            raise self.error
        assert self.transport is not None, "written before the connection was made"
        if self._corked is not None:
            self._corked.append(data)
        elif self.coalesce:
            self._soon.append(data)
            self._soon_bytes += len(data)
            if self._soon_bytes >= COALESCE_BYTES:
                self.flush()
            elif len(self._soon) == 1:
                asyncio.get_running_loop().call_soon(self.flush)
        else:
            self.transport.write(data)
            self.traffic.writes += 1
        self.traffic.bytes_sent += len(data)

    def flush(self) -> None:
        """Hand the writes `coalesce` holds to the socket now, in one write (called at the
        end of the event-loop round they were made in, or once they reach COALESCE_BYTES;
        dropped when the connection has ended meanwhile)."""
        held = self._soon
        if not held:
            return
        self._soon, self._soon_bytes = [], 0
        if self.error is None and self.transport is not None and not self.transport.is_closing():
            self.transport.write(held[0] if len(held) == 1 else b"".join(held))
            self.traffic.writes += 1

    def cork(self) -> None:
        """Hold every write until `uncork`, which hands them to the socket in one write
        (one system call for the answers to every request one read delivered)."""
        if self._corked is None:
            self._corked = []

    def uncork(self) -> int:
        """Hand the writes held since `cork` to the socket in one write (dropped when the
        connection has ended meanwhile); returns their size."""
        held, self._corked = self._corked, None
        if not held:
            return 0
        data = held[0] if len(held) == 1 else b"".join(held)
        if self.error is None and self.transport is not None:
            self.transport.write(data)
            self.traffic.writes += 1
        return len(data)

    async def wait_writable(self) -> None:
        """Wait while the socket's send buffer is over its high-water mark (returns at once
        otherwise: no event-loop turn)."""
        while self._writable is not None and self.error is None:
            await asyncio.shield(self._writable)


async def connect_wire(host: str, port: int, wire: Wire) -> None:
    """Open a TCP connection to host:port with `wire` as its protocol. Raises
    TransportError (the message names the address and the socket's reason)."""
    try:
        await asyncio.get_running_loop().create_connection(lambda: wire, host, port)
    except OSError as exc:
        raise TransportError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None


async def accept_socket(listener: socket.socket) -> tuple[socket.socket, str]:
    """The next connection on a listening socket, and its remote HOST:PORT. Raises OSError as
    accept() does (out of descriptors: EMFILE, ...)."""
    loop = asyncio.get_running_loop()
    try:
        sock, address = await loop.sock_accept(listener)
    except asyncio.CancelledError:
        # a cancelled sock_accept may leave its reader registered on the listener
        # (bpo-41317); removing it lets the next accept wait again
        try:
            loop.remove_reader(listener)
        except (ValueError, NotImplementedError):
            pass
        raise
    try:
        remote = f"{address[0]}:{address[1]}"
    except (IndexError, TypeError):
        remote = "?"
    return sock, remote


async def attach_wire(sock: socket.socket, wire: Wire) -> None:
    """Make `wire` the protocol of an accepted socket. Raises TransportError when the loop
    cannot take it; the socket is closed then, and when cancelled."""
    try:
        await asyncio.get_running_loop().connect_accepted_socket(lambda: wire, sock)
    except OSError as exc:
        sock.close()
        raise TransportError(f"connection lost: {exc.strerror or exc}") from None
    except BaseException:
        sock.close()
        raise
