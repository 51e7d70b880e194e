"""Subscriptions and sync groups: which updates every subscriber of a group has acknowledged (pure, no I/O).

A subscription may join a named group (`subscribe {"group": ...}`). Its pushes then carry the
seq they cover, and its subscriber acknowledges what it has applied (`ack`). An update of a
key is **synchronized** for the group once every member that was sent it has acknowledged a
seq at or above it; `synced` answers only then. A member that was never sent an update (its
keys do not include the updated key) owes no acknowledgement for it; held-back rows of a
K > 1 subscription are flushed first, so nothing owed is left unsent.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from ..core.records import Record, wire_size_bound
from ..protocol.messages import encode_response


def record_bytes(record: Record) -> int:
    """An upper bound of `record`'s encoded wire form (what it adds to a push)."""
    return wire_size_bound(record.key, record.owner, record.kind, record.parents, record.size)


class Subscription:
    """Head updates owed to one subscribe request: pushed after every `every` updates.

    With a `budget` (bytes, > 0: the subscriber asked for records) the subscription also
    holds the records of its rows, in row order, while their encoded sizes together fit in
    `budget`; its next push carries them as "records". A record that does not fit is not
    held: its row goes out alone and the subscriber reads it with `get`."""

    __slots__ = ("keys", "every", "rows", "group", "sent", "acked", "budget", "held", "held_bytes")

    def __init__(
        self, keys: set[str] | None, every: int, group: str | None = None, budget: int = 0
    ) -> None:
        self.keys, self.every, self.group, self.budget = keys, every, group, budget
        self.rows: list[list[Any]] = []
        self.sent = self.acked = 0  # sync groups only (owners/syncgroups.py)
        self.held: list[Record] = []  # records for the next push (budget > 0 only)
        self.held_bytes = 0

    def add(self, records: list[Record]) -> list[list[Any]] | None:
        """Take a commit's records; returns the rows to push once `every` have gathered."""
        return self.add_rows([[r.key, r.id, r.seq] for r in records], records)

    def add_rows(
        self, rows: list[list[Any]], records: list[Record] | None = None
    ) -> list[list[Any]] | None:
        """`add` for rows [key, id, seq] of every key (this subscription takes its own);
        `records`, when given, are the rows' records in the same order."""
        if self.keys is None:
            self.rows += rows
            mine = records
        else:
            self.rows += [row for row in rows if row[0] in self.keys]
            mine = None if records is None else [r for r in records if r.key in self.keys]
        if self.budget and mine:
            self._hold(mine)
        if len(self.rows) < self.every:
            return None
        return self.flush()

    def _hold(self, records: list[Record]) -> None:
        for record in records:
            size = record_bytes(record)
            if self.held_bytes + size > self.budget:
                return  # this one and the rest of the push: rows only (read with `get`)
            self.held.append(record)
            self.held_bytes += size

    def flush(self) -> list[list[Any]] | None:
        """The rows gathered so far (None if none), as one push."""
        if not self.rows:
            return None
        rows, self.rows = self.rows, []
        return rows

    def push(self, req_id: int, rows: list[list[Any]]) -> bytes:
        """The push message for `rows`; a group push also says the seq it covers, and a
        subscription with a budget adds the records it holds (in row order)."""
        result: dict[str, Any] = {"heads": rows}
        if self.group is not None:
            self.sent = max(self.sent, max(row[2] for row in rows))
            result["seq"] = self.sent
        if self.budget:
            result["records"] = [r.to_wire() for r in self.held]
            self.held, self.held_bytes = [], 0
        return encode_response(req_id, True, result)


class Member(Protocol):
    """A group subscription as seen by the tracker."""

    group: str | None
    sent: int  # highest seq pushed to the subscriber
    acked: int  # highest seq the subscriber has acknowledged


def members(subscriptions: Iterable[Member], group: str) -> list[Member]:
    return [s for s in subscriptions if s.group == group]


def acknowledge(subscriptions: Iterable[Member], group: str, seq: int) -> int:
    """Record an `ack` of `seq` on every subscription of `group` in one session; returns how
    many subscriptions it applied to (0 means the session is not in the group)."""
    found = members(subscriptions, group)
    for member in found:
        member.acked = max(member.acked, min(seq, member.sent))
    return len(found)


def is_synchronized(subscriptions: Iterable[Member], group: str, target: int) -> bool:
    """True when every member of `group` has acknowledged every update up to `target` that it
    was sent (an empty group is trivially synchronized)."""
    return all(m.acked >= min(target, m.sent) for m in members(subscriptions, group))
