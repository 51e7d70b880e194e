"""A client written from docs/PROTOCOL.md with only the Noise core, and helpers shared by the
owner tests: it can send what the real client never would (garbage, bad frames, bad chunks,
malformed requests)."""

from __future__ import annotations

import hashlib
from typing import Any

import anyio
import msgpack
from anyio.abc import SocketStream
from nacl.bindings import crypto_sign_ed25519_pk_to_curve25519
from nacl.signing import SigningKey

from planfence_net.core.records import Record, record_from_wire, verify
from planfence_net.net.client import Session, open_session
from planfence_net.protocol.framing import FrameDecoder, encode_frame, split_message
from planfence_net.protocol.noise import CipherState, HandshakeState
from support.cluster import ClusterHandle

DEADLINE = 20.0
STATS_KEYS = {
    "agent",
    "sessions",
    "in_flight",
    "requests_served",
    "refused_peers",
    "keys",
    "connections",
    "refused_connections",
    "evicted_connections",
    "accept_errors",
    "dropped_subscribers",
    "log_suppressed",
    "log_failed_writes",
    "large_message_waits",
    "stalled_senders",
    "unread_replies",
    "reply_bytes_held",
    "request_bytes_held",
    "last_seq_by_owner",
    "last_seq",
    "commits",
    "records_written",
}
BAD_SHAPE = "a request is [req_id: int, op: str, args: map]"
DECRYPT_FAILED = "decryption failed: forged, corrupted or out of order"


def check_record(h: ClusterHandle, wire: Any, expected_id: bytes | None = None) -> Record:
    """Parse and fully verify a record from the wire (id, signature, ownership)."""
    record = record_from_wire(wire)
    verify(
        record,
        public_key_of=h.roster.public_key_of,
        owner_of=h.roster.owner_of,
        expected_id=expected_id,
    )
    return record


def fingerprint_of(signing_key: SigningKey) -> str:
    """What the owner logs for a refused peer: BLAKE2b-64 of its X25519 static key, as hex."""
    noise_key = crypto_sign_ed25519_pk_to_curve25519(bytes(signing_key.verify_key))
    return hashlib.blake2b(noise_key, digest_size=8).hexdigest()


# -- a client written from the protocol document ------------------------------------------------


class RawClient:
    """TCP + Noise IK + 2-byte frames + flagged chunks, built from the Noise core by hand."""

    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder(256)
        self.send_cipher: CipherState | None = None
        self.receive_cipher: CipherState | None = None

    @classmethod
    async def tcp(cls, h: ClusterHandle, owner: str = "reqs") -> RawClient:
        return cls(await anyio.connect_tcp("127.0.0.1", h.port(owner)))

    @classmethod
    async def session(
        cls,
        h: ClusterHandle,
        as_agent: str = "planner",
        owner: str = "reqs",
        cluster: str | None = None,
    ) -> RawClient:
        client = await cls.tcp(h, owner)
        await client.handshake(
            h.identity(as_agent).noise_private,
            h.roster.agent(owner).noise_key,
            cluster if cluster is not None else h.roster.cluster,
        )
        return client

    @property
    def local_port(self) -> int:
        return int(self.stream.extra(anyio.abc.SocketAttribute.local_port))

    async def handshake(self, static_private: bytes, owner_key: bytes, cluster: str) -> None:
        state = HandshakeState(
            "IK", True, b"planfence-net/1\x00" + cluster.encode(), s=static_private, rs=owner_key
        )
        first = state.write_message(b"")
        assert len(first) == 96
        await self.stream.send(encode_frame(first))
        second = await self.read_frame()
        assert second is not None and len(second) == 48
        state.read_message(second)
        self.send_cipher, self.receive_cipher = state.split()
        self.decoder.max_frame = 65535

    async def read_frame(self) -> bytes | None:
        """The next frame, or None when the owner closed the connection."""
        while (frame := self.decoder.next_frame()) is None:
            try:
                self.decoder.feed(await self.stream.receive())
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
                return None
        return frame

    async def send_chunks(self, chunks: list[bytes]) -> None:
        assert self.send_cipher is not None
        await self.stream.send(
            b"".join(encode_frame(self.send_cipher.encrypt_with_ad(b"", c)) for c in chunks)
        )

    async def send_message(self, data: bytes) -> None:
        await self.send_chunks(split_message(data))

    async def receive_message(self) -> bytes | None:
        assert self.receive_cipher is not None
        parts = []
        while True:
            frame = await self.read_frame()
            if frame is None:
                return None
            chunk = self.receive_cipher.decrypt_with_ad(b"", frame)
            parts.append(chunk[1:])
            if chunk[0] == 0:
                return b"".join(parts)

    async def call(self, data: bytes) -> list[Any]:
        """Send one raw message and return the decoded response array."""
        await self.send_message(data)
        reply = await self.receive_message()
        assert reply is not None, "owner closed the session instead of answering"
        value = msgpack.unpackb(reply, raw=False)
        assert isinstance(value, list)
        return value

    async def wait_closed(self) -> None:
        """Wait until the owner closes the connection (ignoring anything it still sends)."""
        while await self.read_frame() is not None:
            pass

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send(data)

    async def aclose(self) -> None:
        await self.stream.aclose()


async def assert_serving(h: ClusterHandle, pid: int, bystander: Session, what: str) -> None:
    """The owner process is the same one, alive, and serves old and new sessions."""
    assert h.owner_pid("reqs") == pid, f"owner restarted or died after {what}"
    assert (await bystander.request("ping"))["agent"] == "reqs", what
    async with open_session(h.roster, h.identity("inventory"), "reqs") as fresh:
        assert (await fresh.request("ping"))["agent"] == "reqs", what
