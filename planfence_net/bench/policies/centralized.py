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

from typing import Any

import anyio

from ...core.answers import HeadsQuery
from ...core.drive import FetchRound, HeadsRound
from ...core.errors import PlanfenceError
from ...core.gate import Action
from ...executor.runner import GateRunner
from .gated import PlanFence
from .writers import CENTRAL


class CentralWalkRunner(GateRunner):
    """The gate driven against the central store: one request carries every owner's query,
    and missing lineage is read from the store."""

    op = "heads"

    async def fetch(self, ids: tuple[bytes, ...], deadline: float | None = None) -> FetchRound:
        fetch = FetchRound(ids, [CENTRAL], self.verify)
        with anyio.CancelScope(deadline=self.until(deadline)):
            while (args := fetch.request(CENTRAL)) is not None:
                try:
                    fetch.answered(CENTRAL, await self.pool.request(CENTRAL, "get", args))
                except PlanfenceError as exc:
                    fetch.answered(CENTRAL, exc)
        await self.replica.add(fetch.records)
        return fetch

    def _args(self, action: Action, keys: list[str], expect: dict[str, bytes]) -> dict[str, Any]:
        return {"keys": keys, "expect": expect}

    async def query(
        self, action: Action, queries: dict[str, HeadsQuery], deadline: float | None = None
    ) -> HeadsRound:
        heads = HeadsRound(queries)
        keys = [k for q in queries.values() for k in q.keys]
        expect = {k: v for q in queries.values() for k, v in q.expect.items()}
        outcome: dict[str, Any] | PlanfenceError | None = None
        with anyio.CancelScope(deadline=self.until(deadline)):
            try:
                args = self._args(action, keys, expect)
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


class CentralRunner(CentralWalkRunner):
    """One `validate` round trip to the store per validation (short rows, records inline)."""

    op = "validate"

    def _args(self, action: Action, keys: list[str], expect: dict[str, bytes]) -> dict[str, Any]:
        return {"keys": keys, "expect": expect, "short": True, "action": action.name[:256]}


class Central(PlanFence):
    """Centralized lineage validated at the store (`central`, `central-wired`)."""

    def _runner(self) -> GateRunner:
        return CentralRunner(self.pool, self.replica, timeout=self.parts.timeout)

    async def start(self, keys: list[str]) -> None:
        await self.pool.session(CENTRAL)


class CentralWalk(Central):
    """The client-side walk against the store (`central-walk`, an ablation)."""

    def _runner(self) -> GateRunner:
        return CentralWalkRunner(self.pool, self.replica, timeout=self.parts.timeout)
