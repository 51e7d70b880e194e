"""Sync groups (`subscribe` with a group, `ack`, `synced`): the pure tracker, and the owner
answering `synced` only once every member has acknowledged (real owners on 127.0.0.1)."""

from __future__ import annotations

import anyio
import msgpack
import pytest

from planfence_net.core.errors import RequestError
from planfence_net.net.client import open_session
from planfence_net.owners.syncgroups import Subscription, acknowledge, is_synchronized
from support.cluster import ClusterHandle
from support.owner_client import DEADLINE


def member(group: str | None, sent: int, acked: int = 0) -> Subscription:
    subscription = Subscription(None, 1, group)
    subscription.sent, subscription.acked = sent, acked
    return subscription


def test_an_update_is_synchronized_once_every_member_that_was_sent_it_acknowledged() -> None:
    a, b, other = member("w", sent=5), member("w", sent=3), member("x", sent=9)
    everyone = [a, b, other]
    assert not is_synchronized(everyone, "w", 3)
    assert acknowledge([a], "w", 7) == 1 and a.acked == 5  # never above what was pushed
    assert not is_synchronized(everyone, "w", 3)  # b was sent seq 3 and has not acked it
    acknowledge([b], "w", 3)
    # b was never sent seq 5 (not its keys): it owes nothing for it; `x` is another group
    assert is_synchronized(everyone, "w", 5)
    assert is_synchronized([], "w", 5)
    assert acknowledge([other], "w", 9) == 0


def test_a_group_push_says_the_seq_it_covers() -> None:
    subscription = Subscription({"req/a"}, 2, "w")
    assert subscription.flush() is None
    subscription.rows = [["req/a", b"i" * 32, 4], ["req/a", b"j" * 32, 6]]
    rows = subscription.flush()
    assert rows is not None and subscription.rows == []
    assert msgpack.unpackb(subscription.push(7, rows), raw=False) == [
        7,
        True,
        {"heads": rows, "seq": 6},
    ]
    assert subscription.sent == 6


@pytest.mark.anyio
async def test_synced_answers_only_after_every_member_acknowledged(
    live_cluster: ClusterHandle,
) -> None:
    h = live_cluster
    answered: list[dict[str, object]] = []
    with anyio.fail_after(DEADLINE):
        async with (
            open_session(h.roster, h.identity("planner"), "reqs") as planner,
            open_session(h.roster, h.identity("ops"), "reqs") as ops,
            open_session(h.roster, h.identity("reqs"), "reqs") as writer,
        ):
            with pytest.raises(RequestError) as info:
                await ops.request("ack", {"group": "w", "seq": 1})
            assert (info.value.code, str(info.value)) == (
                "bad_request",
                "bad_request: this session has no subscription in 'w'",
            )
            # planner holds its pushes back (K = 5): `synced` must flush them
            to_planner = await planner.subscribe(["req/a"], every=5, group="w")
            to_ops = await ops.subscribe(["req/a", "req/b"], group="w")
            first = await writer.request("put", {"key": "req/a", "body": 1})
            await writer.request("put", {"key": "req/b", "body": 2})
            assert await to_ops.receive() == {"heads": [["req/a", first["id"], 1]], "seq": 1}
            second = await to_ops.receive()
            assert (second["heads"][0][0], second["heads"][0][2], second["seq"]) == ("req/b", 2, 2)

            with pytest.raises(RequestError) as info:  # reqs is not a member of "w"
                await writer.request("synced", {"group": "w", "keys": ["req/a"]})
            assert str(info.value) == "bad_request: reqs has no subscription in 'w'"

            async def wait_synced() -> None:  # asked by a member, on another session
                async with open_session(h.roster, h.identity("ops"), "reqs") as asker:
                    answered.append(
                        await asker.request("synced", {"group": "w", "keys": ["req/a"]})
                    )

            async with anyio.create_task_group() as tg:
                tg.start_soon(wait_synced)
                pushed = await to_planner.receive()  # flushed by `synced`
                assert pushed == {"heads": [["req/a", first["id"], 1]], "seq": 1}
                assert await ops.request("ack", {"group": "w", "seq": 2}) == {"acked": 2}
                await writer.request("ping")
                assert answered == []  # planner has not acknowledged seq 1 yet
                assert await planner.request("ack", {"group": "w", "seq": 1}) == {"acked": 1}
            assert answered == [{"synced": 1}]
            to_planner.close()
            to_ops.close()
