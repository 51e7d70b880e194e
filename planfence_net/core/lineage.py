"""Lineage walk: find which version of each declared key a plan was derived from.

This is step 1 of the gate (docs/ARCHITECTURE.md), as pure code: records come from a `lookup`
callable, and the walk says what it found (`Frontier`), what it could not find (`Missing`:
the caller fetches those ids and walks again), or why the lineage can never be accepted
(`Blocked`).

Depth counts parent hops from a root: roots are at depth 0, their parents at depth 1. The
walk never looks at a record deeper than `max_depth`, and never admits more than `max_nodes`
distinct ids (found or missing), so its work and memory are bounded before anything is
allocated for an oversized lineage.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import LocalProtocolError
from .records import Record

MISSING_LINEAGE = "missing_lineage"
INCOMPLETE_DECLARATION = "incomplete_declaration"
AMBIGUOUS_FRONTIER = "ambiguous_frontier"


@dataclass(frozen=True, slots=True)
class Frontier:
    """Every declared key was reached exactly once: `versions` maps it to that record.

    `visited` is the number of records the walk looked at; `depth` the deepest level reached.
    `memo` is room for what a caller derives from `versions` alone (the gate's heads
    queries): a frontier answered from a `WalkCache` shares it with the cached one, so it is
    derived once per lineage. It takes no part in comparisons.
    """

    versions: dict[str, Record]
    visited: int
    depth: int
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Missing:
    """Ids the walk reached but `lookup` could not give, in breadth-first order, each once.

    They are all the missing ids visible from what was found, so one fetch round can get them.
    """

    ids: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class Blocked:
    """The lineage can never be accepted as it is.

    `reason` is `incomplete_declaration` (a declared key was never reached),
    `ambiguous_frontier` (two record ids for one declared key) or `missing_lineage` (the
    lineage has more than `max_nodes` records, so it cannot be walked completely).
    """

    reason: str
    detail: str


def walk(
    roots: Sequence[bytes],
    deps: Collection[str],
    lookup: Callable[[bytes], Record | None],
    *,
    max_depth: int = 32,
    max_nodes: int = 4096,
) -> Frontier | Missing | Blocked:
    """Walk `parents` breadth first from `roots` and collect the frontier of `deps`.

    `lookup(id)` returns the record with that id or None; a record whose id differs from
    the one asked for counts as missing. Precedence: exceeding `max_nodes` and an ambiguous
    declared key block as soon as they are seen; otherwise any missing id gives `Missing`;
    otherwise a declared key never reached blocks `incomplete_declaration`.
    Raises LocalProtocolError when `max_depth` < 0 or `max_nodes` < 1.
    """
    if max_depth < 0 or max_nodes < 1:
        raise LocalProtocolError(
            f"walk limits must be max_depth >= 0 and max_nodes >= 1, "
            f"got {max_depth} and {max_nodes}"
        )
    wanted = frozenset(deps)
    seen: set[bytes] = set()
    queue: deque[tuple[bytes, int]] = deque()
    for root in roots:
        if root not in seen:
            if len(seen) >= max_nodes:
                return _node_limit(max_nodes)
            seen.add(root)
            queue.append((root, 0))
    versions: dict[str, Record] = {}
    missing: list[bytes] = []
    visited = deepest = 0
    while queue:
        rid, depth = queue.popleft()
        record = lookup(rid)
        if record is None or record.id != rid:
            missing.append(rid)
            continue
        visited += 1
        deepest = max(deepest, depth)
        if record.key in wanted:
            first = versions.setdefault(record.key, record)
            if first.id != record.id:
                return _ambiguous(first, record)
        if depth >= max_depth:
            continue
        for parent in record.parents:
            if parent not in seen:
                if len(seen) >= max_nodes:
                    return _node_limit(max_nodes)
                seen.add(parent)
                queue.append((parent, depth + 1))
    if missing:
        return Missing(tuple(missing))
    return _frontier_or_incomplete(wanted, versions, visited, deepest, max_depth)


def _ambiguous(first: Record, record: Record) -> Blocked:
    """The block for a declared key reached in two versions."""
    return Blocked(
        AMBIGUOUS_FRONTIER,
        f"declared key {record.key!r} appears in two versions: "
        f"{first.id.hex()[:12]} (seq {first.seq}) and "
        f"{record.id.hex()[:12]} (seq {record.seq})",
    )


def _frontier_or_incomplete(
    wanted: frozenset[str], versions: dict[str, Record], visited: int, deepest: int, max_depth: int
) -> Frontier | Blocked:
    absent = sorted(wanted - versions.keys())
    if absent:
        return Blocked(
            INCOMPLETE_DECLARATION,
            f"declared keys never reached within depth {max_depth}: "
            f"{', '.join(absent)} ({visited} records visited)",
        )
    return Frontier(versions, visited, deepest)


def _node_limit(max_nodes: int) -> Blocked:
    return Blocked(
        MISSING_LINEAGE, f"lineage walk hit the node limit: more than {max_nodes} records reachable"
    )


class WalkCache:
    """Remembers each successful walk, so a warm gate does not walk the same lineage again.

    Sound because a walk that reached a `Frontier` found every record it looked at, and a
    record's id is the hash of its content, parents included: the lineage under given roots
    can never change, so the same (roots, deps, limits) walk again gives the same frontier. Only
    frontiers are kept (`Missing` and `Blocked` are walked afresh), keyed on exactly the
    roots, deps and limits given, so new roots (a replanned action) miss. It saves the walk
    only: the heads round that compares the frontier with the owners still runs every time.
    Holds at most `size` entries, dropping the oldest.
    """

    def __init__(self, size: int = 1024) -> None:
        if size < 1:
            raise LocalProtocolError(f"walk cache size must be >= 1, got {size}")
        self.size = size
        self._walks: dict[tuple[tuple[bytes, ...], tuple[str, ...], int, int], Frontier] = {}

    def __len__(self) -> int:
        return len(self._walks)

    def walk(
        self,
        roots: Sequence[bytes],
        deps: Collection[str],
        lookup: Callable[[bytes], Record | None],
        *,
        max_depth: int = 32,
        max_nodes: int = 4096,
    ) -> Frontier | Missing | Blocked:
        """Like `walk`, answering a walk that reached a frontier before from memory. The
        caller gets its own copy of `versions`, so changing it cannot change the cache."""
        key = (tuple(roots), tuple(deps), max_depth, max_nodes)
        found = self._walks.get(key)
        if found is None:
            result = walk(roots, deps, lookup, max_depth=max_depth, max_nodes=max_nodes)
            if not isinstance(result, Frontier):
                return result
            if len(self._walks) >= self.size:
                del self._walks[next(iter(self._walks))]
            self._walks[key] = found = result
        return Frontier(dict(found.versions), found.visited, found.depth, found.memo)
