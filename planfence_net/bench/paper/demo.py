"""The main job: the stale-plan scenario under the baselines and PlanFence, with a table."""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from ...cluster.folder import ClusterDir
from ...executor.decisionlog import DecisionLog
from ..policies.baselines import POLICIES, make_baseline, make_writer
from ..policies.policy import Addresses, Parts
from ..policies.writers import CENTRAL
from .oracle import Oracle
from .scenario import SCRIPTED, Family, Outcome, Planner, load_families, run_family
from .workload import EXECUTOR


@dataclass(frozen=True, slots=True)
class PolicySummary:
    policy: str
    actions: int
    issued: int
    invalid: int
    replans: int
    blocked: int
    stall_ms: float
    kib: float

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "actions": self.actions,
            "issued": self.issued,
            "invalid": self.invalid,
            "replans": self.replans,
            "blocked": self.blocked,
            "stall_ms_per_action": round(self.stall_ms, 3),
            "kib_per_action": round(self.kib, 3),
        }


def available_policies(cdir: ClusterDir) -> tuple[str, ...]:
    """Every policy, less `central` when the cluster has no central store."""
    names = cdir.roster().names
    return tuple(p for p in POLICIES if p != CENTRAL or CENTRAL in names)


async def run_demo(
    cdir: ClusterDir,
    policies: tuple[str, ...] | None = None,
    progress: Callable[[str], None] = lambda _: None,
    addresses: Addresses | None = None,
    families: list[Family] | None = None,
    planner: Planner = SCRIPTED,
) -> list[Outcome]:
    """Run every workflow family (the three of workflows.toml unless given) under every
    policy on the running cluster at `cdir` (reaching owners at `addresses` where given),
    planned and acted on by `planner`, then judge every issued action from the owners' logs
    (when they are readable from here). Every gate decision of the executor is appended to
    its decision log in the cluster folder (`executor.decisionlog`), for `planfence view`."""
    roster = cdir.roster()
    identity_of = functools.cache(cdir.identity)
    outcomes = []
    decisions = DecisionLog.in_folder(cdir.root, EXECUTOR, roster.owner_of)
    try:
        for policy in policies or available_policies(cdir):
            async with anyio.create_task_group() as tg:
                writer = make_writer(policy, tg, roster, identity_of, lambda _: addresses or {})
                parts = Parts(
                    tg, roster, identity_of, EXECUTOR, addresses or {}, writer, decisions=decisions
                )
                baseline = make_baseline(policy, parts)
                workflows = families or load_families()
                await baseline.start(
                    [f"{k}/{policy}" for f in workflows for k in (f.requirement, f.fact)]
                )
                for family in workflows:
                    progress(f"{family.name} / {policy}")
                    outcomes.append(await run_family(family, baseline, writer, planner))
                await baseline.aclose()
                await writer.aclose()
                tg.cancel_scope.cancel()
    finally:
        decisions.close()
    judge(cdir, outcomes)
    return outcomes


def judge(cdir: ClusterDir, outcomes: list[Outcome]) -> None:
    """Fill `invalid` of every issued outcome from the owners' own logs."""
    oracle = Oracle.from_logs(cdir.log(name) for name in cdir.roster().names)
    for outcome in outcomes:
        if outcome.issued and outcome.action_id is not None:
            try:
                outcome.invalid = oracle.judge(outcome.action_id.hex(), outcome.deps).invalid
            except KeyError:  # the owner's log is not readable from here
                outcome.invalid = None


def verdict(outcomes: list[Outcome]) -> list[str]:
    """What contradicts the scenario's claim, one phrase each; [] when the claim held.

    The claim: the race happened (`freshness`, the control, issued an invalid action), and
    every other policy issued every action, none invalid as the owners' logs judge it.
    """
    problems = []
    control = [o for o in outcomes if o.policy == "freshness"]
    if control and not any(o.invalid for o in control):
        problems.append("freshness issued no invalid action, so the race did not happen")
    for o in outcomes:
        if o.policy == "freshness":
            continue
        if not o.issued:
            problems.append(f"{o.policy} did not issue the {o.family} action ({o.blocked})")
        elif o.invalid is None:
            problems.append(
                f"{o.policy}: the {o.family} action could not be judged "
                "(the owners' logs are not readable here)"
            )
        elif o.invalid:
            problems.append(f"{o.policy} issued an invalid {o.family} action")
    return problems


def summarize(outcomes: list[Outcome]) -> list[PolicySummary]:
    rows = []
    for policy in dict.fromkeys(o.policy for o in outcomes):
        mine = [o for o in outcomes if o.policy == policy]
        rows.append(
            PolicySummary(
                policy,
                len(mine),
                sum(o.issued for o in mine),
                sum(bool(o.invalid) for o in mine),
                sum(o.replanned for o in mine),
                sum(o.blocked is not None for o in mine),
                statistics.fmean(o.stall * 1000 for o in mine),
                statistics.fmean(o.traffic / 1024 for o in mine),
            )
        )
    return rows
