"""Noise sessions over TCP: the I/O edge of the protocol core.

`NoiseStream.wrap()` runs the Noise IK handshake over a TCP stream and returns a stream of
whole application messages. This is the one place where socket errors are translated into
planfence errors (TransportError, RemoteProtocolError, HandshakeError).

The stream drives the socket through a bare asyncio protocol (`Wire`) instead of anyio's
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
from typing import Any

import anyio
from anyio.abc import ByteStream

from ..core.errors import HandshakeError, PlanfenceError, RemoteProtocolError, TransportError
from ..protocol.framing import (
    DEFAULT_MAX_MESSAGE,
    HANDSHAKE_FRAME_CAP,
    MAX_FRAME,
    PATTERN,
    PROTOCOL_VERSION,
    FrameDecoder,
    MessageAssembler,
    Screen,
    encode_frame,
    prologue,
    split_message,
)
from ..protocol.noise import CipherState, HandshakeState
from .slots import MessageSlots
from .socketwire import CloseHandler, Traffic, Wire, take_over

READ_AHEAD = 256 * 1024  # received messages nobody has taken yet before we stop reading

MessageHandler = Callable[[bytes], None]


class NoiseStream:
    """Whole application messages over an authenticated, encrypted TCP connection."""

    def __init__(
        self,
        wire: Wire,
        send_cipher: CipherState,
        receive_cipher: CipherState,
        peer_key: bytes,
        max_message: int,
        screen: Screen | None = None,
        slots: MessageSlots | None = None,
    ) -> None:
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
        self._closed: asyncio.Future[PlanfenceError] = asyncio.get_running_loop().create_future()
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
    async def wrap(
        cls,
        stream: ByteStream,
        *,
        initiator: bool,
        cluster: str,
        static_private: bytes,
        remote_static: bytes | None = None,
        accept_peer: Callable[[bytes], bool] = lambda key: True,
        max_message: int = DEFAULT_MAX_MESSAGE,
        screen: Screen | None = None,
        slots: MessageSlots | None = None,
    ) -> NoiseStream:
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
        wire = take_over(stream, decoder, Traffic())
        state = HandshakeState(
            PATTERN, initiator, prologue(cluster), s=static_private, rs=remote_static
        )
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
        wire = b"".join(encode_frame(self._send_cipher.encrypt_with_ad(b"", c)) for c in chunks)
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
        if self._slots is not None and (held or self._assembler.assembling):
            self._count_slot(held, self._assembler.assembling)  # a large message only
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
            if not holder._wire.reading:  # we paused it (backlog, turn): not its peer's stall
                continue
            self._slots.evicted += 1
            holder._wire.fail(
                RemoteProtocolError(
                    f"no chunk for {self._slots.stall:g} s in the middle of a message while "
                    f"other sessions waited to send theirs"
                )
            )
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
        return {
            "bytes_sent": t.bytes_sent,
            "bytes_received": t.bytes_received,
            "messages_sent": t.messages_sent,
            "messages_received": t.messages_received,
        }


async def connect(host: str, port: int, **wrap_args: Any) -> NoiseStream:
    """Open a TCP connection and run the initiator handshake. Raises TransportError or
    HandshakeError; never leaves the socket open on failure."""
    try:
        stream = await anyio.connect_tcp(host, port)
    except OSError as exc:
        # anyio wraps the attempt's own error ("Connection refused") as the cause.
        cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
        raise TransportError(
            f"cannot connect to {host}:{port}: {cause.strerror or cause}"
        ) from None
    try:
        return await NoiseStream.wrap(stream, initiator=True, **wrap_args)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await stream.aclose()
        raise


__all__ = [
    "NoiseStream",
    "Traffic",
    "connect",
    "prologue",
    "PlanfenceError",
    "PATTERN",
    "PROTOCOL_VERSION",
]
