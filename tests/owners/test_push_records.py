"""`subscribe {"records": true}`: pushes carry the pushed rows' records, within the push budget
(real owners on 127.0.0.1, and the pure subscription); a subscriber without it gets the rows
alone, as before."""

from __future__ import annotations

import anyio
import msgpack
import pytest
from nacl.signing import SigningKey

from planfence_net.core.answers import verified_records, verifier
from planfence_net.core.errors import RequestError
from planfence_net.core.records import make_record
from planfence_net.net.client import open_session
from planfence_net.owners.limits import Limits
from planfence_net.owners.syncgroups import Subscription, record_bytes
from support.cluster import ClusterHandle
from support.owner_client import DEADLINE

BIG = 300 * 1024  # a body over the default push budget (256 KiB)


def test_a_subscription_holds_records_only_while_they_fit_its_budget() -> None:
    key = SigningKey(bytes(range(32, 64)))
    small = [
        make_record(key, key="req/a", owner="reqs", seq=n, parents=(), kind="fact", body=n)
        for n in (1, 2, 3)
    ]
    budget = record_bytes(small[0]) + record_bytes(small[1])
    subscription = Subscription({"req/a"}, 3, "w", budget)
    assert subscription.add(small[:1]) is None
    assert subscription.add(small[1:2]) is None
    rows = subscription.add(small[2:])  # the third does not fit: its row goes alone
    assert rows == [["req/a", r.id, r.seq] for r in small]
    assert msgpack.unpackb(subscription.push(4, rows), raw=False) == [
        4,
        True,
        {"heads": rows, "seq": 3, "records": [r.to_wire() for r in small[:2]]},
    ]
    assert (subscription.held, subscription.held_bytes) == ([], 0)
    plain = Subscription({"req/a"}, 1, "w")  # no budget: today's push, no "records"
    again = plain.add(small[:1])
    assert again is not None
    assert msgpack.unpackb(plain.push(5, again), raw=False) == [5, True, {"heads": again, "seq": 1}]


def test_the_push_budget_is_a_daemon_limit() -> None:
    assert Limits().push_record_bytes == 256 * 1024
    assert Limits.parse(["push_record_bytes=1000"]).push_record_bytes == 1000


@pytest.mark.anyio
@pytest.mark.parametrize("group", [None, "w"])
async def test_pushes_carry_verifiable_records_to_a_subscriber_that_asked(
    live_cluster: ClusterHandle, group: str | None
) -> None:
    h = live_cluster
    verify = verifier(h.roster)
    with anyio.fail_after(DEADLINE):
        async with (
            open_session(h.roster, h.identity("planner"), "reqs") as planner,
            open_session(h.roster, h.identity("ops"), "reqs") as ops,
            open_session(h.roster, h.identity("reqs"), "reqs") as writer,
        ):
            with_records = await planner.subscribe(["req/a"], group=group, records=True)
            rows_only = await ops.subscribe(["req/a"], group=group)
            put = await writer.request("put", {"key": "req/a", "body": {"qty": 3}})
            row = ["req/a", put["id"], put["seq"]]
            seq = {} if group is None else {"seq": put["seq"]}
            assert await rows_only.receive() == {"heads": [row], **seq}
            pushed = await with_records.receive()
            assert pushed["heads"] == [row] and pushed.get("seq") == seq.get("seq")
            records = verified_records(pushed["records"], verify, bad="raise")
            assert [(r.id, r.key, r.owner, r.body) for r in records] == [
                (put["id"], "req/a", "reqs", {"qty": 3})
            ]

            # over the push budget: the row goes alone, the record is read with `get`
            big = await writer.request("put", {"key": "req/a", "body": bytes(BIG)})
            big_row = ["req/a", big["id"], big["seq"]]
            seq = {} if group is None else {"seq": big["seq"]}
            assert await with_records.receive() == {"heads": [big_row], **seq, "records": []}
            assert await rows_only.receive() == {"heads": [big_row], **seq}
            got = await planner.request("get", {"ids": [big["id"]]})
            assert [r.size for r in verified_records(got["records"], verify, bad="raise")] == [
                len(msgpack.packb(bytes(BIG)))
            ]
            with_records.close()
            rows_only.close()


@pytest.mark.anyio
async def test_records_must_be_true_or_false(live_cluster: ClusterHandle) -> None:
    h = live_cluster
    with anyio.fail_after(DEADLINE):
        async with open_session(h.roster, h.identity("planner"), "reqs") as planner:
            with pytest.raises(RequestError) as info:
                await planner.request("subscribe", {"keys": ["req/a"], "records": "yes"})
            assert str(info.value) == "bad_request: 'records' must be true or false"
