"""An owner answers many requests delivered in one read (a session pool shared by many
executors pipelines them): every request gets its own correct answer, in order, and one bad
peer never takes the owner down with it."""

from __future__ import annotations

import anyio
import msgpack
import pytest

from planfence_net.net.client import open_session
from planfence_net.protocol.framing import encode_frame, split_message
from support.cluster import ClusterHandle
from support.owner_client import DEADLINE, DECRYPT_FAILED, RawClient, assert_serving

pytestmark = pytest.mark.anyio


async def _send_at_once(client: RawClient, messages: list[bytes]) -> None:
    """Every message's frames in one send: the owner reads them together."""
    await client.send_chunks([chunk for m in messages for chunk in split_message(m)])


async def test_requests_delivered_together_get_their_answers_in_order(
    live_cluster: ClusterHandle,
) -> None:
    h = live_cluster
    with anyio.fail_after(DEADLINE):
        async with open_session(h.roster, h.identity("reqs"), "reqs") as writer:
            put = await writer.request(
                "put", {"key": "req/a", "kind": "fact", "parents": [], "body": {"v": 1}}
            )
        head = ["req/a", put["id"], put["seq"]]
        client = await RawClient.session(h)
        heads = {"keys": ["req/a"], "expect": {"req/a": put["id"]}}
        requests = [msgpack.packb([i, "heads", heads]) for i in range(1, 9)]
        requests[3] = msgpack.packb([4, "heads", {"keys": []}])  # a typed error among them
        requests[5] = msgpack.packb([6, "ping", {}])  # answered by the session's loop
        await _send_at_once(client, requests)
        answers = []
        for _ in requests:
            reply = await client.receive_message()
            assert reply is not None, "the owner closed the session instead of answering"
            answers.append(msgpack.unpackb(reply))
        await client.aclose()
    assert [a[0] for a in answers] == list(range(1, 9))
    bad = {"code": "bad_request", "message": "'keys' must be a non-empty array of strings"}
    assert answers[3] == [4, False, bad]
    assert answers[5][:2] == [6, True] and answers[5][2]["agent"] == "reqs"
    for answer in answers[:3] + answers[4:5] + answers[6:]:
        assert answer[1:] == [True, {"heads": [head], "records": []}], answer
    outcomes = [
        e["outcome"] for e in h.wait_events("reqs", "request", 8, lambda e: e["peer"] == "planner")
    ]
    assert sorted(outcomes) == ["bad_request"] + ["ok"] * 7


async def test_a_bad_frame_among_good_requests_closes_that_session_only(
    live_cluster: ClusterHandle,
) -> None:
    h = live_cluster
    pid = h.owner_pid("reqs")
    with anyio.fail_after(DEADLINE):
        async with open_session(h.roster, h.identity("planner"), "reqs") as bystander:
            client = await RawClient.session(h)
            assert (await client.call(msgpack.packb([0, "ping", {}])))[:2] == [0, True]
            assert client.send_cipher is not None
            good = [
                encode_frame(client.send_cipher.encrypt_with_ad(b"", chunk))
                for i in (1, 2, 3)
                for chunk in split_message(msgpack.packb([i, "ping", {}]))
            ]
            await client.send_raw(b"".join([*good, encode_frame(bytes(48)), *good[:1]]))
            await client.wait_closed()
            await client.aclose()
            await assert_serving(h, pid, bystander, "a bad frame after good requests")
    assert [e["reason"] for e in h.events("reqs", "error")] == [f"session closed: {DECRYPT_FAILED}"]
