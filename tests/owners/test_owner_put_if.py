"""`put` with `head`: a compare-and-set on the key's head (real owner processes)."""

from __future__ import annotations

import anyio
import pytest

from planfence_net.core.errors import RequestError
from planfence_net.net.client import open_session
from support.cluster import ClusterHandle
from support.owner_client import DEADLINE

pytestmark = pytest.mark.anyio


async def test_a_put_with_a_stale_head_is_refused_and_writes_nothing(
    live_cluster: ClusterHandle,
) -> None:
    h = live_cluster
    with anyio.fail_after(DEADLINE):
        async with open_session(h.roster, h.identity("reqs"), "reqs") as writer:
            first = await writer.request("put", {"key": "req/p", "body": 1, "head": b""})
            with pytest.raises(RequestError) as info:  # it exists now: b"" is stale
                await writer.request("put", {"key": "req/p", "body": 2, "head": b""})
            assert (info.value.code, info.value.message) == (
                "conflict",
                "the head of 'req/p' is not the one expected",
            )
            second = await writer.request("put", {"key": "req/p", "body": 3, "head": first["id"]})
            with pytest.raises(RequestError) as info:
                await writer.request("put", {"key": "req/p", "body": 4, "head": first["id"]})
            assert info.value.code == "conflict"
            with pytest.raises(RequestError) as info:
                await writer.request("put", {"key": "req/p", "body": 5, "head": b"short"})
            assert (info.value.code, info.value.message) == (
                "bad_request",
                "'head' must be 32 raw bytes",
            )
            heads = await writer.request("heads", {"keys": ["req/p"]})
    assert heads["heads"] == [["req/p", second["id"], 2]]
