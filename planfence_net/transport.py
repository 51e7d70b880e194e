"""Noise sessions over TCP: the I/O edge of the protocol core.

`NoiseStream.wrap()` runs the Noise IK handshake over a TCP stream and returns a stream of
whole application messages. This is the one place where socket errors are translated into
planfence errors (TransportError, RemoteProtocolError, HandshakeError).

The stream drives the socket through a bare asyncio protocol (`_Wire`) instead of anyio's
stream: a received frame is decrypted in the callback that received it, and a sent message
is encrypted and handed to the socket in one synchronous step. So a request costs no task,
lock or extra event-loop turn, and ciphertexts leave in nonce order without a lock. A
session's reader either pulls messages (`receive_message`, the owner) or takes each one as
it arrives (`set_receiver`, the client, which resolves the waiting request at once).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import anyio
from anyio.abc import ByteStream

from .errors import (HandshakeError, LocalProtocolError, PlanfenceError, RemoteProtocolError,
                     TransportError)
from .framing import (DEFAULT_MAX_MESSAGE, HANDSHAKE_FRAME_CAP, MAX_FRAME, PATTERN,
                      PROTOCOL_VERSION, FrameDecoder, MessageAssembler, Screen, encode_frame,
                      prologue, split_message)
from .noise import CipherState, HandshakeState
from .slots import MessageSlots

READ_AHEAD = 256 * 1024  # received messages nobody has taken yet before we stop reading
# Bytes one session reads before it lets the event loop's other callbacks run. libuv (uvloop)
# reads a readable socket up to 32 times in one callback round, 8 MiB: decrypting that took
# 10 ms a session, and four sessions flooding the owner held every other peer's request up
# to 100 ms (measured, docs/FAULTS.md).
TURN_BYTES = 256 * 1024

MessageHandler = Callable[[bytes], None]
CloseHandler = Callable[[PlanfenceError], None]


@dataclass(slots=True)
class Traffic:
    """Bytes and messages on one connection, counted at the socket (encrypted, framed)."""

    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0


class _Wire(asyncio.Protocol):
    """The socket of one session: received bytes become frames, handed to `on_frame` (after
    the handshake) or queued for `wait_frame`; writes go straight to the transport."""

    def __init__(self, transport: asyncio.Transport, decoder: FrameDecoder,
                 traffic: Traffic) -> None:
        self.transport = transport
        self.decoder = decoder
        self.traffic = traffic
        self.frames: deque[bytes] = deque()
        self.on_frame: Callable[[bytes], None] | None = None
        self.on_close: CloseHandler | None = None
        self.error: PlanfenceError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._held: set[str] = set()  # why reading is paused ("backlog", "turn")
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
        self.fail(TransportError(f"connection closed: {exc!r}" if exc else
                                 "connection closed by peer"))
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


def _take_over(stream: ByteStream, decoder: FrameDecoder, traffic: Traffic) -> _Wire:
    """Move an anyio asyncio socket stream's transport (and any bytes it already read) to a
    `_Wire`. The anyio stream must not be used afterwards except for `aclose()`."""
    # anyio keeps both in private attributes (hence getattr); its protocol's read_queue,
    # exception and is_at_eof are read below. uvloop's transport does not subclass
    # asyncio.Transport but has its methods, so it is checked by duck typing and cast.
    found = getattr(stream, "_transport", None)
    old = getattr(stream, "_protocol", None)
    if found is None or not hasattr(found, "set_protocol") or old is None:
        raise LocalProtocolError("a Noise session needs a TCP stream on asyncio")
    transport = cast(asyncio.Transport, found)
    wire = _Wire(transport, decoder, traffic)
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


class NoiseStream:
    """Whole application messages over an authenticated, encrypted TCP connection."""

    def __init__(self, wire: _Wire, send_cipher: CipherState, receive_cipher: CipherState,
                 peer_key: bytes, max_message: int, screen: Screen | None = None,
                 slots: MessageSlots | None = None) -> None:
        self._wire = wire
        self._slots = slots
        self._loop = asyncio.get_running_loop()
        self._send_cipher = send_cipher
        self._receive_cipher = receive_cipher
        self._assembler = MessageAssembler(max_message, screen)
        self._messages: deque[bytes | PlanfenceError] = deque()
        self._queued = 0
        self._paused = False
        self._on_message: MessageHandler | None = None
        self._closed: asyncio.Future[PlanfenceError] = \
            asyncio.get_running_loop().create_future()
        self.max_message = max_message
        self.peer_key = peer_key
        self.traffic = wire.traffic
        wire.on_close = self._wire_closed
        wire.on_frame = self._on_frame
        while wire.frames and wire.error is None:  # frames that came with the handshake
            try:
                self._on_frame(wire.frames.popleft())
            except PlanfenceError as exc:
                wire.fail(exc)
        if wire.error is not None:
            self._wire_closed(wire.error)

    @classmethod
    async def wrap(cls, stream: ByteStream, *, initiator: bool, cluster: str,
                   static_private: bytes, remote_static: bytes | None = None,
                   accept_peer: Callable[[bytes], bool] = lambda key: True,
                   max_message: int = DEFAULT_MAX_MESSAGE, screen: Screen | None = None,
                   slots: MessageSlots | None = None) -> NoiseStream:
        """Run the IK handshake over `stream` (an anyio TCP stream on asyncio, which the
        session takes over) and return the session.

        The initiator must pass `remote_static` (the owner's X25519 key from the roster).
        `accept_peer(key)` decides whether the peer's static key may connect; a refused
        peer raises HandshakeError. The caller sets the deadline (anyio.fail_after) and
        closes `stream` on failure. `screen` judges each message longer than one chunk from
        its first chunk (framing.MessageAssembler): what it refuses is never held whole, and
        `receive` returns the screen's error in its place. A message longer than one chunk
        is received only while it holds one of `slots` (shared by an owner's sessions).
        """
        decoder = FrameDecoder(HANDSHAKE_FRAME_CAP)
        wire = _take_over(stream, decoder, Traffic())
        state = HandshakeState(PATTERN, initiator, prologue(cluster), s=static_private,
                               rs=remote_static)
        try:
            if initiator:
                wire.write(encode_frame(state.write_message(b"")))
                state.read_message(await wire.wait_frame())
            else:
                state.read_message(await wire.wait_frame())
                peer = state.remote_static
                if peer is None or not accept_peer(peer):
                    raise HandshakeError("peer's static key is not in the roster")
                wire.write(encode_frame(state.write_message(b"")))
        except (HandshakeError, TransportError):
            raise
        except RemoteProtocolError as exc:
            raise HandshakeError(f"handshake failed: {exc}") from None
        if not state.complete or state.remote_static is None:
            raise HandshakeError("handshake did not complete")
        peer_key = state.remote_static
        if initiator and not accept_peer(peer_key):
            raise HandshakeError("owner's static key is not in the roster")
        c1, c2 = state.split()
        send, receive = (c1, c2) if initiator else (c2, c1)
        decoder.max_frame = MAX_FRAME
        return cls(wire, send, receive, peer_key, max_message, screen, slots)

    @property
    def send_broken(self) -> bool:
        """True once the session can no longer send (it failed or was closed). A message is
        encrypted and handed to the socket in one step, so a cancelled send never leaves
        the peer's nonce behind ours."""
        return self._wire.error is not None

    async def send_message(self, data: bytes) -> None:
        """Send one application message (split into chunks). Raises TransportError.

        Returns without waiting unless the socket's send buffer is full (backpressure).
        """
        self.write_message(data)
        await self._wire.wait_writable()

    def write_message(self, data: bytes) -> None:
        """Encrypt one application message and hand it to the socket, without waiting even
        when its send buffer is full (check `writable`). Raises TransportError."""
        chunks = split_message(data, self.max_message)
        wire = b"".join(encode_frame(self._send_cipher.encrypt_with_ad(b"", c))
                        for c in chunks)
        self._wire.write(wire)
        self.traffic.messages_sent += 1

    @property
    def writable(self) -> bool:
        """False while the socket's send buffer is over its high-water mark."""
        return self._wire._writable is None

    async def wait_writable(self) -> None:
        """Wait until the socket's send buffer drains below its high-water mark."""
        await self._wire.wait_writable()

    def set_receiver(self, on_message: MessageHandler, on_close: CloseHandler) -> None:
        """Hand every message to `on_message` as it arrives (in the socket's callback), and
        the error that ends the session to `on_close`, once. An exception (PlanfenceError)
        from `on_message` ends the session with it."""
        self._on_message = on_message
        self._closed.add_done_callback(lambda done: on_close(done.result()))
        while self._messages:
            message = self._messages.popleft()
            if isinstance(message, PlanfenceError):
                self._wire.fail(message)
                return
            self._deliver(message)

    async def receive_message(self) -> bytes:
        """Receive one whole application message.

        Raises TransportError when the stream ends or breaks, RemoteProtocolError when the
        peer sends an oversize or undecryptable frame, and the screen's error in place of a
        message it refused.
        """
        message = await self.receive()
        if isinstance(message, PlanfenceError):
            raise message
        return message

    async def receive(self) -> bytes | PlanfenceError:
        """The next whole application message, or the screen's error in place of a message
        it refused (the session goes on). Raises as `receive_message` does otherwise."""
        while not self._messages:
            if self._wire.error is not None:
                raise self._wire.error
            await self._wire.wait_readable()
        message = self._messages.popleft()
        if isinstance(message, bytes):
            self._queued -= len(message)
        if self._paused and self._queued < READ_AHEAD // 2:
            self._paused = False
            self._wire.release("backlog")
        return message

    async def wait_closed(self) -> PlanfenceError:
        """Wait until the session ends; returns the error that ended it."""
        return await asyncio.shield(self._closed)

    def _on_frame(self, frame: bytes) -> None:
        held = self._assembler.assembling
        message = self._assembler.add(self._receive_cipher.decrypt_with_ad(b"", frame))
        if self._slots is not None:
            self._count_slot(held, self._assembler.assembling)
        if message is None:
            return
        self.traffic.messages_received += 1
        if self._on_message is not None:
            if isinstance(message, PlanfenceError):
                raise message  # a receiver takes no refusals: the session ends with it
            self._deliver(message)
            return
        self._messages.append(message)
        if isinstance(message, PlanfenceError):
            return
        self._queued += len(message)
        if not self._paused and self._queued > READ_AHEAD:
            self._paused = True  # the reader is behind: the peer meets TCP backpressure
            self._wire.hold("backlog")

    def _count_slot(self, held: bool, holds: bool) -> None:
        """Take a slot when a large message starts (or stop reading until one is given),
        give it back when the message is whole."""
        assert self._slots is not None
        now = self._loop.time()
        if holds and not held:
            if not self._slots.take(self, now, self._slot_granted):
                self._wire.hold("slot")
                self._loop.call_later(self._slots.stall, self._close_stalled)
        elif held and not holds:
            self._slots.give_back(self, now)
            self._wire.release("slot")
        elif holds:
            self._slots.touch(self, now)

    def _slot_granted(self) -> None:
        self._wire.release("slot")

    def _close_stalled(self) -> None:
        """While this session waits for a slot, close the holders that stalled."""
        assert self._slots is not None
        if self._wire.error is not None or not self._slots.waiting(self):
            return
        for holder in self._slots.stalled(self._loop.time()):
            assert isinstance(holder, NoiseStream)
            if holder._wire._held:  # not read by us (backlog, its turn): not its peer's stall
                continue
            self._slots.evicted += 1
            holder._wire.fail(RemoteProtocolError(
                f"no chunk for {self._slots.stall:g} s in the middle of a message while "
                f"other sessions waited to send theirs"))
        if self._slots.waiting(self):
            self._loop.call_later(self._slots.stall, self._close_stalled)

    def _deliver(self, message: bytes) -> None:
        assert self._on_message is not None
        try:
            self._on_message(message)
        except PlanfenceError as exc:
            self._wire.fail(exc)

    def _wire_closed(self, exc: PlanfenceError) -> None:
        if self._slots is not None:
            self._slots.give_back(self, self._loop.time())
        if not self._closed.done():
            self._closed.set_result(exc)

    async def aclose(self) -> None:
        """Close the connection (unsent data is dropped, like an abort)."""
        self.close()

    def close(self) -> None:
        """`aclose` without waiting (it never waits): for callbacks that cannot await."""
        self._wire.fail(TransportError("session closed"))

    def statistics(self) -> dict[str, Any]:
        t = self.traffic
        return {"bytes_sent": t.bytes_sent, "bytes_received": t.bytes_received,
                "messages_sent": t.messages_sent, "messages_received": t.messages_received}


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


async def connect(host: str, port: int, **wrap_args: Any) -> NoiseStream:
    """Open a TCP connection and run the initiator handshake. Raises TransportError or
    HandshakeError; never leaves the socket open on failure."""
    try:
        stream = await anyio.connect_tcp(host, port)
    except OSError as exc:
        # anyio wraps the attempt's own error ("Connection refused") as the cause.
        cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
        raise TransportError(f"cannot connect to {host}:{port}: "
                             f"{cause.strerror or cause}") from None
    try:
        return await NoiseStream.wrap(stream, initiator=True, **wrap_args)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await stream.aclose()
        raise


__all__ = ["NoiseStream", "Traffic", "connect", "prologue", "PlanfenceError", "PATTERN",
           "PROTOCOL_VERSION"]
