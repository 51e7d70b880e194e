"""Framing, sans-IO: 2-byte length-prefixed frames and chunked application messages.

On the wire every handshake message and every Noise transport message is one frame: a
2-byte big-endian length followed by that many bytes. An application message is split into
chunks of at most CHUNK_DATA bytes; each chunk is a flag byte (1 = more follows, 0 = last)
plus the data, and is encrypted as one transport message. Limits are checked before any
buffer grows past them.
"""

from __future__ import annotations

from collections.abc import Iterator

from .errors import LocalProtocolError, RemoteProtocolError

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
        if len(self._buffer) < 2:
            return None
        length = int.from_bytes(self._buffer[:2], "big")
        if length > self.max_frame:
            raise RemoteProtocolError(f"frame of {length} bytes exceeds the limit of "
                                      f"{self.max_frame}")
        if len(self._buffer) < 2 + length:
            return None
        frame = bytes(self._buffer[2:2 + length])
        del self._buffer[:2 + length]
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
        yield bytes([flag]) + view[start:start + CHUNK_DATA]


class MessageAssembler:
    """Joins decrypted chunks back into application messages, enforcing `max_message`."""

    def __init__(self, max_message: int = DEFAULT_MAX_MESSAGE) -> None:
        self.max_message = max_message
        self._parts: list[bytes] = []
        self._size = 0

    def add(self, chunk: bytes) -> bytes | None:
        """Add one chunk plaintext; returns the whole message after its last chunk, else None."""
        if not chunk or chunk[0] not in (MORE, LAST):
            raise RemoteProtocolError("chunk without a valid continuation flag")
        self._size += len(chunk) - 1
        if self._size > self.max_message:
            raise RemoteProtocolError(f"message exceeds the limit of {self.max_message} bytes")
        self._parts.append(chunk[1:])
        if chunk[0] == MORE:
            return None
        message = b"".join(self._parts)
        self._parts, self._size = [], 0
        return message
