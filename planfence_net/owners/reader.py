"""Read an owner's store from its SQLite file, read-only: local inspection for the CLI.

The owner keeps serving while this reads (WAL mode lets readers and the writer proceed
together). Nothing here writes; records are returned as stored, already verified by the
owner that wrote them.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from ..core.records import Record, record_from_wire
from ..protocol.messages import unpack


@dataclass(frozen=True, slots=True)
class StoreReader:
    """The records in one owner's store file."""

    path: Path

    def _query(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        if not self.path.exists():
            raise ConfigError(f"no store at {self.path} (has the owner ever run?)")
        try:
            with closing(sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)) as db:
                return db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise ConfigError(f"cannot read the store {self.path}: {exc}") from None

    def _records(self, where: str = "", args: tuple[object, ...] = ()) -> list[Record]:
        rows = self._query(f"SELECT wire FROM records {where} ORDER BY rowid", args)
        return [record_from_wire(unpack(bytes(wire))) for (wire,) in rows]

    def records(self) -> list[Record]:
        """Every record, oldest first."""
        return self._records()

    def history(self, key: str) -> list[Record]:
        """Every version of `key`, oldest first (the last one is the head)."""
        return self._records("WHERE key = ?", (key,))

    def ids_with_prefix(self, prefix: str) -> list[bytes]:
        """The ids whose lowercase hex starts with `prefix` (lowercase hex)."""
        rows = self._query(
            "SELECT id FROM records WHERE substr(lower(hex(id)), 1, ?) = ?", (len(prefix), prefix)
        )
        return [bytes(rid) for (rid,) in rows]


def cluster_stores(data_dir: Path) -> list[StoreReader]:
    """A reader for every store file in a cluster's data folder."""
    return [StoreReader(p) for p in sorted(data_dir.glob("*.sqlite"))]
