"""The store's heads table: kept by the insert trigger, read at open, rebuilt when stale."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest
from nacl.signing import SigningKey

from planfence_net.core.identity import Identity
from planfence_net.core.records import Record
from planfence_net.owners.heads import Head
from planfence_net.owners.startup import signer
from planfence_net.owners.store import RECENT, Store

pytestmark = pytest.mark.anyio

REQS = Identity("reqs", SigningKey(bytes(range(32, 64))))


async def _write(db: Path, items: list[tuple[str, int]]) -> list[Record]:
    store = await Store.open(db, signer(REQS), "reqs")
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.run_committer)
            records = await store.wait_put_many([(k, "fact", [], {"n": n}) for k, n in items])
            tg.cancel_scope.cancel()
    finally:
        await store.close()
    return records


async def _heads(db: Path) -> tuple[dict[str, Head], dict[str, int]]:
    store = await Store.open(db, signer(REQS), "reqs")
    try:
        return store.heads, store.last_seq_by_owner
    finally:
        await store.close()


def _sql(db: Path, *statements: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db)
    try:
        rows: list[tuple[object, ...]] = []
        for statement in statements:
            rows = conn.execute(statement).fetchall()
        conn.commit()
        return rows
    finally:
        conn.close()


def _expected(records: list[Record]) -> dict[str, Head]:
    return {r.key: Head(r.key, r.id, r.seq) for r in records}  # the last of each key wins


async def test_the_trigger_keeps_a_head_per_key_and_open_reads_them(tmp_path: Path) -> None:
    db = tmp_path / "reqs.sqlite"
    records = await _write(db, [("req/a", 1), ("req/b", 2), ("req/a", 3)])
    assert sorted(_sql(db, "SELECT key, seq FROM heads")) == [("req/a", 3), ("req/b", 2)]
    assert await _heads(db) == (_expected(records), {"reqs": 3})


async def test_a_store_from_before_the_heads_table_opens_with_its_heads(tmp_path: Path) -> None:
    db = tmp_path / "reqs.sqlite"
    records = await _write(db, [("req/a", 1), ("req/b", 2), ("req/a", 3)])
    _sql(db, "DROP TRIGGER records_head", "DROP TABLE heads")
    assert await _heads(db) == (_expected(records), {"reqs": 3})
    assert sorted(_sql(db, "SELECT key, seq FROM heads")) == [("req/a", 3), ("req/b", 2)]
    more = await _write(db, [("req/b", 4)])  # the trigger is back: later writes keep it
    assert await _heads(db) == (_expected(records + more), {"reqs": 4})


async def test_heads_naming_renumbered_rows_are_rebuilt_from_the_records(tmp_path: Path) -> None:
    """An older compaction's VACUUM may renumber rows: the heads' rowids then name other
    records (or none), and open rebuilds the table rather than refusing the store."""
    db = tmp_path / "reqs.sqlite"
    records = await _write(db, [(f"req/{i % 3}", i) for i in range(7)])
    _sql(db, "UPDATE heads SET rid = rid + 1000")  # rows no longer there
    assert await _heads(db) == (_expected(records), {"reqs": 7})
    _sql(db, "UPDATE heads SET rid = 8 - rid")  # rows of other records
    assert await _heads(db) == (_expected(records), {"reqs": 7})


async def test_a_last_seq_no_head_accounts_for_is_refused(tmp_path: Path) -> None:
    """Each owner's last record is the head of its key: a records column claiming a higher
    seq than every head (a damaged row that is no head) refuses the store."""
    db = tmp_path / "reqs.sqlite"
    await _write(db, [("req/a", 1), ("req/a", 2), ("req/b", 3)])
    _sql(db, "DROP TRIGGER records_no_update", "UPDATE records SET seq = 99 WHERE seq = 1")
    with pytest.raises(Exception) as info:
        await _heads(db)
    assert getattr(info.value, "code", None) == "store_damaged"
    assert "the seqs of reqs end at 99 but its heads at 3" in str(info.value)


async def test_the_records_written_last_are_read_from_memory(tmp_path: Path) -> None:
    """A record just written (a changed head's record, a new plan) is answered from memory,
    with the size its stored form has; one written RECENT records earlier is read from the
    file, as the same record."""
    store = await Store.open(tmp_path / "reqs.sqlite", signer(REQS), "reqs")
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.run_committer)
            first = await store.wait_put_many([("req/old", "fact", [], {"n": 0})])
            items = [(f"req/k{n}", "fact", [], {"n": n}) for n in range(RECENT)]
            last = await store.wait_put_many(items)
            tg.cancel_scope.cancel()
        assert len(store.recent) == RECENT and first[0].id not in store.recent
        (got,) = await store.get([last[-1].id])
        assert got is store.recent[last[-1].id][0]  # no read from the file
        (old,) = await store.get([first[0].id])
        assert old == first[0] and old is not first[0]
        stored = _sql(store.path, f"SELECT length(wire) FROM records WHERE seq = {last[-1].seq}")
        assert await store.sizes([last[-1].id]) == {last[-1].id: stored[0][0]}
    finally:
        await store.close()
