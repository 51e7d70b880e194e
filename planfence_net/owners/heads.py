"""The store's heads at open: read from its `heads` table and checked against the records.

The `heads` table (store.SCHEMA) holds one row per key: the key's last record inserted (its
id, seq and rowid), kept by an insert trigger in the transaction of each insert, whoever
inserts. `load_heads` reads it, as many rows as there are keys, and checks each head
against the record it names: its canonical wire form begins with the head's key, owner and
seq and hashes to its id (one BLAKE2b and a prefix compare; the full parse only when that
fails). Each owner's last seq (`last_seqs`, one index descent per owner) must be one of its
heads' seqs, since its last record is the head of its key. A table found wrong (missing,
naming rows an older compaction's VACUUM renumbered, or damaged) is made again from the
records (`rebuild_heads`, which reads every record) and judged again, strictly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import aiosqlite

from ..core.errors import PlanfenceError
from ..core.records import ID_LEN, Record, record_from_wire
from ..protocol.messages import pack, unpack

HEAD_BATCH = 500  # records per query when heads are checked at open (SQLite's variable limit)
# Every key's head as the records say (its last record inserted: SQLite takes the bare
# columns from the row holding MAX(rowid)).
REBUILD_HEADS = (
    "DELETE FROM heads",
    "INSERT INTO heads (key, id, seq, rid) SELECT key, id, seq, MAX(rowid) FROM records "
    "GROUP BY key",
)
# Each owner's last seq, one UNIQUE (owner, seq) index descent per owner.
LAST_SEQS = """
WITH RECURSIVE owners(owner) AS (
    SELECT MIN(owner) FROM records
    UNION ALL
    SELECT (SELECT MIN(owner) FROM records WHERE owner > owners.owner) FROM owners
    WHERE owners.owner IS NOT NULL
)
SELECT owner, (SELECT MAX(seq) FROM records WHERE records.owner = owners.owner)
FROM owners WHERE owner IS NOT NULL
"""
SIGNATURE = 2 + 64  # a wire form's last field: bin 8 header, 64 bytes

# Reads a stored record checked against the id asked (Store._checked): raises StoreError
# `store_damaged` when it cannot be read or does not hash to that id.
Checked = Callable[[bytes, bytes], Record]


@dataclass(frozen=True, slots=True)
class Head:
    key: str
    id: bytes
    seq: int


async def last_seqs(db: aiosqlite.Connection) -> dict[str, int]:
    """Each owner's highest seq in the store."""
    return {owner: seq for owner, seq in await db.execute_fetchall(LAST_SEQS)}


async def rebuild_heads(db: aiosqlite.Connection) -> None:
    """Make the `heads` table again from the records (reads every record) and commit."""
    for statement in REBUILD_HEADS:
        await db.execute(statement)
    await db.commit()


async def load_heads(
    db: aiosqlite.Connection, seqs: dict[str, int], checked: Checked, *, strict: bool
) -> tuple[dict[str, Head], str | None]:
    """The heads of the `heads` table, and what does not match (None when all does): a
    head that is not the record it names, or an owner's last seq in `seqs` that is not a
    head's. `strict`: a head whose record cannot be read or does not hash to its id raises
    StoreError `store_damaged` (through `checked`)."""
    rows = await db.execute_fetchall("SELECT key, id, seq, rid FROM heads")
    heads = {key: Head(key, rid, seq) for key, rid, seq, _ in rows}
    last: dict[str, int] = {}
    ordered = sorted((row[3], heads[row[0]]) for row in rows)
    wrong = await _check_heads(db, ordered, last, checked, strict)
    if wrong is not None:
        return heads, f"the head of {wrong!r} does not match its record"
    for owner in sorted({*last, *seqs}):
        if last.get(owner) != seqs.get(owner):
            return heads, (
                f"the seqs of {owner} end at {seqs.get(owner, 0)} "
                f"but its heads at {last.get(owner, 0)}"
            )
    return heads, None


async def _check_heads(
    db: aiosqlite.Connection,
    rows: list[tuple[int, Head]],
    last: dict[str, int],
    checked: Checked,
    strict: bool,
) -> str | None:
    """The key of the first head of `rows` ((rowid, head) in rowid order) whose record is
    not the one it names by id column, key, seq and hash (None when all are), filling `last`
    with each owner's highest head seq. Each record is read by its rowid, one B-tree descent
    in file order (by id, through the id index, took 10 x longer at 10^5 heads)."""
    for at in range(0, len(rows), HEAD_BATCH):
        batch = rows[at : at + HEAD_BATCH]
        rowids = [rowid for rowid, _ in batch]
        found = await db.execute_fetchall(
            f"SELECT rowid, owner, id, wire FROM records WHERE rowid IN "
            f"({','.join('?' * len(rowids))})",
            rowids,
        )
        stored = {rowid: (owner, rid, wire) for rowid, owner, rid, wire in found}
        for rowid, head in batch:
            owner, rid, wire = stored.get(rowid, ("", b"", b""))
            if rid != head.id or not _is_head_record(wire, head, owner):
                record = _parsed(wire)  # not the canonical form: the full check
                if record is None or (rid, record.id, record.key, record.seq) != (
                    head.id,
                    head.id,
                    head.key,
                    head.seq,
                ):
                    if strict and wire:
                        checked(head.id, wire)  # unreadable, or another id: raises
                    return head.key
                owner = record.owner
            if head.seq > last.get(owner, 0):
                last[owner] = head.seq
    return None


def _parsed(wire: bytes) -> Record | None:
    """The record `wire` holds, None when it holds none."""
    try:
        return record_from_wire(unpack(wire))
    except (PlanfenceError, ValueError, TypeError):
        return None


def _is_head_record(wire: bytes, head: Head, owner: str) -> bool:
    """True when `wire` is the canonical wire form (as the store writes it) of a record of
    `head`'s key and seq by `owner` that hashes to `head`'s id: the wire's first fields
    are those, and its signed fields (the wire without its signature, under an 8-element
    array header) hash to the id. False leaves the judgement to the full parse."""
    prefix = b"\x99\xa3pf1" + pack(head.key) + pack(owner) + pack(head.seq)
    if len(wire) < len(prefix) + SIGNATURE or not wire.startswith(prefix):
        return False
    if wire[-SIGNATURE : -SIGNATURE + 2] != b"\xc4\x40":
        return False
    signed = b"\x98" + memoryview(wire)[1:-SIGNATURE]
    return hashlib.blake2b(signed, digest_size=ID_LEN).digest() == head.id
