"""The stale-plan scenario of the paper's introduction, on a live cluster.

For each workflow family: the planner derives a plan from requirement r3 (and a fact), the
requirement's owner revises it to r4, then an executor with a fresh replica acts. Under
`freshness` it acts on the plan it holds; under `planfence` the gate finds the drift, the
planner replans once from r4, and the action is issued on the new plan.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cluster import PROJECT_ROOT, ClusterDir
from ..gate import Action, Decision
from ..api import group_by_owner
from ..records import Record, record_from_wire
from .pool import SessionPool
from .runner import GateRunner

WORKFLOWS = PROJECT_ROOT / "executor" / "workflows.toml"
EXECUTOR_AGENT = "ops"


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    requirement: str
    fact: str
    plan: str
    action: str
    r3: Any
    r4: Any
    fact_body: Any


def load_families(path: Path = WORKFLOWS) -> list[Family]:
    data = tomllib.loads(path.read_text())
    return [Family(name, **spec) for name, spec in data.items()]


@dataclass(slots=True)
class Outcome:
    """One protected action's result."""

    family: str
    policy: str
    issued: bool
    action_id: bytes | None
    deps: tuple[str, ...]
    replanned: bool = False
    blocked: str | None = None
    stall: float = 0.0
    traffic: int = 0
    decision: Decision | None = None
    invalid: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Writers:
    """Pooled sessions for each agent that writes in the scenario (not coordination traffic)."""

    def __init__(self, task_group: Any, cdir: ClusterDir,
                 addresses: dict[str, tuple[str, int]] | None = None) -> None:
        self.cdir = cdir
        self.addresses = addresses
        self.roster = cdir.roster()
        self._tg = task_group
        self._pools: dict[str, SessionPool] = {}

    async def put(self, key: str, body: Any, parents: list[bytes] | tuple[bytes, ...] = (),
                  kind: str = "fact") -> bytes:
        owner = self.roster.owner_of(key)
        assert owner is not None, key
        pool = self._pools.get(owner)
        if pool is None:
            pool = self._pools[owner] = SessionPool(self._tg, self.roster,
                                                    self.cdir.identity(owner), self.addresses)
        result = await pool.request(owner, "put", {"key": key, "kind": kind,
                                                   "parents": list(parents), "body": body})
        rid: bytes = result["id"]
        return rid

    async def aclose(self) -> None:
        for pool in self._pools.values():
            await pool.aclose()


async def run_family(family: Family, policy: str, writers: Writers,
                     runner: GateRunner) -> Outcome:
    """Plan from r3, revise to r4, act under `policy` ("freshness" or "planfence")."""
    key = lambda base: f"{base}/{policy}"  # noqa: E731 - one namespace per policy run
    requirement, fact, plan_key = key(family.requirement), key(family.fact), key(family.plan)
    r3 = await writers.put(requirement, family.r3)
    fact_id = await writers.put(fact, family.fact_body)
    plan = await writers.put(plan_key, {"from": "r3", "steps": _steps(family, family.r3)},
                             [r3, fact_id], kind="plan")
    await writers.put(requirement, family.r4)  # r4: the revision the planner never saw
    deps = (requirement, fact)
    action = Action(key(family.action), (plan,), deps)

    async def replan(action: Action, changed: tuple[Record, ...]) -> list[bytes]:
        newest = {r.key: r for r in changed}
        parents = [newest[requirement].id if requirement in newest else r3,
                   newest[fact].id if fact in newest else fact_id]
        body = newest[requirement].body if requirement in newest else family.r3
        return [await writers.put(plan_key, {"from": "replan", "steps": _steps(family, body)},
                                  parents, kind="plan")]

    outcome = Outcome(family.name, policy, issued=False, action_id=None, deps=deps)
    roots: tuple[bytes, ...] = action.roots
    if policy == "freshness":
        await refresh_replica(runner, deps)  # fresh memory, off the critical path
    elif policy == "planfence":
        run = await runner.wait_decision(action, replan)
        outcome.decision, outcome.stall = run.decision, run.stall
        outcome.replanned = run.decision.replanned
        outcome.traffic = run.decision.bytes_sent + run.decision.bytes_received
        if not run.decision.authorized:
            outcome.blocked = run.decision.reason
            return outcome
        roots = run.roots
    outcome.action_id = await writers.put(action.name, {"action": family.action,
                                                        "deps": list(deps), "policy": policy},
                                          roots, kind="action")
    outcome.issued = True
    return outcome


def _steps(family: Family, requirement: Any) -> list[str]:
    return [f"{family.name}: act on {requirement}"]


async def refresh_replica(runner: GateRunner, keys: tuple[str, ...]) -> None:
    """Bring the executor's replica to the owners' heads of `keys` (the freshness baseline's
    memory). Records come back inline because nothing is expected."""
    for owner, owner_keys in group_by_owner(runner.roster, list(keys)).items():
        result = await runner.pool.request(owner, "heads", {"keys": owner_keys})
        wanted = [rid for _, rid, _ in result["heads"] if rid is not None]
        fetched = await runner.pool.request(owner, "get", {"ids": wanted})
        records = [record_from_wire(w) for w in fetched["records"]]
        for record in records:
            runner.verify(record)
        await runner.replica.add(records)
