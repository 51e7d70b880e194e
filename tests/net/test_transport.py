"""NoiseStream over real loopback sockets, in one process: order, size, backpressure, failure.

The stream drives the socket through its own asyncio protocol, so what anyio's stream used
to promise is checked here: messages arrive whole and in order, a reader that falls behind
stops reading (the sender meets TCP backpressure instead of the reader's memory growing),
and a peer's misbehaviour ends the session with a planfence error.
"""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest
from nacl.bindings import crypto_scalarmult_base

from planfence_net.core.errors import PlanfenceError, RemoteProtocolError, TransportError
from planfence_net.net.socketwire import COALESCE_BYTES, TURN_BYTES, Traffic, Wire
from planfence_net.net.transport import READ_AHEAD
from planfence_net.protocol.framing import CHUNK_DATA, MAX_FRAME, FrameDecoder, encode_frame
from support.noise_pair import CLIENT_KEY, pair

pytestmark = pytest.mark.anyio


async def test_messages_arrive_whole_and_in_order() -> None:
    big = bytes(range(256)) * (3 * CHUNK_DATA // 256 + 1)  # four chunks
    async with pair() as (client, owner):
        for message in (b"one", big, b"", b"three"):
            await client.send_message(message)
        assert [await owner.receive_message() for _ in range(4)] == [b"one", big, b"", b"three"]
        assert owner.peer_key == crypto_scalarmult_base(CLIENT_KEY)
        assert client.traffic.messages_sent == owner.traffic.messages_received == 4


async def test_several_messages_written_at_once_arrive_each_whole_and_in_order() -> None:
    big = bytes(range(256)) * (CHUNK_DATA // 128)  # two chunks
    async with pair() as (client, owner):
        owner.write_messages([b"one", big, b"", b"four"])
        await client.send_message(b"after")  # the other way: the session goes on
        assert [await client.receive_message() for _ in range(4)] == [b"one", big, b"", b"four"]
        assert await owner.receive_message() == b"after"
        assert (owner.traffic.messages_sent, client.traffic.messages_received) == (4, 4)


async def test_a_reader_that_falls_behind_stops_reading() -> None:
    """The owner takes nothing: it holds at most READ_AHEAD plus one message, and the
    client's socket stops accepting data; then everything arrives, in order."""
    message = bytes(16 * 1024)
    async with pair() as (client, owner):
        sent = 0
        while client.writable and sent < 1000:  # until the kernel buffers fill (16 MB max)
            client.write_message(message + sent.to_bytes(4, "big"))
            sent += 1
            await anyio.lowlevel.checkpoint()  # let the owner's protocol read what it will
        assert not client.writable
        assert sent * len(message) > READ_AHEAD  # the kernel took more than the owner holds
        assert owner._queued <= READ_AHEAD + len(message) + 4
        for i in range(sent):
            assert (await owner.receive_message())[-4:] == i.to_bytes(4, "big")


async def test_pushed_messages_and_a_handler_error_end_the_session() -> None:
    got: list[bytes] = []
    ended: list[PlanfenceError] = []

    def on_message(data: bytes) -> None:
        if data == b"bad":
            raise RemoteProtocolError("refused by the handler")
        got.append(data)

    async with pair() as (client, owner):
        await client.send_message(b"early")  # queued before the handler is set
        await anyio.wait_all_tasks_blocked()
        owner.set_receiver(lambda event: on_message(event.data), ended.append)  # type: ignore[union-attr]
        for message in (b"a", b"b", b"bad", b"never"):
            await client.send_message(message)
        error = await owner.wait_closed()
        assert got == [b"early", b"a", b"b"]
        assert isinstance(error, RemoteProtocolError) and owner.send_broken
        await anyio.wait_all_tasks_blocked()
        assert ended == [error]
        with pytest.raises(RemoteProtocolError):
            await owner.send_message(b"after")


async def test_a_peer_gone_is_a_transport_error() -> None:
    async with pair() as (client, owner):
        await owner.aclose()
        with pytest.raises(TransportError):
            await client.receive_message()
        with pytest.raises(TransportError):
            await client.send_message(b"x")


class _Socket:
    """Stands for an asyncio transport: records whether it is reading."""

    def __init__(self) -> None:
        self.reading = True

    def pause_reading(self) -> None:
        assert self.reading
        self.reading = False

    def resume_reading(self) -> None:
        assert not self.reading
        self.reading = True

    def is_closing(self) -> bool:
        return False


async def test_a_session_that_reads_a_lot_lets_the_loop_run_the_others_first() -> None:
    """After TURN_BYTES a session stops reading until the event loop has run everyone else's
    callbacks (libuv would read on up to 8 MiB in one go: four flooding sessions held other
    peers' pings up to 118 ms); a hold for the reader's backlog outlasts the turn."""
    socket = _Socket()
    frames = FrameDecoder()
    wire = Wire(frames.feed, Traffic())
    wire.transport = socket  # type: ignore[assignment]
    frame = encode_frame(bytes(MAX_FRAME))
    under = TURN_BYTES // len(frame)
    wire.data_received(frame * under)
    assert socket.reading
    wire.data_received(frame)
    assert not socket.reading
    wire.hold("backlog")
    await anyio.lowlevel.checkpoint()  # one loop turn: the turn is over, the backlog is not
    assert not socket.reading
    wire.release("backlog")
    assert socket.reading
    assert [frames.next_frame() for _ in range(under + 2)] == [frame[2:]] * (under + 1) + [None]


async def test_answers_to_one_reads_requests_leave_in_one_write_in_order() -> None:
    """An answerer in the socket's callback (the owner's `set_answer_now`): the answers to
    every message one read delivered are handed to the socket in one write, in order; a
    message it declines, and every one after it, waits for `receive`, in order."""
    stalled: list[int] = []

    def answer(data: bytes) -> bool:
        if data.startswith(b"later"):
            return False
        owner.write_message(b"re:" + data)
        return True

    async with pair() as (client, owner):
        owner.set_answer_now(answer, stalled.append)
        writes = owner.traffic.writes
        client.write_messages([b"q%d" % i for i in range(8)])  # one write: one read
        assert [await client.receive_message() for _ in range(8)] == [
            b"re:q%d" % i for i in range(8)
        ]
        assert owner.traffic.writes == writes + 1
        assert owner.traffic.messages_sent == 8 and stalled == []
        client.write_messages([b"a", b"later1", b"b"])
        assert await client.receive_message() == b"re:a"
        assert [await owner.receive_message() for _ in range(2)] == [b"later1", b"b"]


async def test_a_clients_writes_of_one_loop_round_leave_in_one_write() -> None:
    """An initiator's writes wait for the end of the event-loop round and leave together
    (executors sharing a session send their requests to an owner in one write), in order;
    once they reach COALESCE_BYTES they leave at once."""
    async with pair() as (client, owner):
        writes = client.traffic.writes
        for i in range(5):
            client.write_message(b"m%d" % i)
        assert client.traffic.writes == writes  # held until the round ends
        assert [await owner.receive_message() for _ in range(5)] == [b"m%d" % i for i in range(5)]
        assert client.traffic.writes == writes + 1
        big = bytes(COALESCE_BYTES)
        client.write_message(b"small")
        client.write_message(big)  # over the bound: both leave now, in one write
        assert client.traffic.writes == writes + 2
        assert [await owner.receive_message() for _ in range(2)] == [b"small", big]
        assert client.traffic.messages_sent == owner.traffic.messages_received == 7


async def test_a_message_written_just_before_close_still_leaves() -> None:
    """Closing a client stream hands its held writes to the socket first (as a write made
    before a close always did), then ends the session."""
    async with pair() as (client, owner):
        client.write_message(b"last words")
        await client.aclose()
        assert await owner.receive_message() == b"last words"
        with pytest.raises(TransportError):
            await owner.receive_message()
