"""Noise sessions over byte streams: the I/O edge of the protocol core.

`NoiseStream.wrap()` runs the Noise IK handshake over an anyio byte stream and returns a
stream of whole application messages. This is the one place where anyio and socket errors
are translated into planfence errors (TransportError, RemoteProtocolError, HandshakeError).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import anyio
from anyio.abc import ByteStream

from .errors import HandshakeError, PlanfenceError, RemoteProtocolError, TransportError
from .framing import (DEFAULT_MAX_MESSAGE, HANDSHAKE_FRAME_CAP, MAX_FRAME, FrameDecoder,
                      MessageAssembler, encode_frame, split_message)
from .noise import CipherState, HandshakeState

PROTOCOL_VERSION = b"planfence-net/1\x00"
PATTERN = "IK"
_STREAM_ERRORS = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError,
                  OSError)


def prologue(cluster: str) -> bytes:
    """The handshake prologue binding the protocol version and the cluster name."""
    return PROTOCOL_VERSION + cluster.encode()


@dataclass(slots=True)
class Traffic:
    """Bytes and messages on one connection, counted at the socket (encrypted, framed)."""

    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0


class NoiseStream:
    """Whole application messages over an authenticated, encrypted byte stream."""

    def __init__(self, stream: ByteStream, decoder: FrameDecoder, send_cipher: CipherState,
                 receive_cipher: CipherState, peer_key: bytes, traffic: Traffic,
                 max_message: int) -> None:
        self._stream = stream
        self._decoder = decoder
        self._send_cipher = send_cipher
        self._receive_cipher = receive_cipher
        self._assembler = MessageAssembler(max_message)
        self._send_lock = anyio.Lock()
        self._send_broken = False
        self.max_message = max_message
        self.peer_key = peer_key
        self.traffic = traffic

    @classmethod
    async def wrap(cls, stream: ByteStream, *, initiator: bool, cluster: str,
                   static_private: bytes, remote_static: bytes | None = None,
                   accept_peer: Callable[[bytes], bool] = lambda key: True,
                   max_message: int = DEFAULT_MAX_MESSAGE) -> NoiseStream:
        """Run the IK handshake over `stream` and return the session.

        The initiator must pass `remote_static` (the owner's X25519 key from the roster).
        `accept_peer(key)` decides whether the peer's static key may connect; a refused
        peer raises HandshakeError. The caller sets the deadline (anyio.fail_after) and
        closes `stream` on failure.
        """
        traffic = Traffic()
        decoder = FrameDecoder(HANDSHAKE_FRAME_CAP)
        state = HandshakeState(PATTERN, initiator, prologue(cluster), s=static_private,
                               rs=remote_static)
        try:
            if initiator:
                await _send_raw(stream, state.write_message(b""), traffic)
                state.read_message(await _receive_frame(stream, decoder, traffic))
            else:
                state.read_message(await _receive_frame(stream, decoder, traffic))
                peer = state.remote_static
                if peer is None or not accept_peer(peer):
                    raise HandshakeError("peer's static key is not in the roster")
                await _send_raw(stream, state.write_message(b""), traffic)
        except HandshakeError:
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
        return cls(stream, decoder, send, receive, peer_key, traffic, max_message)

    @property
    def send_broken(self) -> bool:
        """True once a send was cancelled or failed after encrypting: the peer's nonce no
        longer matches ours, so nothing more can be sent on this stream."""
        return self._send_broken

    async def send_message(self, data: bytes) -> None:
        """Send one application message (split into chunks). Raises TransportError.

        A send cancelled after its chunks were encrypted (and their nonces used) breaks the
        stream for sending: later sends raise TransportError instead of desynchronising it.
        """
        chunks = split_message(data, self.max_message)
        async with self._send_lock:
            if self._send_broken:
                raise TransportError("an earlier send on this session was interrupted")
            wire = b"".join(encode_frame(self._send_cipher.encrypt_with_ad(b"", c))
                            for c in chunks)
            try:
                await _send_raw_bytes(self._stream, wire, self.traffic)
            except BaseException:
                self._send_broken = True
                raise
            self.traffic.messages_sent += 1

    async def receive_message(self) -> bytes:
        """Receive one whole application message.

        Raises TransportError when the stream ends or breaks, RemoteProtocolError when the
        peer sends an oversize or undecryptable frame.
        """
        while True:
            frame = await _receive_frame(self._stream, self._decoder, self.traffic)
            message = self._assembler.add(self._receive_cipher.decrypt_with_ad(b"", frame))
            if message is not None:
                self.traffic.messages_received += 1
                return message

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self._stream.aclose()
            except _STREAM_ERRORS:
                pass

    def statistics(self) -> dict[str, Any]:
        t = self.traffic
        return {"bytes_sent": t.bytes_sent, "bytes_received": t.bytes_received,
                "messages_sent": t.messages_sent, "messages_received": t.messages_received}


async def _send_raw(stream: ByteStream, message: bytes, traffic: Traffic) -> None:
    await _send_raw_bytes(stream, encode_frame(message), traffic)


async def _send_raw_bytes(stream: ByteStream, data: bytes, traffic: Traffic) -> None:
    try:
        await stream.send(data)
    except _STREAM_ERRORS as exc:
        raise TransportError(f"connection lost while sending: {exc!r}") from None
    traffic.bytes_sent += len(data)


async def _receive_frame(stream: ByteStream, decoder: FrameDecoder, traffic: Traffic) -> bytes:
    while True:
        frame = decoder.next_frame()
        if frame is not None:
            return frame
        try:
            data = await stream.receive()
        except _STREAM_ERRORS as exc:
            raise TransportError(f"connection closed: {exc!r}" if str(exc) else
                                 "connection closed by peer") from None
        traffic.bytes_received += len(data)
        decoder.feed(data)


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


__all__ = ["NoiseStream", "Traffic", "connect", "prologue", "PlanfenceError"]
