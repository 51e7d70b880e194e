"""The gated policies: PlanFence's gate on D(a) under a `GatePolicy`, driven two ways.

`FetchAfter` is the paper's heads step, handed to a `GateRunner`: `heads` answers carry ids
only and the changed records are fetched after the mismatch (`get`, one more round trip on a
raced action). The product's `GateRunner` on its own takes them inline from the `heads`
answer (`planfence+inline` in the bench).
"""

from __future__ import annotations

import dataclasses

import anyio

from ...core.answers import HeadsQuery
from ...core.drive import HeadsRound
from ...core.errors import PlanfenceError
from ...core.gate import Action, GatePolicy
from ...executor.pool import SessionPool
from ...executor.runner import GateRunner, ReplanHook
from .policy import Parts, PolicyBase, Verdict, fails_open


class FetchAfter:
    """The gate's heads step as the paper runs it: each owner answers `heads` with ids only
    (no `expect`, so no record inline), and the changed records are fetched from that owner
    with `get` right after the mismatch. The gate checks the combined answer as usual.
    A `GateRunner`'s `query` step (called with the decision's deadline, anyio's clock)."""

    def __init__(self, pool: SessionPool) -> None:
        self.pool = pool

    async def __call__(
        self, action: Action, queries: dict[str, HeadsQuery], deadline: float
    ) -> HeadsRound:
        heads = HeadsRound(queries)

        async def ask(owner: str, query: HeadsQuery) -> None:
            try:
                answer = await self.pool.request(owner, "heads", {"keys": list(query.keys)})
                rows = answer.get("heads") if isinstance(answer, dict) else None
                changed = [
                    row[1]
                    for row in rows or []
                    if isinstance(row, list)
                    and len(row) == 3
                    and row[0] in query.expect
                    and row[1] is not None
                    and row[1] != query.expect[row[0]]
                ]
                fetched = await self.pool.request(owner, "get", {"ids": changed}) if changed else {}
            except PlanfenceError as exc:
                heads.answered(owner, exc)
            else:
                records = fetched.get("records", []) if isinstance(fetched, dict) else None
                heads.answered(owner, {"heads": rows, "records": records})

        with anyio.CancelScope(deadline=deadline):
            async with anyio.create_task_group() as tg:
                for owner, query in queries.items():
                    tg.start_soon(ask, owner, query)
        return heads


class PlanFence(PolicyBase):
    """The gate under a policy; `all_keys` adds every shared key; `inline` takes the changed
    records from the `heads` answer (the product's runner) instead of fetching them after;
    `fail_open` issues the actions the gate blocked for a reason in FAIL_OPEN_REASONS (the
    ablation)."""

    def __init__(
        self,
        name: str,
        parts: Parts,
        policy: GatePolicy,
        *,
        all_keys: bool = False,
        inline: bool = False,
        fail_open: bool = False,
    ) -> None:
        super().__init__(name, parts)
        self.policy = policy
        self.all_keys = all_keys
        self.inline = inline
        self.fail_open = fail_open
        self.runner = self._runner()

    def _runner(self) -> GateRunner:
        query = None if self.inline else FetchAfter(self.pool)
        parts = self.parts
        return GateRunner(
            self.pool, self.replica, timeout=parts.timeout, query=query, log=parts.decisions
        )

    async def validate(self, action: Action, replan: ReplanHook, keys: list[str]) -> Verdict:
        policy = self.policy
        if self.all_keys:
            policy = dataclasses.replace(policy, query_keys=tuple(keys))
        run = await self.runner.wait_decision(action, replan, policy)
        decision = run.decision
        issued = decision.authorized or (self.fail_open and fails_open(decision))
        blocked = None if issued else decision.reason
        return Verdict(issued, run.roots, run.stall, blocked, decision.replanned, decision)
