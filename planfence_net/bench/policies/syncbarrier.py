"""The `sync-barrier` ablation (the earlier `sync`): owners push head metadata to a workflow's
participants, who acknowledge it; the executor acts on its pushed copy once the owners of D(a)
say the updates it depends on are synchronized (a barrier at action time). `sync`
(bench/policies/sync.py) builds on the subscriptions here and moves the wait to the update.

For every workflow of the case, every participant (the template's agents: the planner, the
executor and the fact owners) subscribes to every other participant that owns keys of the
workflow, for exactly those keys, in one sync group (the owner protocol's
`subscribe {"group"}`, docs/PROTOCOL.md; one group per case, see `start`). Owners push after
every K updates (the subscribe request's `every`; K = 1 by default); every subscriber acknowledges each push once
applied (`ack`). An update counts as synchronized only when every participant has
acknowledged it.

At action time the executor asks each owner of D(a) `synced` for the declared keys: the owner
answers once every participant has acknowledged every update of those keys committed before
the request (pushing rows a K > 1 subscription still holds back first). That wait, and the
round trip, is the stall of synchronization still outstanding. The executor learns it from the
owners alone: nothing here reads the harness's state, so an update written by any process is
covered. Safety by construction: when `synced` answers, the executor itself has acknowledged,
hence applied, every update of D(a) up to the owner's head at the request, so its copy is at
least that fresh. It then compares the plan's frontier, walked locally, with its copy; a drift
makes it fetch the changed records (pushes carry metadata only), replan once, and compare
again against the copy (the replan hook's own writes are synchronized the same way).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import anyio

from ...core.answers import verified_records, verifier
from ...core.errors import PlanfenceError
from ...core.gate import Action
from ...core.lineage import Blocked, Missing, walk
from ...core.records import Record
from ...executor.pool import SessionPool
from ...executor.runner import ReplanHook
from ...net.api import group_by_owner
from .policy import Parts, PolicyBase, Verdict, Workflow


class SyncedCopy:
    """Heads pushed by owners: key -> (id, seq)."""

    def __init__(self) -> None:
        self.heads: dict[str, tuple[bytes, int]] = {}

    def apply(self, rows: list[Any]) -> None:
        for key, rid, seq in rows:
            if rid is not None and seq >= self.heads.get(key, (b"", 0))[1]:
                self.heads[key] = (rid, seq)


class SyncBarrier(PolicyBase):
    """Acknowledged metadata sync to a workflow's participants, pushed every `k` updates."""

    push_records = False  # whether the executor's pushes carry the records (`sync`: yes)

    def __init__(self, name: str, parts: Parts, k: int = 1) -> None:
        super().__init__(name, parts)
        self.k = k
        self.copy = SyncedCopy()
        self.subscribers: dict[str, SessionPool] = {}
        self.group = f"{name}/all"
        self.owned: dict[str, list[str]] = {}  # owner -> its keys in the case's workflows

    def _workflows(self, keys: list[str]) -> tuple[Workflow, ...]:
        if self.parts.workflows:
            return self.parts.workflows
        owners = tuple(group_by_owner(self.parts.roster, keys))
        return (Workflow(f"{self.name}/all", tuple(keys), (self.parts.executor, *owners)),)

    async def start(self, keys: list[str]) -> None:
        """Subscribe every participant of every workflow to the other participants' keys of
        that workflow (the subscribe answers seed the executor's copy); not charged to any
        action. One subscription per (agent, owner) carries the keys of all the workflows
        the agent takes part in, in one sync group for the case: an update is owed only by
        the members that were sent it, that is by the participants of its own workflow."""
        workflows = self._workflows(keys)
        self.group = f"{workflows[0].name}+{len(workflows) - 1}"[:128]
        wanted: dict[str, dict[str, list[str]]] = {}  # agent -> owner -> keys
        for workflow in workflows:
            by_owner = group_by_owner(self.parts.roster, list(workflow.keys))
            for owner, owner_keys in by_owner.items():
                self.owned.setdefault(owner, []).extend(owner_keys)
            for agent in dict.fromkeys(workflow.participants):
                for owner, owner_keys in by_owner.items():
                    if owner != agent:  # an owner knows its own heads
                        wanted.setdefault(agent, {}).setdefault(owner, []).extend(owner_keys)
        for agent, owners in wanted.items():
            pool = self._subscriber(agent)
            for owner, owner_keys in owners.items():
                await self._subscribe(agent, pool, owner, list(dict.fromkeys(owner_keys)))

    def _subscriber(self, agent: str) -> SessionPool:
        if agent not in self.subscribers:
            self.subscribers[agent] = SessionPool(
                self.parts.tg,
                self.parts.roster,
                self.parts.identity_of(agent),
                self.parts.addresses_of(agent),
            )
        return self.subscribers[agent]

    async def _subscribe(self, agent: str, pool: SessionPool, owner: str, keys: list[str]) -> None:
        session = await pool.session(owner)
        records = self.push_records and agent == self.parts.executor
        stream = await session.subscribe(keys, every=self.k, group=self.group, records=records)
        if agent == self.parts.executor:
            seed = await session.request("heads", {"keys": keys})
            self.copy.apply(seed["heads"])
        self.parts.tg.start_soon(self._acknowledge, agent, session, stream, self.group)

    async def _acknowledge(self, agent: str, session: Any, stream: Any, group: str) -> None:
        """Apply (the executor) and acknowledge every push, until the session ends."""
        async with stream:
            async for push in stream:
                if agent == self.parts.executor:
                    self.copy.apply(push.get("heads", []))
                try:
                    await session.request("ack", {"group": group, "seq": push["seq"]})
                except PlanfenceError:
                    return

    def traffic(self) -> int:
        pushed = sum(sum(pool.traffic()) for pool in self.subscribers.values())
        return super().traffic() + pushed

    async def aclose(self) -> None:
        for pool in self.subscribers.values():
            await pool.aclose()
        await super().aclose()

    async def validate(self, action: Action, replan: ReplanHook, keys: list[str]) -> Verdict:
        started = time.perf_counter()
        planning = 0.0
        roots, replanned = action.roots, False

        def verdict(issued: bool, reason: str | None) -> Verdict:
            return Verdict(
                issued, roots, time.perf_counter() - started - planning, reason, replanned
            )

        while True:
            failure = await self._ready(action.deps)
            if failure is not None:
                return verdict(False, failure)
            drift = drift_from_copy(roots, action.deps, self.replica.lookup, self.copy.heads)
            if isinstance(drift, str):
                return verdict(False, drift)
            if not drift:
                return verdict(True, None)
            if replanned:
                return verdict(False, "changed_again")
            changed = await self._changed(drift)
            if len(changed) != len(drift):
                return verdict(False, "missing_lineage")
            began = time.perf_counter()
            roots = tuple(await replan(action, tuple(changed)))
            planning += time.perf_counter() - began
            replanned = True

    async def _ready(self, deps: tuple[str, ...]) -> str | None:
        """What must happen before the check (here: the `synced` barrier); None when done,
        else the reason to block."""
        return await self.wait_synced(deps)

    async def _changed(self, drift: dict[str, bytes]) -> list[Record]:
        """The drifted keys' head records (here: fetched from their owners); fewer than
        `drift` blocks with missing_lineage."""
        return await self._fetch(drift)

    async def wait_synced(self, deps: tuple[str, ...]) -> str | None:
        """Ask every owner of `deps` `synced` for them, concurrently, under the deadline;
        None once all answered, else why not ("owner_unavailable", "timeout")."""
        groups = group_by_owner(self.parts.roster, list(deps))
        failed: list[str] = []

        async def ask(owner: str, owner_keys: list[str]) -> None:
            try:
                await self.pool.request(owner, "synced", {"group": self.group, "keys": owner_keys})
            except PlanfenceError:
                failed.append(owner)

        with anyio.move_on_after(self.parts.timeout) as scope:
            async with anyio.create_task_group() as tg:
                for owner, owner_keys in groups.items():
                    if owner != self.parts.executor:
                        tg.start_soon(ask, owner, owner_keys)
        if scope.cancelled_caught:
            return "timeout"
        return "owner_unavailable" if failed else None

    async def _fetch(self, drift: dict[str, bytes]) -> list[Record]:
        """The changed records, fetched from their owners and verified."""
        roster = self.parts.roster
        found: list[Record] = []
        for owner, owner_keys in group_by_owner(roster, list(drift)).items():
            try:
                result = await self.pool.request(
                    owner, "get", {"ids": [drift[k] for k in owner_keys]}
                )
            except PlanfenceError:
                continue
            found += verified_records(result.get("records"), verifier(roster), bad="drop")
        await self.replica.add(found)
        return found


def drift_from_copy(
    roots: Sequence[bytes],
    deps: Any,
    lookup: Any,
    heads: dict[str, Any],
) -> str | dict[str, bytes]:
    """The declared keys whose version in the plan's lineage is not the replicated head, as
    {key: head id}; or the reason the lineage walk blocks (`missing_lineage`, ...)."""
    result = walk(roots, deps, lookup)
    if isinstance(result, (Blocked, Missing)):
        return result.reason if isinstance(result, Blocked) else "missing_lineage"
    return {
        k: heads[k][0] for k, r in result.versions.items() if k in heads and heads[k][0] != r.id
    }
