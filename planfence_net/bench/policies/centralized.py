"""The centralized-lineage baseline: every record lives at one central store (bench/policies/central.py).

`central` is what a team would build on a central store: the executor holds the plan and its
lineage (the planner hands them over, as under every other policy), walks them locally, and
sends the store one `validate` request carrying the frontier's ids for D(a); the store
compares them with its heads and, when they all match, records the decision, in one round trip
(a mismatch comes back with the changed records inline). On a raced action that is validate,
the replanned plan's `put` to the store, validate again. `central-wired` is the same with the
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
from ...executor.pool import SessionPool
from ...executor.replica import Replica
from ...executor.runner import GateRunner
from .gated import PlanFence
from .writers import CENTRAL

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
    (anyio's clock)."""

    def __init__(self, pool: SessionPool, replica: Replica, kind: str) -> None:
        self.pool, self.replica = pool, replica
        self.verify = verifier(pool.roster)
        self.op, self.args = STORE_OPS[kind]

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
        with anyio.CancelScope(deadline=deadline):
            try:
                outcome = await self.pool.request(CENTRAL, self.op, self.args(action, keys, expect))
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
    """A GateRunner for `policy`'s pool and replica whose steps ask the central store."""
    store = CentralStore(policy.pool, policy.replica, kind)
    timeout = policy.parts.timeout
    return GateRunner(
        policy.pool, policy.replica, timeout=timeout, fetch=store.fetch, query=store.query
    )


class Central(PlanFence):
    """Centralized lineage validated at the store (`central`, `central-wired`)."""

    def _runner(self) -> GateRunner:
        return store_runner(self, "validate")

    async def start(self, keys: list[str]) -> None:
        await self.pool.session(CENTRAL)


class CentralWalk(Central):
    """The client-side walk against the store (`central-walk`, an ablation)."""

    def _runner(self) -> GateRunner:
        return store_runner(self, "walk")
