"""The invalid-action oracle: judges issued actions from the owners' own logs.

An action is invalid when, for some declared key x, the version of x its plan was derived
from (found by walking the logged parents of the action record) differs from x's head at
the moment the action record was committed (the last logged put of x before it).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ...owners.logs import read_events


@dataclass(frozen=True, slots=True)
class Put:
    ts: float
    key: str
    id: str
    seq: int
    parents: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Verdict:
    action_id: str
    invalid: bool
    stale: dict[str, tuple[str | None, str | None]]  # key -> (plan's version, head at issue)


class Oracle:
    """Every put the owners logged, indexed by id and by key in commit order."""

    def __init__(self, puts: Iterable[Put]) -> None:
        self.by_id: dict[str, Put] = {}
        self.by_key: dict[str, list[Put]] = defaultdict(list)
        for put in sorted(puts, key=lambda p: (p.ts, p.seq)):
            self.by_id[put.id] = put
            self.by_key[put.key].append(put)

    @classmethod
    def from_logs(cls, paths: Iterable[Path]) -> Oracle:
        puts = []
        for path in paths:
            if not path.exists():
                continue
            for e in read_events(path, event="put"):
                puts.append(Put(e["ts"], e["key"], e["id"], e["seq"], tuple(e.get("parents", []))))
        return cls(puts)

    def frontier(self, roots: Iterable[str], deps: Iterable[str]) -> dict[str, set[str]]:
        """Versions of each declared key reachable from `roots` through logged parents."""
        wanted = set(deps)
        found: dict[str, set[str]] = defaultdict(set)
        seen: set[str] = set()
        todo = list(roots)
        while todo:
            rid = todo.pop()
            if rid in seen or rid not in self.by_id:
                continue
            seen.add(rid)
            put = self.by_id[rid]
            if put.key in wanted:
                found[put.key].add(rid)
            todo.extend(put.parents)
        return found

    def head_at(self, key: str, ts: float) -> str | None:
        puts = self.by_key.get(key, [])
        i = bisect_right([p.ts for p in puts], ts)
        return puts[i - 1].id if i else None

    def judge(self, action_id: str, deps: Iterable[str]) -> Verdict:
        """Judge one issued action record by its id; raises KeyError if it was never logged."""
        action = self.by_id[action_id]
        deps = list(deps)
        frontier = self.frontier(action.parents, deps)
        stale: dict[str, tuple[str | None, str | None]] = {}
        for key in deps:
            versions = frontier.get(key, set())
            head = self.head_at(key, action.ts)
            if len(versions) != 1 or head not in versions:
                stale[key] = (next(iter(versions)) if len(versions) == 1 else None, head)
        return Verdict(action_id, bool(stale), stale)
