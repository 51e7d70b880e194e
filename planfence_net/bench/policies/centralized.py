"""The centralized-lineage baseline: every record lives at one central store (bench/policies/central.py).

`central` is what a team would build on a central store: the executor holds the plan and its
lineage (the planner hands them over, as under every other policy), walks them locally, and
sends the store one `validate` request carrying the frontier's ids for D(a); the store
compares them with its heads and, when they all match, records the decision, in one round trip
(a mismatch comes back with the changed records inline). On a raced action that is validate,
then one put-if: the replanned plan (signed by the planner) rides in the second `validate`,
which writes it at the store and re-validates in the same round trip: two round trips, as
many as `planfence+inline`. `central-wired` is the same with the
store on an unshaped loopback link while the agents stay on their access links.

`central-walk` (an ablation, the earlier design) receives nothing from the planner: the gate
reads the plan (`get`), its lineage (`get`) and the heads (`heads`, records inline) from the
store, and the replanned plan back after writing it: six sequential round trips on a raced
action (3 `get`, 2 `heads`, 1 `put`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from ...core.answers import HeadsQuery, verifier
from ...core.drive import FetchRound, HeadsRound
from ...core.errors import PlanfenceError
from ...core.gate import Action
from ...core.records import Record
from ...executor.pool import SessionPool
from ...executor.replica import Replica
from ...executor.runner import GateRunner, ReplanHook
from .gated import PlanFence
from .policy import Verdict
from .writers import CENTRAL, CentralWriter

# what the executor asks the store for its heads: an op and its args, a row per baseline
Args = Callable[[Action, list[str], dict[str, bytes]], dict[str, Any]]
STORE_OPS: dict[str, tuple[str, Args]] = {
    # central-walk: the owners' heads request, records inline
    "walk": ("heads", lambda action, keys, expect: {"keys": keys, "expect": expect}),
    # central: one `validate` round trip per validation (short rows, records inline)
    "validate": (
        "validate",
        lambda action, keys, expect: {
            "keys": keys,
            "expect": expect,
            "short": True,
            "action": action.name[:256],
        },
    ),
}


class CentralStore:
    """The gate's two steps against the central store, for a `GateRunner` (`fetch`,
    `query`): one request carries every owner's query (`STORE_OPS[kind]`), and missing
    lineage is read from the store. Each step is called with the decision's deadline
    (anyio's clock). `held` gives the records to write at the store in the same request
    (the put-if: the replanned plan, written and re-validated in one round trip)."""

    def __init__(
        self,
        pool: SessionPool,
        replica: Replica,
        kind: str,
        held: Callable[[], list[Record]] = list,
    ) -> None:
        self.pool, self.replica = pool, replica
        self.verify = verifier(pool.roster)
        self.op, self.args = STORE_OPS[kind]
        self.held = held

    async def fetch(self, ids: tuple[bytes, ...], deadline: float) -> FetchRound:
        fetch = FetchRound(ids, [CENTRAL], self.verify)
        with anyio.CancelScope(deadline=deadline):
            while (args := fetch.request(CENTRAL)) is not None:
                try:
                    fetch.answered(CENTRAL, await self.pool.request(CENTRAL, "get", args))
                except PlanfenceError as exc:
                    fetch.answered(CENTRAL, exc)
        await self.replica.add(fetch.records)
        return fetch

    async def query(
        self, action: Action, queries: dict[str, HeadsQuery], deadline: float
    ) -> HeadsRound:
        heads = HeadsRound(queries)
        keys = [k for q in queries.values() for k in q.keys]
        expect = {k: v for q in queries.values() for k, v in q.expect.items()}
        outcome: dict[str, Any] | PlanfenceError | None = None
        args = self.args(action, keys, expect)
        held = self.held()  # at most one: the gate replans once
        if held:
            args["record"] = held[-1].to_wire()
        with anyio.CancelScope(deadline=deadline):
            try:
                outcome = await self.pool.request(CENTRAL, self.op, args)
            except PlanfenceError as exc:
                outcome = exc
        for owner, query in queries.items():
            if not isinstance(outcome, dict):
                heads.answered(owner, outcome)
                continue
            rows = [row for row in outcome.get("heads", []) if row and row[0] in query.keys]
            records = [
                w
                for w in outcome.get("records", [])
                if isinstance(w, list) and len(w) > 1 and w[1] in query.keys
            ]
            heads.answered(owner, {"heads": rows, "records": records})
        return heads


def store_runner(policy: PlanFence, kind: str) -> GateRunner:
    """A GateRunner for `policy`'s pool and replica whose steps ask the central store; under
    `validate` a plan its writer holds rides in the next request (the put-if)."""
    writer = policy.writer
    held = writer.take_held if kind == "validate" and isinstance(writer, CentralWriter) else list
    store = CentralStore(policy.pool, policy.replica, kind, held)
    timeout = policy.parts.timeout
    return GateRunner(
        policy.pool,
        policy.replica,
        timeout=timeout,
        fetch=store.fetch,
        query=store.query,
        log=policy.parts.decisions,
    )


class Central(PlanFence):
    """Centralized lineage validated at the store (`central`, `central-wired`): while it
    validates, its writer holds the replanned plan for the next `validate` (the put-if)."""

    put_if = True  # the replanned plan rides in the second `validate`

    def _runner(self) -> GateRunner:
        return store_runner(self, "validate")

    async def validate(self, action: Action, replan: ReplanHook, keys: list[str]) -> Verdict:
        writer = self.writer
        if not self.put_if or not isinstance(writer, CentralWriter):
            return await super().validate(action, replan, keys)
        writer.hold_plans = True
        try:
            return await super().validate(action, replan, keys)
        finally:
            writer.hold_plans = False
            writer.drop_held()  # a plan no validate carried (the action blocked first)

    async def start(self, keys: list[str]) -> None:
        await self.pool.session(CENTRAL)


class CentralWalk(Central):
    """The client-side walk against the store (`central-walk`, an ablation): the replanned
    plan is `put` on its own, as before."""

    put_if = False

    def _runner(self) -> GateRunner:
        return store_runner(self, "walk")
