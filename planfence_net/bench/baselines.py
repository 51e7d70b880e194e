"""The policies the experiments compare, behind one interface.

    baseline = make_baseline("planfence", parts)
    await baseline.start(keys)                 # connect, seed; not charged to any action
    verdict = await baseline.validate(action, replan, keys)
    baseline.traffic()                         # bytes so far, encrypted and framed, both ways

`freshness` refreshes the executor's records of D(a) but never compares them with the plan;
`planfence` runs the gate on D(a); `allkeys` runs the gate with every shared key of the
template queried; `central` runs the gate against the central store only (every owner's query
merged into one request; plan and lineage read from the store, not handed over); `sync`
(bench/sync.py) acts on pushed, acknowledged head metadata once the owners of D(a) say it is
synchronized. Variants for the ablations: `planfence-d1` (direct parents only), `planfence-noreplan`,
`planfence-failopen` (the gate's decision, with the blocks in `policy.FAIL_OPEN_REASONS`
issued anyway).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import anyio

from ..core.errors import ConfigError, PlanfenceError, TransportError
from ..core.gate import Action, Gate, GatePolicy, QueryHeads
from ..core.lineage import FetchRound
from ..executor.runner import GateRunner, ReplanHook, verified_records
from ..net.api import group_by_owner
from .policy import Baseline, Parts, PolicyBase, Verdict, fails_open
from .sync import Sync
from .writers import CENTRAL

POLICIES = ("freshness", "central", "sync", "allkeys", "planfence")
VARIANTS = ("planfence-d1", "planfence-noreplan", "planfence-failopen")


def make_baseline(name: str, parts: Parts) -> Baseline:
    """The policy called `name`; raises ConfigError for an unknown name."""
    if name == "freshness":
        return Freshness(name, parts)
    if name == "sync":
        return Sync(name, parts, parts.sync_k)
    if name == "central":
        return Central(name, parts, GatePolicy())
    policies = {
        "planfence": GatePolicy(),
        "allkeys": GatePolicy(),
        "planfence-d1": GatePolicy(max_depth=1),
        "planfence-noreplan": GatePolicy(replan=False),
        "planfence-failopen": GatePolicy(),
    }
    if name not in policies:
        raise ConfigError(f"unknown policy {name!r} (known: {', '.join(POLICIES + VARIANTS)})")
    return PlanFence(
        name,
        parts,
        policies[name],
        all_keys=name == "allkeys",
        fail_open=name == "planfence-failopen",
    )


class Freshness(PolicyBase):
    """Keeps the executor's records of D(a) at the owners' heads; never checks the plan."""

    def __init__(self, name: str, parts: Parts) -> None:
        super().__init__(name, parts)
        self.known: dict[str, bytes] = {}

    async def validate(self, action: Action, replan: ReplanHook, keys: list[str]) -> Verdict:
        started = time.perf_counter()
        for rid in action.roots:  # the plan handed over names the versions it holds
            self._learn(rid)
        groups = group_by_owner(self.parts.roster, list(action.deps))

        async def refresh(owner: str, owner_keys: list[str]) -> None:
            expect = {k: self.known[k] for k in owner_keys if k in self.known}
            try:
                result = await self.pool.request(
                    owner, "heads", {"keys": owner_keys, "expect": expect}
                )
            except PlanfenceError:
                return  # stale memory, and freshness acts anyway
            records = verified_records(self.parts.roster, result)
            for record in records:
                self.known[record.key] = record.id
            await self.replica.add(records)

        with anyio.move_on_after(self.parts.deadline):
            async with anyio.create_task_group() as tg:
                for owner, owner_keys in groups.items():
                    tg.start_soon(refresh, owner, owner_keys)
        return Verdict(True, action.roots, time.perf_counter() - started)

    def _learn(self, rid: bytes, depth: int = 0) -> None:
        record = self.replica.lookup(rid)
        if record is None or depth > 64:
            return
        self.known.setdefault(record.key, record.id)
        for parent in record.parents:
            self._learn(parent, depth + 1)


class PlanFence(PolicyBase):
    """The gate under a policy; `all_keys` adds every shared key; `fail_open` issues the
    actions the gate blocked for a reason in FAIL_OPEN_REASONS (the ablation)."""

    def __init__(
        self,
        name: str,
        parts: Parts,
        policy: GatePolicy,
        *,
        all_keys: bool = False,
        fail_open: bool = False,
    ) -> None:
        super().__init__(name, parts)
        self.policy = policy
        self.all_keys = all_keys
        self.fail_open = fail_open
        self.runner = self._runner()

    def _runner(self) -> GateRunner:
        return GateRunner(self.pool, self.replica, deadline=self.parts.deadline)

    async def validate(self, action: Action, replan: ReplanHook, keys: list[str]) -> Verdict:
        policy = self.policy
        if self.all_keys:
            policy = dataclasses.replace(policy, query_keys=tuple(keys))
        run = await self.runner.wait_decision(action, replan, policy)
        decision = run.decision
        issued = decision.authorized or (self.fail_open and fails_open(decision))
        blocked = None if issued else decision.reason
        return Verdict(issued, run.roots, run.stall, blocked, decision.replanned, decision)


class CentralRunner(GateRunner):
    """The gate driven against the central store: one request carries every owner's query."""

    async def _fetch(self, ids: tuple[bytes, ...]) -> FetchRound:
        fetch = FetchRound(ids, [CENTRAL])
        with anyio.move_on_after(self.deadline):
            try:
                result = await self.pool.request(CENTRAL, "get", {"ids": list(ids)})
            except PlanfenceError:
                fetch.failed(CENTRAL)
            else:
                fetch.answered(CENTRAL, verified_records(self.roster, result))
        await self.replica.add(fetch.records)
        return fetch

    async def _query(self, gate: Gate, event: QueryHeads) -> None:
        keys = [k for q in event.queries.values() for k in q.keys]
        expect = {k: v for q in event.queries.values() for k, v in q.expect.items()}
        answer: dict[str, Any] | None = None
        failure = "timeout"
        with anyio.move_on_after(self.deadline):
            try:
                answer = await self.pool.request(CENTRAL, "heads", {"keys": keys, "expect": expect})
            except TransportError:
                failure = "owner_unavailable"
            except PlanfenceError:
                failure = "malformed_response"
        for owner, query in event.queries.items():
            if answer is None:
                gate.heads_failed(owner, failure)
                continue
            rows = [row for row in answer.get("heads", []) if row and row[0] in query.keys]
            records = [
                w
                for w in answer.get("records", [])
                if isinstance(w, list) and len(w) > 1 and w[1] in query.keys
            ]
            gate.heads_answered(owner, {"heads": rows, "records": records})


class Central(PlanFence):
    """Centralized lineage: every write and every validation goes through the central store."""

    def _runner(self) -> GateRunner:
        return CentralRunner(self.pool, self.replica, deadline=self.parts.deadline)

    async def start(self, keys: list[str]) -> None:
        await self.pool.session(CENTRAL)
