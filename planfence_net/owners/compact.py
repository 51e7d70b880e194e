"""Compaction: drop an owner's old record versions that no live lineage names.

    result = compact(cdir, "reqs", keep=1)      # the owner must be stopped

An owner only ever adds records, so its store, its start-up (quick_check reads every page)
and its disk grow with its history. `compact` keeps, in the store of
`agent`:

* every key's `keep` newest records (so always its head, and the owner's last seq);
* every record the lineage of any head in any store of the cluster folder names: parents
  followed breadth first through every store, up to `MAX_DEPTH` hops (the gate's walk
  limit). Every live plan is the head of its key, so every live plan, and any plan built
  later on today's heads, still walks its whole lineage and is authorized as before;

and deletes the rest in one transaction (the insert-only trigger is dropped and made again
inside it), then VACUUMs and makes the heads table again (VACUUM may renumber rows). A plan whose lineage named a removed record (it was replanned or
its key was rewritten since: it was no longer live) is refused with `missing_lineage`.

Raises StoreError `store_in_use` while the owner runs (its store lock) and ConfigError when
`keep` < 1 or a store of the roster is not in the folder (its lineages could not be
followed: compact where every store of the cluster is).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..cluster.folder import ClusterDir
from ..core.errors import ConfigError, StoreError
from ..core.records import record_from_wire
from ..protocol.messages import unpack
from .guards import StoreLock
from .heads import REBUILD_HEADS
from .store import SCHEMA

MAX_DEPTH = 32  # core.lineage.walk's default max_depth: deeper records are never walked
BATCH = 500  # ids per query (SQLite's variable limit)
# the insert-only trigger against deletes, as Store.open makes it (store.SCHEMA)
NO_DELETE = next(s for s in SCHEMA.split(";\n") if "records_no_delete" in s)


@dataclass(frozen=True, slots=True)
class Compaction:
    agent: str
    records_before: int
    removed: int
    kept_for_lineage: int  # beyond the newest `keep` of their key
    bytes_before: int
    bytes_after: int

    @property
    def records_after(self) -> int:
        return self.records_before - self.removed


def compact(cdir: ClusterDir, agent: str, keep: int) -> Compaction:
    """Compact `agent`'s store (see the module docstring); returns what it did."""
    if keep < 1:
        raise ConfigError(f"--keep must be at least 1 (every key keeps its head), got {keep}")
    cdir.roster().agent(agent)  # an unknown agent: ConfigError naming it
    target = cdir.db(agent)
    stores = {a.name: cdir.db(a.name) for a in cdir.roster().agents}
    absent = sorted(name for name, path in stores.items() if not path.exists())
    if absent:
        raise ConfigError(
            f"no store here for {', '.join(absent)}: the lineages their records name cannot "
            f"be followed; compact in the folder that holds every store of the cluster"
        )
    lock = StoreLock.acquire(target)
    try:
        before = _disk_bytes(target)
        readers = {name: _read_only(path) for name, path in stores.items() if name != agent}
        db = sqlite3.connect(target, isolation_level=None)
        try:
            readers[agent] = db
            named = _lineage_of_heads(list(readers.values()))
            total, removed, kept = _delete(db, keep, named)
            db.execute("VACUUM")
            _rebuild_heads(db)
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            for reader in readers.values():
                reader.close()
        return Compaction(agent, total, removed, kept, before, _disk_bytes(target))
    except sqlite3.Error as exc:
        raise StoreError("store_damaged", f"cannot compact {target}: {exc}") from None
    finally:
        lock.release()


def _rebuild_heads(db: sqlite3.Connection) -> None:
    """Make the store's heads table again: VACUUM may renumber the rows it names by rowid
    (Store.open would find them stale and rebuild it itself, reading every record)."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'heads'").fetchone() is None:
        return  # a store from before the heads table: Store.open makes it
    db.execute("BEGIN IMMEDIATE")
    try:
        for statement in REBUILD_HEADS:
            db.execute(statement)
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def _disk_bytes(db: Path) -> int:
    return sum(f.stat().st_size for f in db.parent.glob(db.name + "*") if f.suffix != ".lock")


def _lineage_of_heads(dbs: list[sqlite3.Connection]) -> set[bytes]:
    """Ids of every record within MAX_DEPTH parent hops of a head of any of `dbs`."""
    level: set[bytes] = set()
    for db in dbs:
        heads = db.execute("SELECT id, MAX(rowid) FROM records GROUP BY key")  # as Store.open
        level.update(rid for rid, _ in heads)
    named = set(level)
    for _ in range(MAX_DEPTH):
        parents: set[bytes] = set()
        for wire in _wires(dbs, level):
            parents.update(record_from_wire(unpack(wire)).parents)
        level = parents - named
        if not level:
            break
        named |= level
    return named


def _wires(dbs: list[sqlite3.Connection], ids: Iterable[bytes]) -> Iterable[bytes]:
    ordered = list(ids)
    for at in range(0, len(ordered), BATCH):
        chunk = ordered[at : at + BATCH]
        marks = ",".join("?" * len(chunk))
        for db in dbs:
            for (wire,) in db.execute(f"SELECT wire FROM records WHERE id IN ({marks})", chunk):
                yield wire


def _delete(db: sqlite3.Connection, keep: int, named: set[bytes]) -> tuple[int, int, int]:
    """Delete every record that is neither among its key's `keep` newest nor `named`, in one
    transaction; (records before, removed, kept only because named)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        (total,) = db.execute("SELECT COUNT(*) FROM records").fetchone()
        db.execute("CREATE TEMP TABLE named (id BLOB PRIMARY KEY)")
        db.executemany("INSERT INTO named VALUES (?)", ((rid,) for rid in named))
        db.execute(
            "CREATE TEMP TABLE old AS SELECT rowid AS r, id FROM (SELECT rowid, id, "
            "ROW_NUMBER() OVER (PARTITION BY key ORDER BY rowid DESC) AS n FROM records) "
            "WHERE n > ?",
            (keep,),
        )
        (kept,) = db.execute("SELECT COUNT(*) FROM old WHERE id IN named").fetchone()
        db.execute("DROP TRIGGER records_no_delete")
        cursor = db.execute(
            "DELETE FROM records WHERE rowid IN (SELECT r FROM old WHERE id NOT IN named)"
        )
        removed = cursor.rowcount
        db.execute(NO_DELETE)
        db.execute("DROP TABLE old")
        db.execute("DROP TABLE named")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return total, removed, kept
