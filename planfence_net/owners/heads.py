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

HEAD_BATCH = 500  # heads fetched at a time when they are checked at open
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
# Each head with the record its rowid names (none: NULLs), in rowid order: file order.
HEADS_WITH_RECORDS = (
    "SELECT h.key, h.id, h.seq, r.owner, r.id, r.wire "
    "FROM (SELECT key, id, seq, rid FROM heads ORDER BY rid) AS h "
    "LEFT JOIN records AS r ON r.rowid = h.rid"
)
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
    StoreError `store_damaged` (through `checked`). Rows come HEAD_BATCH at a time, each
    head with its record (by rowid), so what the check reads is never held all at once."""
    heads: dict[str, Head] = {}
    last: dict[str, int] = {}
    async with db.execute(HEADS_WITH_RECORDS) as cursor:
        while rows := await cursor.fetchmany(HEAD_BATCH):
            for key, hid, seq, owner, rid, wire in rows:
                head = heads[key] = Head(key, hid, seq)
                owner = _record_owner(head, owner, rid, wire or b"", checked, strict)
                if owner is None:
                    return heads, f"the head of {key!r} does not match its record"
                if seq > last.get(owner, 0):
                    last[owner] = seq
    for owner in sorted({*last, *seqs}):
        if last.get(owner) != seqs.get(owner):
            return heads, (
                f"the seqs of {owner} end at {seqs.get(owner, 0)} "
                f"but its heads at {last.get(owner, 0)}"
            )
    return heads, None


def _record_owner(
    head: Head, owner: str | None, rid: bytes | None, wire: bytes, checked: Checked, strict: bool
) -> str | None:
    """The owner of the record a head names (by its row's id column `rid` and `wire`), when
    it is that head's record by id, key, seq and hash; None when it is not (also a row an
    older compaction's VACUUM renumbered). With `strict`, one that cannot be read or does
    not hash to the head's id raises StoreError `store_damaged`."""
    if rid == head.id and owner is not None and _is_head_record(wire, head, owner):
        return owner
    record = _parsed(wire)  # not the canonical form: the full check
    if record is None or (rid, record.id, record.key, record.seq) != (
        head.id,
        head.id,
        head.key,
        head.seq,
    ):
        if strict and wire:
            checked(head.id, wire)  # unreadable, or another id: raises
        return None
    return record.owner


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
