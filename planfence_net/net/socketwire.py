"""The socket under a Noise session: a bare asyncio protocol that turns received bytes into
frames and writes straight to the transport.

`take_over` moves an anyio TCP stream's transport (asyncio's or uvloop's) to a `Wire`, so a
received frame is handled in the callback that received it and a sent message reaches the
socket in one synchronous step. A wire stops reading while anyone holds it (`hold`): the
session's reader is behind ("backlog"), the session has read its share of this event-loop
round ("turn"), or its large message waits for a slot ("slot").
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from anyio.abc import ByteStream

from ..core.errors import LocalProtocolError, PlanfenceError, TransportError
from ..protocol.framing import FrameDecoder

# Bytes one session reads before it lets the event loop's other callbacks run. libuv (uvloop)
# reads a readable socket up to 32 times in one callback round, 8 MiB: decrypting that took
# 10 ms a session, and four sessions flooding the owner held every other peer's request up
# to 100 ms (measured, docs/FAULTS.md).
TURN_BYTES = 256 * 1024

CloseHandler = Callable[[PlanfenceError], None]


@dataclass(slots=True)
class Traffic:
    """Bytes and messages on one connection, counted at the socket (encrypted, framed)."""

    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0


class Wire(asyncio.Protocol):
    """The socket of one session: received bytes become frames, handed to `on_frame` (after
    the handshake) or queued for `wait_frame`; writes go straight to the transport."""

    def __init__(
        self, transport: asyncio.Transport, decoder: FrameDecoder, traffic: Traffic
    ) -> None:
        self.transport = transport
        self.decoder = decoder
        self.traffic = traffic
        self.frames: deque[bytes] = deque()
        self.on_frame: Callable[[bytes], None] | None = None
        self.on_close: CloseHandler | None = None
        self.error: PlanfenceError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._held: set[str] = set()  # why reading is paused ("backlog", "turn", "slot")
        self._turn = 0  # bytes read since this session last let others run

    def data_received(self, data: bytes) -> None:
        self.traffic.bytes_received += len(data)
        self._turn += len(data)
        if self._turn >= TURN_BYTES and "turn" not in self._held:
            self.hold("turn")  # read on after the loop has run everyone else's callbacks
            asyncio.get_running_loop().call_soon(self._next_turn)
        self.decoder.feed(data)
        try:
            while self.error is None and (frame := self.decoder.next_frame()) is not None:
                if self.on_frame is not None:
                    self.on_frame(frame)
                else:
                    self.frames.append(frame)
        except PlanfenceError as exc:
            self.fail(exc)
        self._wake()

    def hold(self, reason: str) -> None:
        """Stop reading until `release(reason)` (and every other hold is released)."""
        if not self._held and not self.transport.is_closing():
            self.transport.pause_reading()
        self._held.add(reason)

    @property
    def reading(self) -> bool:
        """False while any hold pauses reading."""
        return not self._held

    def release(self, reason: str) -> None:
        if reason not in self._held:
            return
        self._held.discard(reason)
        if not self._held and not self.transport.is_closing():
            self.transport.resume_reading()

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

    def fail(self, exc: PlanfenceError) -> None:
        """End the session with `exc`: later sends and receives raise it (once set, kept)."""
        if self.error is not None:
            return
        self.error = exc
        self.transport.abort()
        self._wake()
        if self.on_close is not None:
            self.on_close(exc)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait_readable(self) -> None:
        """Wait until data_received or a failure happens (cancellable)."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    async def wait_frame(self) -> bytes:
        while not self.frames:
            if self.error is not None:
                raise self.error
            await self.wait_readable()
        return self.frames.popleft()

    def write(self, data: bytes) -> None:
        if self.error is not None:
            raise self.error
        self.transport.write(data)
        self.traffic.bytes_sent += len(data)

    async def wait_writable(self) -> None:
        """Wait while the socket's send buffer is over its high-water mark (returns at once
        otherwise: no event-loop turn)."""
        while self._writable is not None and self.error is None:
            await asyncio.shield(self._writable)


def take_over(stream: ByteStream, decoder: FrameDecoder, traffic: Traffic) -> Wire:
    """Move an anyio asyncio socket stream's transport (and any bytes it already read) to a
    `Wire`. The anyio stream must not be used afterwards except for `aclose()`."""
    # anyio keeps both in private attributes (hence getattr); its protocol's read_queue,
    # exception and is_at_eof are read below. uvloop's transport does not subclass
    # asyncio.Transport but has its methods, so it is checked by duck typing and cast.
    found = getattr(stream, "_transport", None)
    old = getattr(stream, "_protocol", None)
    if found is None or not hasattr(found, "set_protocol") or old is None:
        raise LocalProtocolError("a Noise session needs a TCP stream on asyncio")
    transport = cast(asyncio.Transport, found)
    wire = Wire(transport, decoder, traffic)
    transport.set_protocol(wire)
    pending = b"".join(old.read_queue)
    old.read_queue.clear()
    if pending:
        wire.data_received(pending)
    if old.exception is not None or old.is_at_eof or transport.is_closing():
        wire.fail(TransportError("connection closed by peer"))
    else:
        transport.resume_reading()
    return wire


def pause_reading_until_receive(stream: ByteStream) -> None:
    """Stop the transport reading ahead of `receive` on an accepted stream.

    anyio 4.16's asyncio backend pauses reading on streams from `connect_tcp` but not on
    accepted ones: until a `receive` call has to wait, the transport keeps reading into an
    unbounded buffer, so a peer sending faster than we consume grows our memory without bound
    (2.7 GB in 5 s in a flood test of the shaper) instead of meeting backpressure. Pausing
    restores the contract that `receive` resumes reading only while it waits. This reaches
    into anyio's private `_transport`; without it (another backend) it does nothing.
    """
    transport = getattr(stream, "_transport", None)
    pause = getattr(transport, "pause_reading", None)
    if pause is not None and not transport.is_closing():  # type: ignore[union-attr]
        pause()
