"""Abuse of a real owner process on 127.0.0.1: whatever a peer sends, the daemon never dies.

Uses `owner_client.RawClient`, written from docs/PROTOCOL.md, to send what the real client
never would: garbage, bad handshakes, bad frames, bad chunks, malformed requests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import msgpack
import pytest
from nacl.signing import SigningKey

from planfence_net.core.identity import Identity
from planfence_net.net.client import open_session
from planfence_net.protocol.framing import CHUNK_DATA, encode_frame
from planfence_net.protocol.noise import HandshakeState
from support.cluster import ClusterHandle
from support.owner_client import BAD_SHAPE, DEADLINE, DECRYPT_FAILED, RawClient, assert_serving

pytestmark = pytest.mark.anyio


# -- abuse: the daemon never dies ---------------------------------------------------------------


async def proven_session(h: ClusterHandle) -> RawClient:
    """A raw session that has proven itself with one answered ping (a session whose first
    transport message is bad never becomes a session: see test_owner_limits)."""
    client = await RawClient.session(h)
    assert (await client.call(msgpack.packb([0, "ping", {}])))[:2] == [0, True]
    return client


async def _garbage_http(h: ClusterHandle) -> tuple[int, str, str]:
    raw = await RawClient.tcp(h)
    port = raw.local_port
    await raw.send_raw(b"GET / HTTP/1.1\r\nHost: reqs\r\n\r\n")
    await raw.wait_closed()
    await raw.aclose()
    return (
        port,
        "handshake_failed",
        "handshake failed: frame of 18245 bytes exceeds the limit of 256",
    )


async def _oversize_prefix(h: ClusterHandle) -> tuple[int, str, str]:
    raw = await RawClient.tcp(h)
    port = raw.local_port
    await raw.send_raw(b"\xff\xff" + b"\x00" * 100)
    await raw.wait_closed()
    await raw.aclose()
    return (
        port,
        "handshake_failed",
        "handshake failed: frame of 65535 bytes exceeds the limit of 256",
    )


async def _garbage_handshake(h: ClusterHandle) -> tuple[int, str, str]:
    raw = await RawClient.tcp(h)
    port = raw.local_port
    await raw.send_raw(encode_frame(bytes(range(1, 97))))
    await raw.wait_closed()
    await raw.aclose()
    return port, "handshake_failed", DECRYPT_FAILED


async def _short_handshake(h: ClusterHandle) -> tuple[int, str, str]:
    raw = await RawClient.tcp(h)
    port = raw.local_port
    await raw.send_raw(encode_frame(b"x" * 10))
    await raw.wait_closed()
    await raw.aclose()
    return port, "handshake_failed", "handshake message of 10 bytes has the wrong length"


async def _wrong_cluster(h: ClusterHandle) -> tuple[int, str, str]:
    raw = await RawClient.tcp(h)
    port = raw.local_port
    state = HandshakeState(
        "IK",
        True,
        b"planfence-net/1\x00other-cluster",
        s=h.identity("planner").noise_private,
        rs=h.roster.agent("reqs").noise_key,
    )
    await raw.send_raw(encode_frame(state.write_message(b"")))
    await raw.wait_closed()
    await raw.aclose()
    return port, "handshake_failed", DECRYPT_FAILED


async def _half_handshake(h: ClusterHandle) -> tuple[int, str, str]:
    raw = await RawClient.tcp(h)
    port = raw.local_port
    state = HandshakeState(
        "IK",
        True,
        b"planfence-net/1\x00" + h.roster.cluster.encode(),
        s=h.identity("planner").noise_private,
        rs=h.roster.agent("reqs").noise_key,
    )
    await raw.send_raw(encode_frame(state.write_message(b""))[:40])
    await raw.aclose()
    return port, "handshake_failed", "connection closed by peer"


async def _unknown_key(h: ClusterHandle) -> tuple[int, str, str]:
    raw = await RawClient.tcp(h)
    port = raw.local_port
    state = HandshakeState(
        "IK",
        True,
        b"planfence-net/1\x00" + h.roster.cluster.encode(),
        s=Identity("x", SigningKey.generate()).noise_private,
        rs=h.roster.agent("reqs").noise_key,
    )
    await raw.send_raw(encode_frame(state.write_message(b"")))
    await raw.wait_closed()
    await raw.aclose()
    return port, "handshake_refused", "not in roster"


PRE_HANDSHAKE: list[Callable[[ClusterHandle], Awaitable[tuple[int, str, str]]]] = [
    _garbage_http,
    _oversize_prefix,
    _garbage_handshake,
    _short_handshake,
    _wrong_cluster,
    _half_handshake,
    _unknown_key,
]


async def test_owner_survives_bad_input_before_authentication(live_cluster: ClusterHandle) -> None:
    h = live_cluster
    pid = h.owner_pid("reqs")
    with anyio.fail_after(DEADLINE):
        async with open_session(h.roster, h.identity("planner"), "reqs") as bystander:
            for abuse in PRE_HANDSHAKE:
                port, event, reason = await abuse(h)
                entry = h.wait_event(
                    "reqs", event, lambda e, port=port: e["remote"] == f"127.0.0.1:{port}"
                )
                assert entry["reason"] == reason, abuse.__name__
                await assert_serving(h, pid, bystander, abuse.__name__)
    assert len(
        [e for e in h.events("reqs") if e["event"] in ("handshake_failed", "handshake_refused")]
    ) == len(PRE_HANDSHAKE)
    assert h.events("reqs", "error") == []


async def test_owner_survives_bad_frames_after_authentication(live_cluster: ClusterHandle) -> None:
    h = live_cluster
    pid = h.owner_pid("reqs")
    with anyio.fail_after(DEADLINE):
        async with open_session(h.roster, h.identity("planner"), "reqs") as bystander:
            # An undecryptable transport frame closes that session only.
            client = await proven_session(h)
            await client.send_raw(encode_frame(bytes(48)))
            await client.wait_closed()
            await client.aclose()
            await assert_serving(h, pid, bystander, "an undecryptable frame")

            # A chunk whose flag byte is neither 0 nor 1.
            client = await proven_session(h)
            await client.send_chunks([b"\x07" + msgpack.packb([1, "ping", {}])])
            await client.wait_closed()
            await client.aclose()
            await assert_serving(h, pid, bystander, "a bad chunk flag")

            # A message over the 16 MiB limit: 257 full "more" chunks.
            client = await proven_session(h)
            await client.send_chunks([b"\x01" + b"\x00" * CHUNK_DATA] * 257)
            await client.wait_closed()
            await client.aclose()
            await assert_serving(h, pid, bystander, "an oversize message")
    reasons = [e["reason"] for e in h.events("reqs", "error")]
    assert reasons == [
        f"session closed: {DECRYPT_FAILED}",
        "session closed: chunk without a valid continuation flag",
        "session closed: message exceeds the limit of 16777216 bytes",
    ]


async def test_malformed_requests_get_typed_errors_on_a_live_session(
    live_cluster: ClusterHandle,
) -> None:
    h = live_cluster
    pid = h.owner_pid("reqs")
    rid = bytes(32)
    with anyio.fail_after(DEADLINE):
        client = await RawClient.session(h)
        not_msgpack = await client.call(b"\xc1\xc1")
        assert not_msgpack[:2] == [-1, False]
        assert not_msgpack[2]["code"] == "bad_request"
        assert not_msgpack[2]["message"].startswith("invalid msgpack: ")
        cases = [
            (
                msgpack.packb({"op": "ping"}),
                [-1, False, {"code": "bad_request", "message": BAD_SHAPE}],
            ),
            (msgpack.packb([5, "ping"]), [5, False, {"code": "bad_request", "message": BAD_SHAPE}]),
            (
                msgpack.packb([6, "drop_table", {}]),
                [6, False, {"code": "unknown_op", "message": "unknown op 'drop_table'"}],
            ),
            (
                msgpack.packb([7, "heads", {"keys": []}]),
                [
                    7,
                    False,
                    {
                        "code": "bad_request",
                        "message": "'keys' must be a non-empty array of strings",
                    },
                ],
            ),
            (
                msgpack.packb([8, "get", {"ids": [rid.hex()]}]),
                [8, False, {"code": "bad_request", "message": "id must be 32 raw bytes"}],
            ),
            (
                msgpack.packb([9, "get", {"ids": [rid] * 4097}]),
                [9, False, {"code": "too_large", "message": "at most 4096 ids per request"}],
            ),
            (
                msgpack.packb([10, "put", {"key": "req/a"}]),
                [10, False, {"code": "bad_request", "message": "'body' is required"}],
            ),
            (
                msgpack.packb([11, "heads", {"keys": ["req/a"], "expect": {"req/a": b"x"}}]),
                [
                    11,
                    False,
                    {"code": "bad_request", "message": "expect['req/a'] must be 32 raw bytes"},
                ],
            ),
            (msgpack.packb([12, "get", {"ids": [rid]}]), [12, True, {"records": []}]),
        ]
        for data, expected in cases:
            assert await client.call(data) == expected, data
        ping = await client.call(msgpack.packb([13, "ping", {}]))
        assert ping[:2] == [13, True] and ping[2]["agent"] == "reqs"
        await client.aclose()
    assert h.owner_pid("reqs") == pid
    requests = h.wait_events("reqs", "request", 11, lambda e: e["peer"] == "planner")
    outcomes = [e["outcome"] for e in requests]
    assert outcomes == [
        "bad_request",
        "bad_request",
        "bad_request",
        "unknown_op",
        "bad_request",
        "bad_request",
        "too_large",
        "bad_request",
        "bad_request",
        "ok",
        "ok",
    ]
    assert h.events("reqs", "error") == []


async def test_clients_that_disconnect_mid_request(live_cluster: ClusterHandle) -> None:
    h = live_cluster
    pid = h.owner_pid("reqs")
    with anyio.fail_after(DEADLINE):
        async with open_session(h.roster, h.identity("planner"), "reqs") as bystander:
            # Half a frame of a request, then gone.
            client = await RawClient.session(h)
            assert client.send_cipher is not None
            frame = encode_frame(
                client.send_cipher.encrypt_with_ad(b"", b"\x00" + msgpack.packb([1, "ping", {}]))
            )
            await client.send_raw(frame[:10])
            await client.aclose()
            await assert_serving(h, pid, bystander, "half a frame")

            # The first chunk of a two-chunk message, then gone.
            client = await RawClient.session(h)
            await client.send_chunks([b"\x01" + b"\x00" * 100])
            await client.aclose()
            await assert_serving(h, pid, bystander, "half a message")

            # A whole put, then gone before the answer: the put still happens, once.
            client = await RawClient.session(h, as_agent="reqs")
            await client.send_message(
                msgpack.packb([1, "put", {"key": "req/orphan", "body": "no one listens"}])
            )
            await client.aclose()
            put = h.wait_event("reqs", "put", lambda e: e["key"] == "req/orphan")
            assert put["seq"] == 1
            await assert_serving(h, pid, bystander, "a put without its reader")
            heads = await bystander.request("heads", {"keys": ["req/orphan"]})
            assert heads["heads"] == [["req/orphan", bytes.fromhex(put["id"]), 1]]
    assert h.events("reqs", "error") == []
    assert h.events("reqs", "put")[0]["key"] == "req/orphan"
    assert len(h.events("reqs", "put")) == 1


async def test_a_request_naming_req_id_minus_one_is_refused(live_cluster: ClusterHandle) -> None:
    """-1 is the req_id of the owner's answers to requests it cannot read: a client that
    named it could take such an answer for its own, so it is refused (and still answered)."""
    h = live_cluster
    with anyio.fail_after(DEADLINE):
        client = await proven_session(h)
        for request in ([-1, "ping", {}], [-1, "put", {"key": "req/minus", "body": 1}]):
            assert await client.call(msgpack.packb(request)) == [
                -1,
                False,
                {
                    "code": "bad_request",
                    "message": "req_id -1 is the owner's (for requests it cannot read)",
                },
            ]
        assert (await client.call(msgpack.packb([-2, "ping", {}])))[:2] == [-2, True]
        await client.aclose()
        async with open_session(h.roster, h.identity("planner"), "reqs") as session:
            assert (await session.request("heads", {"keys": ["req/minus"]}))["heads"] == [
                ["req/minus", None, 0]
            ]
