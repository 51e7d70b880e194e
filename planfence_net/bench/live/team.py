"""The live team: thirty workflows of the stale-plan scenario, planned and acted on by a
language model, under every policy.

    families = workflows(per_family=10)        # 30: ten of each workflow family
    outcomes = await run_team(cdir, model, families)
    rows = team_rows(outcomes)

Each workflow is one of the three families of executor/workflows.toml with its own keys and
its own numbers. The planner (the model) reads the requirement and writes the plan's step;
the requirement's owner then revises it (every workflow: the revision lands after planning);
the executor (the model) reads the plan in force and says the action, which is issued under
the policy. Two kinds of error are counted apart:
    stale     the issued action's plan derives from a superseded requirement (the owners'
              logs judge it, `paper.oracle`): what PlanFence exists to prevent
    model     the executor's words leave out a value of the requirement its plan was derived
              from: the model's own mistake, whatever the policy
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Callable
from typing import Any

import anyio

from ...cluster.folder import ClusterDir
from ..paper.demo import run_demo
from ..paper.scenario import Family, Outcome, load_families
from .model import Model

PLAN_SYSTEM = (
    "You are the planning agent of a team. Write the plan for the task in one short "
    "sentence that repeats every value of the requirement exactly."
)
ACT_SYSTEM = (
    "You are the executing agent of a team. Say the action you will take now, in one short "
    "sentence that repeats every value of the plan exactly."
)


def workflows(per_family: int = 10) -> list[Family]:
    """`per_family` workflows of each family, each with keys and numbers of its own (every
    integer of the requirement and the fact moved by the workflow's index)."""
    out = []
    for i in range(per_family):
        for base in load_families():
            out.append(
                dataclasses.replace(
                    base,
                    name=f"{base.name}-{i}",
                    requirement=f"{base.requirement}-w{i}",
                    fact=f"{base.fact}-w{i}",
                    plan=f"{base.plan}-w{i}",
                    action=f"{base.action}-w{i}",
                    r3=_shifted(base.r3, i),
                    r4=_shifted(base.r4, i),
                    fact_body=_shifted(base.fact_body, i),
                )
            )
    return out


def _shifted(body: dict[str, Any], i: int) -> dict[str, Any]:
    return {k: v + i if isinstance(v, int) else v for k, v in body.items()}


class ModelPlanner:
    """The planner and the executor of `scenario.run_family`, both answered by `model` (run
    in a worker thread: a model call holds the CPU for a second or so)."""

    def __init__(self, model: Model) -> None:
        self.model = model

    async def plan(self, family: Family, requirement: Any) -> list[str]:
        prompt = f"Task: {family.action}. Requirement: {json.dumps(requirement)}."
        text = await anyio.to_thread.run_sync(self.model.complete, PLAN_SYSTEM, prompt, 48)
        return [text]

    async def act(self, family: Family, steps: list[str]) -> str | None:
        prompt = f"Plan: {' '.join(steps)}"
        return await anyio.to_thread.run_sync(self.model.complete, ACT_SYSTEM, prompt, 48)


def model_error(outcome: Outcome) -> bool:
    """True when an issued action's words leave out a value of the requirement its plan was
    derived from (compared as text, case-insensitively)."""
    if not outcome.issued or outcome.said is None or not isinstance(outcome.acted_on, dict):
        return False
    said = outcome.said.lower()
    return any(str(v).lower() not in said for v in outcome.acted_on.values())


async def run_team(
    cdir: ClusterDir,
    model: Model,
    families: list[Family],
    policies: tuple[str, ...] | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> list[Outcome]:
    """Every workflow under every policy on the running cluster at `cdir`, judged."""
    return await run_demo(cdir, policies, progress, families=families, planner=ModelPlanner(model))


def team_rows(outcomes: list[Outcome]) -> list[dict[str, Any]]:
    """One row per policy: workflows, issued, stale (invalid), model errors, replans,
    blocked, stall (ms per workflow)."""
    rows = []
    for policy in dict.fromkeys(o.policy for o in outcomes):
        mine = [o for o in outcomes if o.policy == policy]
        rows.append(
            {
                "policy": policy,
                "workflows": len(mine),
                "issued": sum(o.issued for o in mine),
                "stale": sum(bool(o.invalid) for o in mine),
                "model_errors": sum(model_error(o) for o in mine),
                "replans": sum(o.replanned for o in mine),
                "blocked": sum(o.blocked is not None for o in mine),
                "stall_ms": round(statistics.fmean(o.stall * 1000 for o in mine), 3),
            }
        )
    return rows


def team_problems(rows: list[dict[str, Any]]) -> list[str]:
    """What contradicts the study's claim, one phrase each; [] when it held: freshness acted
    on the stale plan in every workflow, the safe policies in none, and issued every one."""
    problems = []
    for row in rows:
        if row["policy"] == "freshness":
            if row["stale"] != row["workflows"]:
                problems.append(
                    f"freshness acted on a stale plan in {row['stale']} of {row['workflows']}"
                )
        elif row["stale"] or row["issued"] != row["workflows"]:
            problems.append(
                f"{row['policy']}: {row['stale']} stale, {row['issued']} of "
                f"{row['workflows']} issued"
            )
    return problems
