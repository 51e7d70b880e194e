"""The `sync` baseline: owners push head metadata to every agent; the executor validates
against its synced copy (docs/ARCHITECTURE.md).

Every agent of the roster subscribes to every other owner (one session per agent identity
per owner, through the shaped links), so updates are pushed to all agents; every pushed
byte is counted. Owners push after every K dirty updates (the subscribe request's `every`;
K = 1 by default).

Before validating, the executor waits until its copy has caught up with every seq the owners
of D(a) published before the action (a sync barrier): that wait is stall. With K > 1 an
owner holds up to K - 1 updates back, so instead of waiting for a batch that may never fill,
the executor pulls the heads of D(a) from each owner it is behind on (one round trip, also
stall). It then compares
the plan's frontier, walked locally, with the synced heads. A drift makes it fetch the
changed records (pushes carry metadata only), replan once, and compare again.
"""

from __future__ import annotations

import time
from typing import Any

import anyio

from ..api import group_by_owner
from ..errors import PlanfenceError
from ..gate import Action
from ..lineage import Blocked, Missing, walk
from ..records import Record
from .baselines import Parts, Verdict, _Base
from ..executor.pool import SessionPool
from ..executor.runner import ReplanHook, verified_records


class SyncedCopy:
    """Heads pushed by owners: key -> (id, seq), and the highest seq seen per owner."""

    def __init__(self) -> None:
        self.heads: dict[str, tuple[bytes, int]] = {}
        self.seq: dict[str, int] = {}
        self.changed = anyio.Event()

    def apply(self, owner: str, rows: list[Any]) -> None:
        for key, rid, seq in rows:
            if rid is not None and seq >= self.heads.get(key, (b"", 0))[1]:
                self.heads[key] = (rid, seq)
            self.seq[owner] = max(self.seq.get(owner, 0), seq)
        self.changed.set()
        self.changed = anyio.Event()

    async def wait_caught_up(self, marks: dict[str, int]) -> None:
        """Return once, for every owner, the copy has seen the seq in `marks`."""
        while any(self.seq.get(owner, 0) < seq for owner, seq in marks.items()):
            await self.changed.wait()


class Sync(_Base):
    """Proactive metadata sync to every agent, pushed after every `k` dirty updates."""

    def __init__(self, name: str, parts: Parts, k: int = 1) -> None:
        super().__init__(name, parts)
        self.k = k
        self.copy = SyncedCopy()
        self.subscribers: list[SessionPool] = []

    async def start(self, keys: list[str]) -> None:
        """Subscribe every agent to every other owner, then seed the executor's copy with the
        heads of `keys` and each owner's last seq (the state before the first action)."""
        roster = self.parts.roster
        owners = [a.name for a in roster.agents if a.owns]
        for agent in owners:
            pool = SessionPool(self.parts.tg, roster, self.parts.identity_of(agent),
                               self.parts.addresses)
            self.subscribers.append(pool)
            for owner in owners:
                if owner == agent:
                    continue  # an owner knows its own heads
                session = await pool.session(owner)
                stream = await session.subscribe(every=self.k)
                if agent == self.parts.executor:
                    self.parts.tg.start_soon(self._follow, owner, stream)
                else:
                    self.parts.tg.start_soon(self._drain, stream)
        for owner, owner_keys in group_by_owner(roster, keys).items():
            if owner == self.parts.executor:
                continue
            result = await self.pool.request(owner, "heads", {"keys": owner_keys})
            stats = await self.pool.request(owner, "stats", {})
            self.copy.apply(owner, [row for row in result["heads"] if row[1] is not None])
            self.copy.seq[owner] = max(self.copy.seq.get(owner, 0), int(stats["last_seq"]))

    async def _follow(self, owner: str, stream: Any) -> None:
        async with stream:
            async for push in stream:
                self.copy.apply(owner, push.get("heads", []))

    @staticmethod
    async def _drain(stream: Any) -> None:
        async with stream:
            async for _ in stream:
                pass

    def traffic(self) -> int:
        pushed = sum(sum(pool.traffic()) for pool in self.subscribers)
        return super().traffic() + pushed

    async def aclose(self) -> None:
        for pool in self.subscribers:
            await pool.aclose()
        await super().aclose()

    async def validate(self, action: Action, replan: ReplanHook, keys: list[str]) -> Verdict:
        started = time.perf_counter()
        planning = 0.0
        roots, replanned = action.roots, False
        roster = self.parts.roster
        deps_owners = set(group_by_owner(roster, list(action.deps))) if action.deps else set()
        marks = {o: s for o, s in self.writer.published.items() if o in deps_owners}
        with anyio.move_on_after(self.parts.deadline) as scope:
            if self.k == 1:
                await self.copy.wait_caught_up(marks)
            elif not await self._pull(marks, action.deps):
                return Verdict(False, roots, time.perf_counter() - started, "owner_unavailable")
        if scope.cancelled_caught:
            return Verdict(False, roots, time.perf_counter() - started, "timeout")
        while True:
            result = walk(roots, action.deps, self.replica.lookup)
            if isinstance(result, (Blocked, Missing)):
                reason = result.reason if isinstance(result, Blocked) else "missing_lineage"
                return Verdict(False, roots, time.perf_counter() - started - planning, reason,
                               replanned)
            drift = {k: self.copy.heads[k][0] for k, r in result.versions.items()
                     if k in self.copy.heads and self.copy.heads[k][0] != r.id}
            if not drift:
                return Verdict(True, roots, time.perf_counter() - started - planning, None,
                               replanned)
            if replanned:
                return Verdict(False, roots, time.perf_counter() - started - planning,
                               "changed_again", replanned)
            changed = await self._fetch(drift)
            if len(changed) != len(drift):
                return Verdict(False, roots, time.perf_counter() - started - planning,
                               "missing_lineage", replanned)
            began = time.perf_counter()
            roots = tuple(await replan(action, tuple(changed)))
            planning += time.perf_counter() - began
            replanned = True

    async def _pull(self, marks: dict[str, int], deps: tuple[str, ...]) -> bool:
        """Pull the heads of `deps` from every owner the copy is behind on; False when one
        cannot be reached."""
        lagging = {o for o, seq in marks.items() if self.copy.seq.get(o, 0) < seq}
        groups = {o: ks for o, ks in group_by_owner(self.parts.roster, list(deps)).items()
                  if o in lagging}
        failed: list[str] = []

        async def pull(owner: str, keys: list[str]) -> None:
            try:
                result = await self.pool.request(owner, "heads", {"keys": keys})
            except PlanfenceError:
                failed.append(owner)
                return
            self.copy.apply(owner, [row for row in result["heads"] if row[1] is not None])

        async with anyio.create_task_group() as tg:
            for owner, keys in groups.items():
                tg.start_soon(pull, owner, keys)
        return not failed

    async def _fetch(self, drift: dict[str, bytes]) -> list[Record]:
        """The changed records, fetched from their owners and verified."""
        roster = self.parts.roster
        found: list[Record] = []
        for owner, owner_keys in group_by_owner(roster, list(drift)).items():
            try:
                result = await self.pool.request(owner, "get",
                                                 {"ids": [drift[k] for k in owner_keys]})
            except PlanfenceError:
                continue
            found += verified_records(roster, result)
        await self.replica.add(found)
        return found
