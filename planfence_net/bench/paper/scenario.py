"""The stale-plan scenario of the paper's introduction, for one workflow family and policy.

The planner derives a plan from requirement r3 (and a fact), the requirement's owner revises
it to r4, then an executor with a fresh replica acts under the policy. `freshness` acts on the
plan it holds; the safe policies find the drift, the planner replans once from r4, and the
action is issued on the new plan.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ...core.decision import Decision
from ...core.gate import Action
from ...core.records import Record
from ...defaults import data_dir
from ..policies.policy import Baseline
from ..policies.writers import Writer

WORKFLOWS = data_dir("executor") / "workflows.toml"


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
    said: str | None = None  # the executor's words, when a model acts (bench/live)
    acted_on: Any = None  # the requirement the plan in force was derived from


class Planner(Protocol):
    """Who writes the plan's steps and says the action: a script, or a model (bench/live)."""

    async def plan(self, family: Family, requirement: Any) -> list[str]: ...

    async def act(self, family: Family, steps: list[str]) -> str | None: ...


class Scripted:
    """The scripted planner: steps that name the requirement; the executor says nothing."""

    async def plan(self, family: Family, requirement: Any) -> list[str]:
        return steps(family, requirement)

    async def act(self, family: Family, steps: list[str]) -> str | None:
        return None


SCRIPTED = Scripted()


async def run_family(
    family: Family, baseline: Baseline, writer: Writer, planner: Planner = SCRIPTED
) -> Outcome:
    """Plan from r3, revise to r4, act under `baseline`; every key namespaced by policy."""
    policy = baseline.name
    requirement, fact, plan_key, action_key = (
        f"{base}/{policy}" for base in (family.requirement, family.fact, family.plan, family.action)
    )
    r3 = await writer.put(requirement, family.r3)
    fact_record = await writer.put(fact, family.fact_body)
    in_force = (family.r3, await planner.plan(family, family.r3))
    plan = await writer.put(
        plan_key,
        {"from": "r3", "steps": in_force[1]},
        (r3.id, fact_record.id),
        kind="plan",
    )
    # the planner hands the plan and what it read to the executor
    await baseline.replica.add([r3, fact_record, plan])
    mark = baseline.traffic()  # from the revision on, as the bench counts it
    await writer.put(requirement, family.r4)  # r4: the revision the planner never saw
    deps = (requirement, fact)

    async def replan(action: Action, changed: tuple[Record, ...]) -> list[bytes]:
        nonlocal in_force
        newest = {r.key: r for r in changed}
        read = newest.get(requirement, writer.heads[requirement])
        in_force = (read.body, await planner.plan(family, read.body))
        new_plan = await writer.put(
            plan_key,
            {"from": "replan", "steps": in_force[1]},
            (read.id, newest.get(fact, fact_record).id),
            kind="plan",
        )
        await baseline.replica.add([new_plan])
        return [new_plan.id]

    verdict = await baseline.validate(Action(action_key, (plan.id,), deps), replan, list(deps))
    outcome = Outcome(
        family.name,
        policy,
        verdict.issued,
        None,
        deps,
        verdict.replanned,
        verdict.blocked,
        verdict.stall,
        baseline.traffic() - mark,
        verdict.decision,
    )
    if verdict.issued:
        outcome.said = await planner.act(family, in_force[1])
        outcome.acted_on = in_force[0]
        body = {"action": family.action, "deps": list(deps), "policy": policy}
        if outcome.said is not None:
            body["said"] = outcome.said
        record = await writer.put(
            action_key,
            body,
            verdict.roots,
            kind="action",
        )
        outcome.action_id = record.id
    return outcome


def steps(family: Family, requirement: Any) -> list[str]:
    return [f"{family.name}: act on {requirement}"]
