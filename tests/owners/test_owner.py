"""Owner daemons as real processes on 127.0.0.1: the wire protocol, durability, shutdown.

Most tests talk through `planfence_net.net.client`; some use `owner_client.RawClient`, a client
written from docs/PROTOCOL.md with only the Noise core.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import anyio
import msgpack
import pytest
from nacl.signing import SigningKey

from planfence_net.core.errors import RequestError, TransportError
from planfence_net.core.identity import Identity, generate_key_file, load_identity
from planfence_net.core.records import Record, make_record
from planfence_net.net.api import get_records, put_record, query_heads
from planfence_net.net.client import open_session
from planfence_net.owners.startup import signer
from planfence_net.owners.store import StaleSeq, Store
from planfence_net.protocol.framing import encode_frame, split_message
from planfence_net.protocol.noise import HandshakeState
from support.cluster import PLANFENCE, ClusterHandle
from support.owner_client import (
    DEADLINE,
    STATS_KEYS,
    RawClient,
    assert_serving,
    check_record,
    fingerprint_of,
)

pytestmark = pytest.mark.anyio


# -- round trip, ownership, verification --------------------------------------------------------


async def test_put_heads_get_round_trip_with_verification(live_cluster: ClusterHandle) -> None:
    h = live_cluster
    with anyio.fail_after(DEADLINE):
        async with open_session(h.roster, h.identity("reqs"), "reqs") as writer:
            first = await writer.request(
                "put",
                {"key": "req/a", "kind": "fact", "parents": [], "body": {"x": 1, "a": [1, 2]}},
            )
            second = await writer.request(
                "put", {"key": "req/a", "kind": "fact", "parents": [first["id"]], "body": {"x": 2}}
            )
        # Ids travel as 32 raw bytes; seqs count per owner from 1.
        assert set(first) == {"id", "seq"} and first["seq"] == 1
        assert isinstance(first["id"], bytes) and len(first["id"]) == 32
        assert second["seq"] == 2 and second["id"] != first["id"]

        async with open_session(h.roster, h.identity("planner"), "reqs") as reader:
            heads = await reader.request("heads", {"keys": ["req/a", "req/never"]})
            assert heads == {
                "heads": [["req/a", second["id"], 2], ["req/never", None, 0]],
                "records": [],
            }
            same = await reader.request(
                "heads", {"keys": ["req/a"], "expect": {"req/a": second["id"]}}
            )
            assert same == {"heads": [["req/a", second["id"], 2]], "records": []}
            stale = await reader.request(
                "heads", {"keys": ["req/a"], "expect": {"req/a": first["id"]}}
            )
            assert stale["heads"] == [["req/a", second["id"], 2]]
            assert len(stale["records"]) == 1
            # by expect alone, short: [key, seq] for a key at its expected id, else full
            short = await reader.request(
                "heads",
                {"expect": {"req/a": second["id"], "req/never": first["id"]}, "short": True},
            )
            assert short == {"heads": [["req/a", 2], ["req/never", None, 0]], "records": []}
            inline = check_record(h, stale["records"][0], expected_id=second["id"])
            assert (inline.key, inline.seq, inline.parents, inline.body) == (
                "req/a",
                2,
                (first["id"],),
                {"x": 2},
            )

            missing = bytes(32)
            got = await reader.request("get", {"ids": [second["id"], missing, first["id"]]})
        records = [check_record(h, w) for w in got["records"]]
        assert [r.id for r in records] == [second["id"], first["id"]]
        assert records[1].body == {"x": 1, "a": [1, 2]} and list(records[1].body) == ["x", "a"]
        assert (records[1].owner, records[1].kind, records[1].parents) == ("reqs", "fact", ())

        # The library calls the CLI uses: verified records from any owner, heads per owner.
        fetched = await get_records(h.roster, h.identity("ops"), [first["id"], second["id"]])
        assert [r.id for r in fetched] == [first["id"], second["id"]]
        rows = await query_heads(h.roster, h.identity("ops"), ["req/a", "inv/none"])
        assert rows == [
            {"key": "req/a", "owner": "reqs", "id": second["id"], "seq": 2},
            {"key": "inv/none", "owner": "inventory", "id": None, "seq": 0},
        ]

    puts = h.events("reqs", "put")
    assert [(e["key"], e["id"], e["seq"], e["kind"], e["parents"]) for e in puts] == [
        ("req/a", first["id"].hex(), 1, "fact", []),
        ("req/a", second["id"].hex(), 2, "fact", [first["id"].hex()]),
    ]


async def test_put_to_a_key_the_writer_does_not_own_is_refused(live_cluster: ClusterHandle) -> None:
    h = live_cluster
    with anyio.fail_after(DEADLINE):
        async with open_session(h.roster, h.identity("planner"), "reqs") as planner:
            with pytest.raises(RequestError) as info:
                await planner.request("put", {"key": "req/a", "body": 1})
            assert (info.value.code, info.value.message) == (
                "forbidden",
                "only reqs may write 'req/a'; this session is planner",
            )
        async with open_session(h.roster, h.identity("reqs"), "reqs") as reqs:
            for key, owner in (("inv/a", "inventory"), ("zzz/a", "nobody")):
                with pytest.raises(RequestError) as info:
                    await reqs.request("put", {"key": key, "body": 1})
                assert (info.value.code, info.value.message) == (
                    "not_owner",
                    f"reqs does not own {key!r} (owner: {owner})",
                )
            with pytest.raises(RequestError) as info:
                await reqs.request("heads", {"keys": ["req/a", "inv/a"]})
            assert info.value.code == "not_owner"
            # The session survives refusals; nothing was written.
            stats = await reqs.request("stats")
            assert (stats["records_written"], stats["last_seq"], stats["keys"]) == (0, 0, 0)
        with pytest.raises(RequestError) as info:
            await put_record(h.roster, h.identity("ops"), "req/a", body=1)
        assert str(info.value) == "forbidden: only reqs may write 'req/a'; this session is ops"
    puts = h.wait_events("reqs", "request", 4, lambda e: e["op"] == "put")
    outcomes = [(e["op"], e["keys"], e["outcome"]) for e in puts]
    assert outcomes == [
        ("put", ["req/a"], "forbidden"),
        ("put", ["inv/a"], "not_owner"),
        ("put", ["zzz/a"], "not_owner"),
        ("put", ["req/a"], "forbidden"),
    ]
    assert h.events("reqs", "put") == []


async def test_unknown_peer_is_dropped_and_the_owner_keeps_serving(
    live_cluster: ClusterHandle,
) -> None:
    h = live_cluster
    pid = h.owner_pid("reqs")
    mallory = SigningKey.generate()
    with anyio.fail_after(DEADLINE):
        async with open_session(h.roster, h.identity("planner"), "reqs") as bystander:
            await bystander.request("ping")
            raw = await RawClient.tcp(h)
            port = raw.local_port
            await raw.send_raw(
                encode_frame(
                    HandshakeState(
                        "IK",
                        True,
                        b"planfence-net/1\x00" + h.roster.cluster.encode(),
                        s=Identity("mallory", mallory).noise_private,
                        rs=h.roster.agent("reqs").noise_key,
                    ).write_message(b"")
                )
            )
            await raw.wait_closed()  # no second handshake message: dropped
            await raw.aclose()
            # The library client gets a clear error, not a hang.
            with pytest.raises(TransportError):
                async with open_session(h.roster, Identity("reqs", mallory), "reqs"):
                    pass
            await assert_serving(h, pid, bystander, "an unknown peer")
            stats = await bystander.request("stats")
            assert stats["refused_peers"] == 2
    refused = h.events("reqs", "handshake_refused")
    assert len(refused) == 2
    assert {k: v for k, v in refused[0].items() if k != "ts"} == {
        "agent": "reqs",
        "event": "handshake_refused",
        "remote": f"127.0.0.1:{port}",
        "fingerprint": fingerprint_of(mallory),
        "reason": "not in roster",
    }
    assert refused[1]["fingerprint"] == fingerprint_of(mallory)


# -- pipelining and group commit ----------------------------------------------------------------


async def test_fifty_requests_pipelined_on_one_raw_session(live_cluster: ClusterHandle) -> None:
    h = live_cluster
    with anyio.fail_after(DEADLINE):
        client = await RawClient.session(h)
        ops = [("ping", {}), ("heads", {"keys": ["req/a"]}), ("stats", {})]
        wire = b""
        assert client.send_cipher is not None
        for req_id in range(1, 51):
            op, args = ops[req_id % 3]
            for chunk in split_message(msgpack.packb([req_id, op, args], use_bin_type=True)):
                wire += encode_frame(client.send_cipher.encrypt_with_ad(b"", chunk))
        await client.send_raw(wire)  # all 50 requests before reading any response
        replies = []
        for _ in range(50):
            message = await client.receive_message()
            assert message is not None
            replies.append(msgpack.unpackb(message, raw=False))
        await client.aclose()
    assert sorted(r[0] for r in replies) == list(range(1, 51))
    assert all(r[1] is True for r in replies)
    by_id = {r[0]: r[2] for r in replies}
    assert by_id[3] == {"agent": "reqs", "time": by_id[3]["time"]}  # ping
    assert by_id[1] == {"heads": [["req/a", None, 0]], "records": []}
    assert set(by_id[2]) == STATS_KEYS
    assert all(by_id[i] == by_id[1] for i in range(1, 51, 3))


async def test_concurrent_puts_get_distinct_seqs_and_are_group_committed(
    live_cluster: ClusterHandle,
) -> None:
    h = live_cluster
    results: dict[int, dict[str, Any]] = {}
    with anyio.fail_after(DEADLINE):
        async with open_session(h.roster, h.identity("reqs"), "reqs") as session:

            async def put(i: int) -> None:
                results[i] = await session.request(
                    "put", {"key": f"req/k{i % 10}", "body": {"i": i}}
                )

            async with anyio.create_task_group() as tg:
                for i in range(50):
                    tg.start_soon(put, i)
            stats = await session.request("stats")
            heads = await session.request("heads", {"keys": [f"req/k{j}" for j in range(10)]})
    seqs = [results[i]["seq"] for i in range(50)]
    assert sorted(seqs) == list(range(1, 51))
    assert len({results[i]["id"] for i in range(50)}) == 50
    assert (stats["records_written"], stats["last_seq"], stats["keys"]) == (50, 50, 10)
    assert 1 <= stats["commits"] < 50, stats  # several puts shared one transaction
    last = {}
    for i in range(50):
        key = f"req/k{i % 10}"
        if key not in last or results[i]["seq"] > last[key]["seq"]:
            last[key] = results[i]
    assert heads["heads"] == [
        [k, last[k]["id"], last[k]["seq"]] for k in (f"req/k{j}" for j in range(10))
    ]


async def test_subscribe_pushes_heads_with_the_subscribe_request_id(
    live_cluster: ClusterHandle,
) -> None:
    h = live_cluster
    with anyio.fail_after(DEADLINE):
        client = await RawClient.session(h)
        first = await client.call(msgpack.packb([41, "subscribe", {"keys": ["req/a"]}]))
        assert first == [41, True, {"subscribed": True, "heads": [["req/a", None, 0]]}]
        refused = await client.call(msgpack.packb([42, "subscribe", {"keys": ["inv/a"]}]))
        assert refused == [
            42,
            False,
            {"code": "not_owner", "message": "reqs does not own 'inv/a' (owner: inventory)"},
        ]
        async with open_session(h.roster, h.identity("reqs"), "reqs") as writer:
            await writer.request("put", {"key": "req/other", "body": 0})
            done = await writer.request("put", {"key": "req/a", "body": 1})
        pushed = await client.receive_message()
        assert pushed is not None
        # Only the subscribed key is pushed, addressed to the subscribe request's id.
        assert msgpack.unpackb(pushed, raw=False) == [
            41,
            True,
            {"heads": [["req/a", done["id"], 2]]},
        ]
        everything = await client.call(msgpack.packb([43, "subscribe", {}]))
        assert {row[0] for row in everything[2]["heads"]} == {"req/a", "req/other"}
        await client.aclose()

        async with open_session(h.roster, h.identity("planner"), "reqs") as session:
            with pytest.raises(RequestError) as info:
                await session.subscribe(["ops/x"])
            assert info.value.code == "not_owner"
            updates = await session.subscribe(["req/a"])
            with updates:
                async with open_session(h.roster, h.identity("reqs"), "reqs") as writer:
                    third = await writer.request("put", {"key": "req/a", "body": 2})
                assert await updates.receive() == {"heads": [["req/a", third["id"], 3]]}


async def test_subscribe_every_k_pushes_once_k_updates_gathered(
    live_cluster: ClusterHandle,
) -> None:
    h = live_cluster
    with anyio.fail_after(DEADLINE):
        async with (
            open_session(h.roster, h.identity("ops"), "reqs") as session,
            open_session(h.roster, h.identity("reqs"), "reqs") as writer,
        ):
            updates = await session.subscribe(["req/a", "req/b"], every=3)
            with updates:
                written = [
                    await writer.request("put", {"key": key, "body": i})
                    for i, key in enumerate(["req/a", "req/zzz", "req/b", "req/a"])
                ]
                # req/zzz is not subscribed: the third subscribed update completes the batch
                assert await updates.receive() == {
                    "heads": [
                        ["req/a", written[0]["id"], 1],
                        ["req/b", written[2]["id"], 3],
                        ["req/a", written[3]["id"], 4],
                    ]
                }
                with pytest.raises(anyio.WouldBlock):
                    updates.receive_nowait()


# -- durability ---------------------------------------------------------------------------------


async def test_kill9_right_after_acknowledged_puts_loses_none(live_cluster: ClusterHandle) -> None:
    h = live_cluster
    acked: list[tuple[str, dict[str, Any]]] = []
    with anyio.fail_after(DEADLINE):
        async with open_session(h.roster, h.identity("reqs"), "reqs") as session:

            async def put(i: int) -> None:
                key = f"req/d{i % 4}"
                acked.append((key, await session.request("put", {"key": key, "body": i})))

            async with anyio.create_task_group() as tg:
                for i in range(30):
                    tg.start_soon(put, i)
            old_pid = h.kill9("reqs")  # while the session is still open
    assert len(acked) == 30
    assert h.restart() == "started 1 owner(s): reqs; 5 running\n"
    assert h.owner_pid("reqs") != old_pid
    with anyio.fail_after(DEADLINE):
        async with open_session(h.roster, h.identity("planner"), "reqs") as session:
            got = await session.request("get", {"ids": [r["id"] for _, r in acked]})
            heads = await session.request("heads", {"keys": [f"req/d{j}" for j in range(4)]})
            stats = await session.request("stats")
        async with open_session(h.roster, h.identity("reqs"), "reqs") as session:
            after = await session.request("put", {"key": "req/d0", "body": "after"})
    records = [check_record(h, w) for w in got["records"]]
    assert [(r.key, r.id, r.seq) for r in records] == [(k, r["id"], r["seq"]) for k, r in acked]
    last: dict[str, dict[str, Any]] = {}
    for key, r in acked:
        if key not in last or r["seq"] > last[key]["seq"]:
            last[key] = r
    assert heads["heads"] == [
        [k, last[k]["id"], last[k]["seq"]] for k in (f"req/d{j}" for j in range(4))
    ]
    assert (stats["last_seq"], stats["keys"], stats["commits"]) == (30, 4, 0)
    assert after["seq"] == 31


async def test_store_is_insert_only_wal_full_and_loads_heads(tmp_path: Path) -> None:
    generate_key_file(tmp_path / "reqs.key")
    identity = load_identity("reqs", tmp_path / "reqs.key")
    db = tmp_path / "reqs.sqlite"
    with anyio.fail_after(DEADLINE):
        store = await Store.open(db, signer(identity), identity.name)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(store.run_committer)
                made: list[Record] = []

                async def put(i: int) -> None:
                    made.append(await store.wait_put(f"req/{i % 3}", "fact", [], i))

                async with anyio.create_task_group() as puts:
                    for i in range(12):
                        puts.start_soon(put, i)
                tg.cancel_scope.cancel()
            async with store._db.execute("PRAGMA synchronous") as cursor:
                assert await cursor.fetchone() == (2,)  # FULL
            assert sorted(r.seq for r in made) == list(range(1, 13))
            heads = dict(store.heads)
            assert (store.last_seq, store.records_written) == (12, 12)
            assert store.commits < 12
        finally:
            await store.close()
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        for statement in ("UPDATE records SET key = 'req/x'", "DELETE FROM records"):
            with pytest.raises(sqlite3.IntegrityError, match="^records are insert-only$"):
                conn.execute(statement)
        assert conn.execute("SELECT COUNT(*) FROM records").fetchone() == (12,)
    finally:
        conn.close()
    with anyio.fail_after(DEADLINE):
        reopened = await Store.open(db, signer(identity), identity.name)
        try:
            assert reopened.heads == heads and reopened.last_seq == 12
            assert {k: (v.id, v.seq) for k, v in heads.items()} == {
                k: max((r.seq, r.id) for r in made if r.key == k)[::-1]
                for k in ("req/0", "req/1", "req/2")
            }
            got = await reopened.get([r.id for r in made])
            assert got == made
        finally:
            await reopened.close()


# -- shutdown -----------------------------------------------------------------------------------


async def test_sigterm_finishes_and_exits_0(cluster_dir: ClusterHandle) -> None:
    h = cluster_dir
    proc = subprocess.Popen(
        [str(PLANFENCE), "owner", "serve", str(h.path), "--agent", "reqs"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line == f"owner reqs listening on 127.0.0.1:{h.port('reqs')}\n", line
        with anyio.fail_after(DEADLINE):
            async with open_session(h.roster, h.identity("planner"), "reqs") as session:
                await session.request("ping")  # the daemon is in its loop: signals handled
                proc.send_signal(signal.SIGTERM)
                code = await anyio.to_thread.run_sync(proc.wait, 15)
                with pytest.raises(TransportError):
                    await session.request("ping")
        assert code == 0
        assert proc.stdout.read() == ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
    # shutdown, then the open session is closed, then the daemon stops (store closed).
    events = [e["event"] for e in h.events("reqs")]
    assert events[-3:] == ["shutdown", "disconnected", "stopped"]
    assert h.events("reqs", "shutdown")[0]["signal"] == "SIGTERM"


async def test_owner_refuses_a_key_file_others_can_read(cluster_dir: ClusterHandle) -> None:
    h = cluster_dir
    key = h.cdir.key("reqs")
    os.chmod(key, 0o644)
    proc = await anyio.run_process(
        [str(PLANFENCE), "owner", "serve", str(h.path), "--agent", "reqs"], check=False
    )
    assert proc.returncode == 1
    assert proc.stdout == b""
    assert proc.stderr.decode() == (
        f"error: key file {key} is accessible by group or others (mode 644); run: chmod 600 {key}\n"
    )


async def test_store_takes_records_signed_elsewhere_only_with_a_rising_seq(tmp_path: Path) -> None:
    keys = {name: SigningKey.generate() for name in ("reqs", "inventory")}
    made = {
        name: [
            make_record(
                key, key=f"{name}/k", owner=name, seq=seq, parents=(), kind="fact", body=seq
            )
            for seq in (1, 2)
        ]
        for name, key in keys.items()
    }
    store = await Store.open(tmp_path / "central.sqlite")
    async with anyio.create_task_group() as tg:
        tg.start_soon(store.run_committer)
        # seqs are counted per owner: both owners may use seq 1
        for name in keys:
            assert await store.wait_put_record(made[name][0]) == made[name][0]
        with pytest.raises(StaleSeq, match="seq 1 of reqs is not above 1"):
            await store.wait_put_record(made["reqs"][0])
        with pytest.raises(TypeError, match="opened without a signer"):
            await store.wait_put("reqs/k", "fact", [], 1)
        await store.wait_put_record(made["reqs"][1])
        assert store.last_seq_by_owner == {"reqs": 2, "inventory": 1}
        assert store.heads["reqs/k"].id == made["reqs"][1].id
        tg.cancel_scope.cancel()
    await store.close()
