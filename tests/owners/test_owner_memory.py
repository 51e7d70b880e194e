"""What a request can make a real owner process allocate is bounded by the request's op.

Replies are sized before they are built (repeated ids and keys collapse, records that do
not fit are listed as omitted); every acknowledged record can be read back in one reply;
a put's body is kept byte for byte; a request is decoded once and only as far as its op
needs. Owner memory is read from /proc (VmHWM, the peak resident set).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import msgpack
import pytest

from planfence_net.core.records import wire_size_bound
from planfence_net.net.api import get_records
from planfence_net.net.client import open_session
from planfence_net.owners.replies import ONE_RECORD
from planfence_net.owners.sessions import _decode
from planfence_net.protocol.framing import DEFAULT_MAX_MESSAGE, split_message
from planfence_net.protocol.messages import BadRequest
from planfence_net.protocol.requestread import REQUESTS
from support.cluster import ClusterHandle
from support.owner_client import BAD_SHAPE, DEADLINE, RawClient, check_record

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set size (VmHWM) in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


async def put_bodies(h: ClusterHandle, bodies: dict[str, bytes]) -> dict[str, bytes]:
    """Write each key's body (bin) as `reqs`; returns key -> record id."""
    ids = {}
    async with open_session(h.roster, h.identity("reqs"), "reqs") as writer:
        for key, body in bodies.items():
            ids[key] = (await writer.request("put", {"key": key, "body": body}))["id"]
    return ids


# -- D4: reply sizes ----------------------------------------------------------------------------


async def test_repeated_ids_and_keys_collapse_and_big_replies_stop_at_the_limit(
    live_cluster: ClusterHandle,
) -> None:
    h = live_cluster
    pid = h.owner_pid("reqs")
    with anyio.fail_after(DEADLINE):
        ids = await put_bodies(h, {f"req/big{i}": bytes([i]) * MIB for i in range(20)})
        big0 = ids["req/big0"]
        async with open_session(h.roster, h.identity("planner"), "reqs") as reader:
            once = await reader.request("get", {"ids": [big0] * 1024})
            assert [check_record(h, w, big0).key for w in once["records"]] == ["req/big0"]
            assert "omitted" not in once
            heads = await reader.request(
                "heads", {"keys": ["req/big0"] * 4096, "expect": {"req/big0": bytes(32)}}
            )
            assert heads["heads"] == [["req/big0", big0, 1]]
            assert [check_record(h, w).id for w in heads["records"]] == [big0]
            every = list(ids.values())
            many = await reader.request("get", {"ids": every})
    got = [check_record(h, w).id for w in many["records"]]
    assert got == every[:15] and many["omitted"] == every[15:]  # 15 MiB fit in 16 MiB
    assert peak_rss_mb(pid) < 300
    # A client asks again for what was omitted: all 20 arrive, in two replies.
    with anyio.fail_after(DEADLINE):
        fetched = await get_records(h.roster, h.identity("planner"), every)
    assert [r.id for r in fetched] == every


# -- D5: every acknowledged record can be read back, as written ---------------------------------


async def test_a_put_body_is_stored_as_sent_and_readable_in_one_reply(
    live_cluster: ClusterHandle,
) -> None:
    h = live_cluster
    largest = DEFAULT_MAX_MESSAGE - ONE_RECORD - wire_size_bound("req/max", "reqs", "fact", [], 0)
    with anyio.fail_after(DEADLINE):
        writer = await RawClient.session(h, as_agent="reqs")
        floats = msgpack.packb(
            [2, "put", {"key": "req/f32", "body": [1.5] * 1000}], use_single_float=True
        )
        assert len(floats) < 6000  # 5 bytes a float32
        put = await writer.call(floats)
        assert put[:2] == [2, True]
        # body as a bin: 5 header bytes (bin 32) + payload
        over = await writer.call(
            msgpack.packb([3, "put", {"key": "req/max", "body": bytes(largest - 5 + 1)}])
        )
        fits = await writer.call(
            msgpack.packb([4, "put", {"key": "req/max", "body": bytes(largest - 5)}])
        )
        await writer.aclose()
        assert over[:2] == [3, False] and over[2]["code"] == "too_large"
        assert over[2]["message"].endswith(
            f"could not be read back in one reply of at most {DEFAULT_MAX_MESSAGE} bytes"
        )
        assert fits[:2] == [4, True], fits
        async with open_session(h.roster, h.identity("planner"), "reqs") as reader:
            got = await reader.request("get", {"ids": [fits[2]["id"]]})
            small = await reader.request("get", {"ids": [put[2]["id"]]})
    (biggest,) = (check_record(h, w) for w in got["records"])
    (f32,) = (check_record(h, w) for w in small["records"])
    assert f32.body_raw == msgpack.packb([1.5] * 1000, use_single_float=True)
    assert f32.size == 3 + 5 * 1000
    assert biggest.size == largest and "omitted" not in got


# -- D6: decoded once, only as far as the op needs ------------------------------------------------


async def test_a_request_full_of_empty_arrays_costs_the_owner_nothing(
    live_cluster: ClusterHandle,
) -> None:
    h = live_cluster
    pid = h.owner_pid("reqs")
    count = DEFAULT_MAX_MESSAGE - 100  # a 16 MiB message of empty arrays (1 byte each)
    arrays = b"\xdd" + count.to_bytes(4, "big") + b"\x90" * count
    with anyio.fail_after(DEADLINE):
        client = await RawClient.session(h)
        unknown = await client.call(b"\x93\x01\xa5heads\x82\xa4keys\x91\xa5req/a\xa4junk" + arrays)
        assert unknown == [
            1,
            False,
            {
                "code": "bad_request",
                "message": "unknown argument 'junk': only a string, id or number is ignored",
            },
        ]
        refused = await client.call(b"\x93\x02\xa5heads\x81\xa4keys" + arrays)
        assert refused == [
            2,
            False,
            {"code": "too_large", "message": "at most 4096 keys per request"},
        ]
        await client.aclose()
    assert peak_rss_mb(pid) < 300


async def test_a_request_bad_from_its_first_chunk_is_answered_before_the_rest_arrives(
    live_cluster: ClusterHandle,
) -> None:
    """The owner answers a 16 MiB flood from its first chunk and drops the rest as it comes,
    so it never holds the message whole (four such floods at once had held every other
    peer's ping for up to 118 ms); the session goes on after the dropped message."""
    h = live_cluster
    count = DEFAULT_MAX_MESSAGE - 100
    flood = b"\x93\x07\xa5heads\x81\xa4keys\xdd" + count.to_bytes(4, "big") + b"\x90" * count
    chunks = split_message(flood)
    with anyio.fail_after(DEADLINE):
        client = await RawClient.session(h)
        await client.send_chunks(chunks[:1])  # the rest is not sent yet
        early = await client.receive_message()
        assert early is not None and msgpack.unpackb(early) == [
            7,
            False,
            {"code": "too_large", "message": "at most 4096 keys per request"},
        ]
        await client.send_chunks(chunks[1:])
        pong = await client.call(msgpack.packb([8, "ping", {}]))
        assert pong[:2] == [8, True] and pong[2]["agent"] == "reqs"
        await client.aclose()


async def test_large_messages_being_received_are_bounded_across_sessions(
    live_cluster: ClusterHandle,
) -> None:
    """Twenty sessions each send all but the last chunk of a 16 MiB put (not this peer's to
    write, but only the whole message could show it): the owner receives four such messages
    at a time and stops reading the other sessions, so its peak RSS stays under 300 MB (it
    used to hold 16 MiB for every session). The owner serves small requests meanwhile."""
    h = live_cluster
    pid = h.owner_pid("reqs")
    size = DEFAULT_MAX_MESSAGE - 100
    put = b"\x93\x01\xa3put\x82\xa3key\xa5req/a\xa4body\xc6" + size.to_bytes(4, "big") + bytes(size)
    chunks = split_message(put)[:-1]

    async def send_all_but_last(client: RawClient) -> None:
        for chunk in chunks:  # one at a time: the test holds no 16 MiB per session either
            await client.send_chunks([chunk])

    with anyio.fail_after(DEADLINE):
        clients = [await RawClient.session(h) for _ in range(20)]
        async with open_session(h.roster, h.identity("ops"), "reqs") as watcher:
            async with anyio.create_task_group() as tg:
                for client in clients:
                    tg.start_soon(send_all_but_last, client)
                while (await watcher.request("stats"))["large_message_waits"] < 16:
                    await anyio.sleep(0.05)  # the owner's own count is the only witness
                assert (await watcher.request("ping"))["agent"] == "reqs"
                held_mb = peak_rss_mb(pid)
                tg.cancel_scope.cancel()
            for client in clients:
                await client.aclose()
            assert (await watcher.request("ping"))["agent"] == "reqs"
    assert held_mb < 300


# -- D10: a malformed request is answered with its own req_id -----------------------------------


async def test_bad_arguments_are_answered_with_the_request_id(live_cluster: ClusterHandle) -> None:
    h = live_cluster
    with anyio.fail_after(DEADLINE):
        client = await RawClient.session(h)
        int_key = await client.call(b"\x93\x05\xa4ping\x81\x01\x02")
        truncated = await client.call(msgpack.packb([6, "heads", {"keys": ["req/a"]}])[:-2])
        shape = await client.call(msgpack.packb([7, "ping"]))
        await client.aclose()
    assert int_key == [
        5,
        False,
        {"code": "bad_request", "message": "invalid msgpack: argument names must be strings"},
    ]
    assert truncated == [
        6,
        False,
        {"code": "bad_request", "message": "invalid msgpack: No more data to unpack."},
    ]
    assert shape == [7, False, {"code": "bad_request", "message": BAD_SHAPE}]


def test_a_refused_request_keeps_nothing_of_its_bytes() -> None:
    """The error a session keeps until it is answered holds no traceback: its frames held
    the request's bytes and the reader's copy (in a 4-sender flood of 16 MiB requests, the
    owner's peak RSS went from 135 MB to 1108 MB)."""
    count = DEFAULT_MAX_MESSAGE - 100
    flood = b"\x93\x02\xa5heads\x81\xa4keys\xdd" + count.to_bytes(4, "big") + b"\x90" * count
    refused = _decode(flood, REQUESTS)
    assert isinstance(refused, BadRequest) and refused.code == "too_large"
    assert refused.__traceback__ is None and refused.__context__ is None
