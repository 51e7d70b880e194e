"""Framing, sans-IO: 2-byte length-prefixed frames and chunked application messages.

On the wire every handshake message and every Noise transport message is one frame: a
2-byte big-endian length followed by that many bytes. An application message is split into
chunks of at most CHUNK_DATA bytes; each chunk is a flag byte (1 = more follows, 0 = last)
plus the data, and is encrypted as one transport message. Limits are checked before any
buffer grows past them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..core.errors import LocalProtocolError, PlanfenceError, RemoteProtocolError

MAX_FRAME = 65535
TAG_LEN = 16
CHUNK_DATA = MAX_FRAME - TAG_LEN - 1  # 65518
HANDSHAKE_FRAME_CAP = 256  # IK messages with empty payloads are 96 and 48 bytes
DEFAULT_MAX_MESSAGE = 16 * 1024 * 1024
MORE, LAST = 1, 0
PROTOCOL_VERSION = b"planfence-net/1\x00"
PATTERN = "IK"  # the Noise handshake pattern of every session


def prologue(cluster: str) -> bytes:
    """The handshake prologue binding the protocol version and the cluster name."""
    return PROTOCOL_VERSION + cluster.encode()


def encode_frame(data: bytes) -> bytes:
    """Prefix `data` with its 2-byte big-endian length; raises LocalProtocolError if too long."""
    if len(data) > MAX_FRAME:
        raise LocalProtocolError(f"frame of {len(data)} bytes exceeds {MAX_FRAME}")
    return len(data).to_bytes(2, "big") + data


class FrameDecoder:
    """Accumulates received bytes and yields complete frames.

    `max_frame` is the largest frame accepted; a longer length prefix raises
    RemoteProtocolError before its body is buffered.
    """

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def next_frame(self) -> bytes | None:
        """The next complete frame, or None when more bytes are needed."""
        buffer = self._buffer
        if len(buffer) < 2:
            return None
        length = buffer[0] << 8 | buffer[1]
        if length > self.max_frame:
            raise RemoteProtocolError(
                f"frame of {length} bytes exceeds the limit of {self.max_frame}"
            )
        if len(buffer) < 2 + length:
            return None
        frame = bytes(buffer[2 : 2 + length])
        if len(buffer) == 2 + length:
            buffer.clear()  # the usual case: one whole frame was buffered
        else:
            del buffer[: 2 + length]
        return frame

    @property
    def buffered(self) -> int:
        return len(self._buffer)


def split_message(data: bytes, max_message: int = DEFAULT_MAX_MESSAGE) -> list[bytes]:
    """Split an application message into flagged chunk plaintexts (at least one chunk)."""
    return list(iter_chunks(data, max_message))


def iter_chunks(data: bytes, max_message: int = DEFAULT_MAX_MESSAGE) -> Iterator[bytes]:
    """The flagged chunk plaintexts of `data`, one at a time (a sender holding a large
    message need not hold all its chunks too); raises LocalProtocolError up front when
    `data` exceeds `max_message`."""
    if len(data) > max_message:
        raise LocalProtocolError(f"message of {len(data)} bytes exceeds {max_message}")
    return _chunks(memoryview(data))


def _chunks(view: memoryview) -> Iterator[bytes]:
    for start in range(0, max(len(view), 1), CHUNK_DATA):
        flag = LAST if start + CHUNK_DATA >= len(view) else MORE
        yield bytes([flag]) + view[start : start + CHUNK_DATA]


# Judges a message from its first chunk's data: an error refuses the whole message.
Screen = Callable[[bytes], PlanfenceError | None]


class MessageAssembler:
    """Joins decrypted chunks back into application messages, enforcing `max_message`.

    With a `screen`, the first chunk of every message longer than one chunk is shown to it
    before more arrives. When the screen returns an error, `add` returns that error in the
    message's place at once, and the rest of the message is dropped chunk by chunk as it
    arrives (still counted against `max_message`): a message whose first bytes already prove
    it bad is never held or joined whole.
    """

    def __init__(
        self, max_message: int = DEFAULT_MAX_MESSAGE, screen: Screen | None = None
    ) -> None:
        self.max_message = max_message
        self.screen = screen
        self._parts: list[memoryview] = []
        self._size = 0
        self._dropping = False

    @property
    def assembling(self) -> bool:
        """True while the chunks of an unfinished message are held."""
        return bool(self._parts)

    def add(self, chunk: bytes) -> bytes | PlanfenceError | None:
        """Add one chunk plaintext; returns the whole message after its last chunk (or the
        screen's error after its first), else None."""
        if chunk[:1] == b"\x00" and not self._parts and not self._dropping:
            # a whole message in one chunk: the common case, without a copy through a view
            if len(chunk) - 1 > self.max_message:
                raise RemoteProtocolError(f"message exceeds the limit of {self.max_message} bytes")
            return chunk[1:]
        if not chunk or chunk[0] not in (MORE, LAST):
            raise RemoteProtocolError("chunk without a valid continuation flag")
        self._size += len(chunk) - 1
        if self._size > self.max_message:
            raise RemoteProtocolError(f"message exceeds the limit of {self.max_message} bytes")
        last = chunk[0] == LAST
        if self._dropping:
            if last:
                self._dropping, self._size = False, 0
            return None
        data = memoryview(chunk)[1:]
        if not last and not self._parts and self.screen is not None:
            refused = self.screen(bytes(data))
            if refused is not None:
                self._dropping = True
                return refused
        if last and not self._parts:
            self._size = 0
            return bytes(data)
        self._parts.append(data)
        if not last:
            return None
        message = b"".join(self._parts)
        self._parts, self._size = [], 0
        return message
