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

from ..core.records import Record
from ..protocol.messages import encode_response


class Subscription:
    """Head updates owed to one subscribe request: pushed after every `every` updates."""

    __slots__ = ("keys", "every", "rows", "group", "sent", "acked")

    def __init__(self, keys: set[str] | None, every: int, group: str | None = None) -> None:
        self.keys, self.every, self.group = keys, every, group
        self.rows: list[list[Any]] = []
        self.sent = self.acked = 0  # sync groups only (owners/syncgroups.py)

    def add(self, records: list[Record]) -> list[list[Any]] | None:
        """Take a commit's records; returns the rows to push once `every` have gathered."""
        return self.add_rows([[r.key, r.id, r.seq] for r in records])

    def add_rows(self, rows: list[list[Any]]) -> list[list[Any]] | None:
        """`add` for rows [key, id, seq] of every key (this subscription takes its own)."""
        if self.keys is None:
            self.rows += rows
        else:
            self.rows += [row for row in rows if row[0] in self.keys]
        if len(self.rows) < self.every:
            return None
        return self.flush()

    def flush(self) -> list[list[Any]] | None:
        """The rows gathered so far (None if none), as one push."""
        if not self.rows:
            return None
        rows, self.rows = self.rows, []
        return rows

    def push(self, req_id: int, rows: list[list[Any]]) -> bytes:
        """The push message for `rows`; a group push also says the seq it covers."""
        if self.group is None:
            return encode_response(req_id, True, {"heads": rows})
        self.sent = max(self.sent, max(row[2] for row in rows))
        return encode_response(req_id, True, {"heads": rows, "seq": self.sent})


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
