"""Stores that never lie (issue 9 D8, D9, two daemons on one store, disk full), against real
owner processes on 127.0.0.1: a damaged store or one that lost acknowledged records refuses
to start in one line; a damaged record is refused, not served; a full disk has its own code.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from planfence_net.bench.torture.diskfull import fill, mount_tmpfs, unmount
from planfence_net.cli.main import app
from planfence_net.core.errors import RequestError
from planfence_net.core.records import record_from_wire
from planfence_net.net.client import open_session
from planfence_net.owners.startup import signer
from planfence_net.owners.store import Store
from support.cluster import PLANFENCE, ClusterHandle, wait_exit

pytestmark = pytest.mark.anyio
SERVE_TIMEOUT = 20.0
LOST = (
    "acknowledged records were lost; restore the store from a backup, or start with "
    "--accept-loss to sign above seq {0} (the lost records stay lost)"
)


def serve(h: ClusterHandle, *extra: str) -> subprocess.CompletedProcess[str]:
    """`planfence owner serve` for reqs, expected to exit; AssertionError if it hangs."""
    try:
        return subprocess.run(
            [str(PLANFENCE), "owner", "serve", str(h.path), "--agent", "reqs", *extra],
            capture_output=True,
            text=True,
            timeout=SERVE_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"owner serve did not exit within {SERVE_TIMEOUT} s: {exc.stdout!r} {exc.stderr!r}"
        ) from None


@contextmanager
def running_owner(h: ClusterHandle, *extra: str) -> Iterator[subprocess.Popen[str]]:
    """reqs' owner as a real process, serving once this yields; SIGKILLed on exit."""
    proc = subprocess.Popen(
        [str(PLANFENCE), "owner", "serve", str(h.path), "--agent", "reqs", *extra],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("owner reqs listening on "), line + proc.stdout.read()
        yield proc
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


async def put_many(h: ClusterHandle, count: int, prefix: str = "n") -> list[dict]:  # type: ignore[type-arg]
    async with open_session(h.roster, h.identity("reqs"), "reqs") as session:
        return [
            await session.request(
                "put",
                {
                    "key": f"req/{i % 3}",
                    "kind": "fact",
                    "parents": [],
                    "body": {"m": f"{prefix}{i}"},
                },
            )
            for i in range(count)
        ]


async def write_records(h: ClusterHandle, count: int) -> None:
    """`count` acknowledged records in reqs' store, written through the library."""
    store = await Store.open(h.cdir.db("reqs"), signer(h.identity("reqs")), "reqs")
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.run_committer)
            for i in range(count):
                await store.wait_put(f"req/{i}", "fact", [], {"n": i})
            tg.cancel_scope.cancel()
    finally:
        await store.close()


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert (proc.returncode, proc.stdout) == (1, ""), (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: "), proc.stderr
    return proc.stderr[len("error: ") : -1]


# -- D8: a damaged store refuses to start ------------------------------------------------------


async def test_a_store_with_a_bad_header_refuses_to_start_in_one_line(
    cluster_dir: ClusterHandle,
) -> None:
    await write_records(cluster_dir, 12)
    db = cluster_dir.cdir.db("reqs")
    with open(db, "r+b") as f:
        f.write(b"not a database!\0")
    assert one_line(serve(cluster_dir)) == (
        f"store {db} is damaged (file is not a database); restore it from a backup"
    )
    assert cluster_dir.events("reqs", "store_refused")[0]["code"] == "store_damaged"


async def test_a_truncated_store_refuses_to_start_in_one_line(cluster_dir: ClusterHandle) -> None:
    await write_records(cluster_dir, 300)
    db = cluster_dir.cdir.db("reqs")
    os.truncate(db, db.stat().st_size // 2)
    line = one_line(serve(cluster_dir))
    assert line.startswith(f"store {db} is damaged (") and line.endswith(
        "); restore it from a backup"
    ), line


async def test_a_zero_byte_store_of_an_owner_that_acknowledged_refuses_to_start(
    cluster_dir: ClusterHandle,
) -> None:
    await write_records(cluster_dir, 12)
    db = cluster_dir.cdir.db("reqs")
    os.truncate(db, 0)
    assert one_line(serve(cluster_dir)) == (
        f"store {db} holds seqs up to 0 but seq 12 was acknowledged: " + LOST.format(12)
    )


def test_cluster_up_reports_the_refused_store_and_never_calls_it_running(
    cluster_dir: ClusterHandle,
) -> None:
    anyio.run(write_records, cluster_dir, 3)
    db = cluster_dir.cdir.db("reqs").resolve()
    with open(db, "r+b") as f:
        f.write(b"not a database!\0")
    expected = (
        f"error: reqs failed to start: store {db} is damaged (file is not a database); "
        f"restore it from a backup (stopped the owners this command started: planner, "
        f"inventory, ops, audit)\n"
    )
    for _ in range(2):  # a second `cluster up` tries again and says the same
        result = CliRunner().invoke(app, ["cluster", "up", str(cluster_dir.path)])
        assert (result.exit_code, result.stdout, result.stderr) == (1, "", expected)
        status = CliRunner().invoke(app, ["cluster", "status", str(cluster_dir.path), "--json"])
        alive = {row["name"]: row["alive"] for row in json.loads(status.stdout)}
        assert alive == dict.fromkeys(["planner", "reqs", "inventory", "ops", "audit"], False)


async def test_a_damaged_index_column_refuses_to_start(cluster_dir: ClusterHandle) -> None:
    """A head is loaded from the key/id/seq columns, not from the signed record: a column
    that no longer matches its record is found at open, never served as a head."""
    await write_records(cluster_dir, 3)
    db = cluster_dir.cdir.db("reqs")
    conn = sqlite3.connect(db)
    try:  # damage one column as a flipped bit would (the insert-only trigger is bypassed)
        conn.execute("DROP TRIGGER records_no_update")
        conn.execute("UPDATE records SET seq = seq + 64 WHERE key = 'req/1'")
        conn.commit()
    finally:
        conn.close()
    assert one_line(serve(cluster_dir)) == (
        f"store {db} is damaged (the head of 'req/1' does "
        f"not match its record); restore it from a backup"
    )


async def test_a_damaged_head_id_refuses_to_start(cluster_dir: ClusterHandle) -> None:
    """A head's record is read by its rowid at open and must hash to the id column: a
    damaged id is found then, never served as a head."""
    await write_records(cluster_dir, 3)
    db = cluster_dir.cdir.db("reqs")
    damaged = bytes(range(32))
    conn = sqlite3.connect(db)
    try:
        conn.execute("DROP TRIGGER records_no_update")
        conn.execute("UPDATE records SET id = ? WHERE key = 'req/2'", (damaged,))
        conn.commit()
    finally:
        conn.close()
    assert one_line(serve(cluster_dir)) == (
        f"record {damaged.hex()} in store reqs.sqlite does not hash to its id: the store is damaged"
    )


# -- D9: lost acknowledged records, damaged records ----------------------------------------------


async def test_a_store_that_lost_its_wal_after_kill9_refuses_then_accept_loss_signs_above(
    cluster_dir: ClusterHandle,
) -> None:
    h = cluster_dir
    db = h.cdir.db("reqs")
    with running_owner(h) as proc:
        acked = await put_many(h, 40)
        proc.send_signal(signal.SIGKILL)
        assert wait_exit(proc.pid)
    assert [a["seq"] for a in acked] == list(range(1, 41))
    for suffix in ("-wal", "-shm"):
        db.with_name(db.name + suffix).unlink()
    line = one_line(serve(h))
    assert line.startswith(f"store {db} holds seqs up to ") and line.endswith(
        " but seq 40 was acknowledged: " + LOST.format(40)
    ), line
    with running_owner(h, "--accept-loss"):
        after = await put_many(h, 1, "after")
    assert after[0]["seq"] == 41  # never a used seq again


async def test_a_flipped_bit_in_a_stored_record_is_refused_not_served(
    cluster_dir: ClusterHandle,
) -> None:
    h = cluster_dir
    with running_owner(h) as proc:
        flipped, kept = (await put_many(h, 4, "FLIP-ME-"))[:2]  # neither is a head: a
        # damaged head is found at open (test_a_damaged_index_column_refuses_to_start)
        proc.send_signal(signal.SIGTERM)  # a clean stop checkpoints the WAL into the file
        assert proc.wait(15) == 0
    db = h.cdir.db("reqs")
    data = bytearray(db.read_bytes())
    at = data.index(b"FLIP-ME-0")
    data[at] ^= 0x01
    db.write_bytes(bytes(data))
    with running_owner(h):
        async with open_session(h.roster, h.identity("planner"), "reqs") as session:
            with pytest.raises(RequestError) as refused:
                await session.request("get", {"ids": [flipped["id"]]})
            served = await session.request("get", {"ids": [kept["id"]]})
    why = (
        f"record {flipped['id'].hex()} in store reqs.sqlite does not hash to its id: "
        f"the store is damaged"
    )
    assert (refused.value.code, refused.value.message) == ("store_damaged", why)
    assert [record_from_wire(w).seq for w in served["records"]] == [2]  # the intact one
    assert h.wait_event("reqs", "error", lambda e: e.get("reason") == why)["op"] == "get"


# -- one daemon per store -----------------------------------------------------------------------


async def test_a_second_daemon_on_the_same_store_is_refused_with_the_pid(
    cluster_dir: ClusterHandle,
) -> None:
    h = cluster_dir
    with running_owner(h) as first:
        second = serve(h, "--listen", "127.0.0.1:0")
        assert one_line(second) == (
            f"store {h.cdir.db('reqs')} is in use by pid {first.pid}; stop that owner first"
        )
        assert (await put_many(h, 1))[0]["seq"] == 1  # the first one still serves


async def test_a_deleted_lock_file_lets_no_second_daemon_in(cluster_dir: ClusterHandle) -> None:
    """The store file itself is flock'ed: without its lock file, a second daemon is still
    refused in one line naming the first one's pid."""
    h = cluster_dir
    with running_owner(h) as first:
        lock = h.cdir.db("reqs").with_name(h.cdir.db("reqs").name + ".lock")
        lock.unlink()
        second = serve(h, "--listen", "127.0.0.1:0")
        assert (second.returncode, one_line(second)) == (
            1,
            f"store {h.cdir.db('reqs')} is in use by pid {first.pid}; stop that owner first",
        )
        assert (await put_many(h, 1))[0]["seq"] == 1  # the first one still serves


# -- disk full ----------------------------------------------------------------------------------


@contextmanager
def small_disk(folder: Path, size: str = "2m") -> Iterator[None]:
    """A tmpfs of `size` mounted on `folder`; skips the test where mounting is not allowed."""
    refused = mount_tmpfs(folder, size)
    if refused is not None:
        pytest.skip(f"cannot mount a tmpfs here: {refused}")
    try:
        yield
    finally:
        unmount(folder)


async def test_a_full_disk_is_reported_as_store_full_and_reads_keep_working(
    cluster_dir: ClusterHandle,
) -> None:
    h = cluster_dir
    with small_disk(h.cdir.db("reqs").parent), running_owner(h):
        acked = await put_many(h, 5)
        filler = h.cdir.db("reqs").parent / "filler"
        fill(filler)
        async with open_session(h.roster, h.identity("reqs"), "reqs") as session:
            with pytest.raises(RequestError) as full:
                for _i in range(50):  # the WAL may still hold a page or two
                    await session.request(
                        "put",
                        {"key": "req/full", "kind": "fact", "parents": [], "body": "x" * 4000},
                    )
            assert (full.value.code, full.value.message) == (
                "store_full",
                "the owner's disk is full; the put is not acknowledged",
            )
            got = await session.request("get", {"ids": [a["id"] for a in acked]})
            assert len(got["records"]) == 5
            assert (await session.request("ping"))["agent"] == "reqs"
            filler.unlink()
            again = await session.request(
                "put", {"key": "req/full", "kind": "fact", "parents": [], "body": "after"}
            )
            stats = await session.request("stats")
        assert again["seq"] == stats["last_seq"] > 5
