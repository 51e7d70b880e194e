"""`put_many`: many records in one request, one transaction (real owner processes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import msgpack
import pytest

from planfence_net.core.answers import verifier
from planfence_net.core.errors import RequestError
from planfence_net.net.api import get_records, put_records
from planfence_net.net.client import Session, open_session
from planfence_net.owners.ops import owner_operations
from planfence_net.protocol.messages import MAX_PUT_BYTES, MAX_PUT_ITEMS
from support.cluster import ClusterHandle
from support.owner_client import DEADLINE

pytestmark = pytest.mark.anyio


async def _written(session: Session) -> tuple[int, int]:
    stats = await session.request("stats")
    return stats["records_written"], stats["last_seq"]


async def test_put_many_writes_every_item_with_consecutive_seqs_readable_and_verified(
    live_cluster: ClusterHandle,
) -> None:
    h = live_cluster
    items = [
        {"key": "req/a", "body": {"n": 1}},
        {"key": "req/b", "kind": "plan", "body": [1, 2]},
        {"key": "req/a", "body": {"n": 2}, "parents": []},
    ]
    with anyio.fail_after(DEADLINE):
        async with open_session(h.roster, h.identity("reqs"), "reqs") as writer:
            await writer.request("put", {"key": "req/z", "body": 0})  # seq 1
            answer = await writer.request("put_many", {"items": items})
            heads = await writer.request("heads", {"keys": ["req/a", "req/b"]})
            assert await _written(writer) == (4, 4)
        puts = answer["puts"]
        assert [seq for _, seq in puts] == [2, 3, 4]
        assert heads["heads"] == [["req/a", puts[2][0], 4], ["req/b", puts[1][0], 3]]
        ids = [rid for rid, _ in puts]
        records = await get_records(h.roster, h.identity("planner"), ids)  # each verified
    check = verifier(h.roster)
    for record, item, (rid, seq) in zip(records, items, puts, strict=True):
        check(record)
        assert (record.id, record.seq, record.key, record.owner) == (rid, seq, item["key"], "reqs")
        assert record.kind == item.get("kind", "fact")
        assert msgpack.unpackb(record.body_raw) == item["body"]


async def test_a_bad_item_fails_the_whole_request_and_names_the_item(
    live_cluster: ClusterHandle,
) -> None:
    h = live_cluster
    good = {"key": "req/a", "body": 1}
    cases: list[tuple[list[dict[str, Any]], tuple[str, str, int]]] = [
        (
            [good, good, {"key": "req/a", "body": 1, "parents": [b"short"]}],
            ("bad_request", "item 2: parent must be 32 raw bytes", 2),
        ),
        (
            [good, {"key": "inv/a", "body": 1}],
            ("not_owner", "item 1: reqs does not own 'inv/a' (owner: inventory)", 1),
        ),
        (
            [{"key": "req/a", "body": 1, "head": b""}],
            ("bad_request", "item 0: put_many has no 'head': use put", 0),
        ),
        ([good, {"key": "req/a"}], ("bad_request", "item 1: 'body' is required", 1)),
    ]
    with anyio.fail_after(DEADLINE):
        async with open_session(h.roster, h.identity("reqs"), "reqs") as writer:
            for items, (code, message, _) in cases:
                with pytest.raises(RequestError) as info:
                    await writer.request("put_many", {"items": items})
                assert (info.value.code, info.value.message) == (code, message)
            heads = await writer.request("heads", {"keys": ["req/a"]})
            assert await _written(writer) == (0, 0)
    assert heads["heads"] == [["req/a", None, 0]]
    # the error map names the item for a client that branches on it
    errors = [e for e in h.events("reqs", "request") if e["op"] == "put_many"]
    assert [e["outcome"] for e in errors] == [c[1][0] for c in cases]


async def test_put_many_over_its_caps_is_refused_with_too_large(
    live_cluster: ClusterHandle,
) -> None:
    h = live_cluster
    too_many = [{"key": "req/a", "body": i} for i in range(MAX_PUT_ITEMS + 1)]
    big = b"x" * (1024 * 1024)
    too_big = [{"key": "req/a", "body": big} for _ in range(MAX_PUT_BYTES // len(big) + 1)]
    with anyio.fail_after(DEADLINE):
        async with open_session(h.roster, h.identity("reqs"), "reqs") as writer:
            with pytest.raises(RequestError) as info:
                await writer.request("put_many", {"items": too_many})
            assert (info.value.code, info.value.message) == (
                "too_large",
                f"at most {MAX_PUT_ITEMS} items per put_many",
            )
            with pytest.raises(RequestError) as info:
                await writer.request("put_many", {"items": too_big})
            assert (info.value.code, info.value.message) == (
                "too_large",
                f"at most {MAX_PUT_BYTES} bytes of bodies per put_many",
            )
            with pytest.raises(RequestError) as info:
                await writer.request("put_many", {"items": []})
            assert info.value.code == "bad_request"
            assert await _written(writer) == (0, 0)


async def test_only_the_owning_agent_may_put_many(live_cluster: ClusterHandle) -> None:
    h = live_cluster
    with anyio.fail_after(DEADLINE):
        async with open_session(h.roster, h.identity("planner"), "reqs") as stranger:
            with pytest.raises(RequestError) as info:
                await stranger.request("put_many", {"items": [{"key": "req/a", "body": 1}]})
            assert (info.value.code, info.value.message) == (
                "forbidden",
                "only reqs may write its keys; this session is planner",
            )
            assert await _written(stranger) == (0, 0)
        with pytest.raises(RequestError) as info:  # the library sends each key to its owner
            await put_records(h.roster, h.identity("planner"), [{"key": "req/a", "body": 1}])
        assert info.value.code == "forbidden"


async def test_put_records_writes_in_item_order_and_the_owner_restarts_on_them(
    live_cluster: ClusterHandle,
) -> None:
    """More items than one request takes, so the library splits them; the owner restarted on
    the store comes up with the same heads and signs above the last seq."""
    h = live_cluster
    n, keys = 2 * 1000 + 7, 50
    items = [{"key": f"req/h{i % keys}", "body": {"i": i}} for i in range(n)]
    with anyio.fail_after(DEADLINE):
        written = await put_records(h.roster, h.identity("reqs"), items, batch=1000)
        assert [w["seq"] for w in written] == list(range(1, n + 1))
        last = {w["key"]: w for w in written}  # the last write of each key
        async with open_session(h.roster, h.identity("reqs"), "reqs") as session:
            before = await session.request("heads", {"keys": sorted(last)})
    assert before["heads"] == [[k, last[k]["id"], last[k]["seq"]] for k in sorted(last)]
    assert len(h.events("reqs", "put")) == n
    h.stop()
    h.up()
    with anyio.fail_after(DEADLINE):
        async with open_session(h.roster, h.identity("reqs"), "reqs") as session:
            after = await session.request("heads", {"keys": sorted(last)})
            again = await session.request("put_many", {"items": [{"key": "req/h0", "body": 0}]})
    assert after["heads"] == before["heads"]
    assert again["puts"][0][1] == n + 1


async def test_put_records_names_the_failing_item_by_its_index_in_the_whole_list(
    live_cluster: ClusterHandle,
) -> None:
    h = live_cluster
    items: list[dict[str, Any]] = [{"key": "req/a", "body": i} for i in range(25)]
    items[22]["parents"] = [b"short"]
    with anyio.fail_after(DEADLINE):
        with pytest.raises(RequestError) as info:
            await put_records(h.roster, h.identity("reqs"), items, batch=10)
        assert (info.value.code, info.value.message) == (
            "bad_request",
            "item 22: parent must be 32 raw bytes",
        )
        async with open_session(h.roster, h.identity("reqs"), "reqs") as session:
            assert await _written(session) == (20, 20)  # the two requests before it


def test_a_service_replacing_put_loses_put_many() -> None:
    """put_many writes as put does: a service with its own put (a workspace owner refusing
    observed facts) must not keep the ordinary put_many, which would bypass it."""
    ordinary = owner_operations()
    assert "put_many" in ordinary.operations
    replaced = ordinary.with_rows(ordinary.operations["put"])
    assert "put_many" not in replaced.operations
    kept = ordinary.with_rows(ordinary.operations["put"], ordinary.operations["put_many"])
    assert "put_many" in kept.operations


def test_the_socket_callback_leaves_a_put_many_unread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request of an op no row answers without waiting goes to the session's loop unread:
    a put_many of 4096 items is read once (by the loop), not twice."""
    from types import SimpleNamespace

    from planfence_net.owners import now
    from planfence_net.protocol.messages import encode_request

    def read(data: bytes, schema: Any) -> Any:
        raise AssertionError("read in the socket's callback")

    monkeypatch.setattr(now, "decode_request", read)
    service = owner_operations()
    daemon = SimpleNamespace(store=SimpleNamespace(commits=0))
    answers = now.AnswersNow(daemon, service.schema, service)  # type: ignore[arg-type]
    connection = SimpleNamespace(stream=SimpleNamespace(writable=True))
    request = encode_request(7, "put_many", {"items": [{"key": "req/a", "body": 1}]})
    assert answers.answer(connection, request) is False  # type: ignore[arg-type]
    with pytest.raises(AssertionError, match="socket's callback"):  # a heads is read there
        answers.answer(connection, encode_request(8, "heads", {"keys": ["req/a"]}))  # type: ignore[arg-type]


def test_put_many_log_lines_are_the_lines_a_put_writes(tmp_path: Path) -> None:
    """`write_puts_soon` renders each line by hand: it must be the JSON `write_soon` writes
    (non-ASCII keys and kinds, parents, large seqs), but for the time stamp."""
    import json

    from nacl.signing import SigningKey

    from planfence_net.core.records import make_record
    from planfence_net.owners.logs import EventLog

    key = SigningKey(bytes(32))
    records = [
        make_record(
            key,
            key='req/ä"\\x',
            owner="reqs",
            seq=2**40,
            parents=[bytes(32)] * 2,
            kind="plan-é",
            body={"n": 1},
        ),
        make_record(key, key="req/b", owner="reqs", seq=3, parents=[], kind="fact", body=1),
    ]
    fast, slow = (
        EventLog(tmp_path / "fast.jsonl", "rêqs"),
        EventLog(tmp_path / "slow.jsonl", "rêqs"),
    )
    fast.write_puts_soon(records)
    for r in records:
        slow.write_soon("put", key=r.key, id=r.id, seq=r.seq, kind=r.kind, parents=list(r.parents))
    fast.close()
    slow.close()
    lines = [(tmp_path / f"{n}.jsonl").read_text().splitlines() for n in ("fast", "slow")]
    strip = [[json.dumps({**json.loads(x), "ts": 0}) for x in side] for side in lines]
    assert strip[0] == strip[1] and len(strip[0]) == 2
    assert [x.split(",", 1)[1] for x in lines[0]] == [x.split(",", 1)[1] for x in lines[1]]
