"""The experiment harness: live owners, a central store, shaped links, one schedule per case.

    with bench_cluster(root) as cdir:                 # 8 owners + the central store
        rows = run_async(run_experiment, cdir, experiment, "loopback", seed, links)

Per protected action: the planner reads the current heads of the action's true dependencies
and writes a plan from them (its body lists the workflow's work units; through a chain of
summaries when the case asks for depth) and hands the plan and its lineage to the executor
(not under the `central-walk` ablation, whose executor reads them from the store); plan
delivery is charged to no policy. The schedule's background updates and its revision are
published (one after another under the paper's workload, as a burst under the ablation), each
complete as its policy's design says (committed at its owner; at the central
store; acknowledged by every participant under `sync`): that span is `update_ms`. Then the
executor is **ready to act**. One timer, the same for every policy, runs from there until the
policy says authorized or blocked: that is the stall. The replanning model call inside it
(composing the new plan) is timed apart and subtracted, reported as `replan_ms`; the replanned
plan's write, and every read and write a policy makes, stay inside the stall. The replan
plans from what the planner read before and the changed records the policy fetched, never
from the harness's own view of the heads. If the action is issued, the action record is written on the roots the
policy returned (outside the timer). Every policy gets its own copy of every key (namespaced
by policy) and the same schedule; with links (bench/paper/network.py, run in a process of their own
by bench/paper/linkproc.py) every link is re-anchored at
the action's trace phases right before "ready to act". `invalid` is then judged by the oracle
from the owners' and central store's own logs.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable
from typing import Any

import anyio

from ...cluster.folder import ClusterDir
from ...cluster.ports import free_port
from ...core.gate import Action
from ...core.records import Record
from ...executor.pool import SessionPool
from ..policies.baselines import hands_off, make_baseline, make_writer, wired_agents
from ..policies.faults import CorruptingPool
from ..policies.policy import Addresses, Baseline, Parts, Verdict, Workflow
from ..policies.writers import Writer
from .benchcluster import bench_cluster as bench_cluster
from .experiments import Case, Experiment
from .hostload import load_average
from .linkproc import LinkProcess
from .network import LinkModel
from .oracle import Oracle
from .workload import (
    EXECUTOR,
    PLANNER,
    ActionSpec,
    KeySpace,
    fact_owners,
    make_schedule,
    work_units,
)

Row = dict[str, Any]
Progress = Callable[[str], None]
Clock = Callable[[], float]


# ---- one action -------------------------------------------------------------------------------


class PolicyRun:
    """One policy on one case: the baseline, the writer, the schedule's key spaces, the
    harness's clock (the one stall timer) and the network to re-anchor per action."""

    def __init__(
        self,
        policy: str,
        case: Case,
        baseline: Baseline,
        writer: Writer,
        spaces: dict[str, KeySpace],
        clock: Clock = time.perf_counter,
        network: LinkProcess | None = None,
    ) -> None:
        self.policy, self.case, self.baseline, self.writer = policy, case, baseline, writer
        self.spaces, self.clock, self.network = spaces, clock, network

    def compose(self, spec: ActionSpec, attempt: int) -> dict[str, Any]:
        """The planner's model call: the plan body (its work units)."""
        return {
            "template": spec.template.name,
            "attempt": attempt,
            "units": work_units(spec.template),
        }

    async def write_plan(
        self, spec: ActionSpec, body: dict[str, Any], read: dict[str, Record]
    ) -> Record:
        """Plan from the records the planner read (`read`: key -> record of every true
        dependency); hand plan and lineage over (every policy but `central-walk`)."""
        space = self.spaces[spec.template.name]
        deps = [read[k] for k in space.names(spec.deps)]
        parents = tuple(r.id for r in deps)
        handoff: list[Record] = list(deps)
        base = f"{space.planner_prefix}/a{spec.index}"
        depth = spec.depth if body["attempt"] == 0 else 1
        for level in range(depth - 1, 0, -1):
            summary = await self.writer.put(
                f"{base}/s{level}", {"level": level}, parents, kind="summary"
            )
            handoff.append(summary)
            parents = (summary.id,)
        if self.case.fault == "missing_lineage" and body["attempt"] == 0:
            parents += (hashlib.blake2b(spec.name.encode(), digest_size=32).digest(),)
        plan = await self.writer.put(base, body, parents, kind="plan")
        handoff.append(plan)
        if self.baseline.handoff:
            await self.baseline.replica.add(handoff)
        return plan

    async def revise(self, key: str, why: str) -> None:
        await self.writer.put(key, {"revision": why, "after": self.writer.heads[key].seq})

    async def act(self, spec: ActionSpec) -> Row:
        space = self.spaces[spec.template.name]
        began_ts = time.time()
        # The planner reads the current heads of the true dependencies, then plans.
        read = {k: self.writer.heads[k] for k in space.names(spec.deps)}
        plan = await self.write_plan(spec, self.compose(spec, 0), read)
        mark = self.baseline.traffic()  # plan delivery is before the timer and charged to none
        update = await self.publish_updates(spec, space)
        action = Action(f"{self.policy}/{spec.name}", (plan.id,), space.names(spec.declared))
        attempts, model = [0], [0.0]

        async def replan(_: Action, changed: tuple[Record, ...]) -> list[bytes]:
            # Only what the planner read before and what the gate fetched: never the harness's
            # own view of the heads.
            read.update((r.key, r) for r in changed if r.key in read)
            attempts[0] += 1
            began = self.clock()
            body = self.compose(spec, attempts[0])
            model[0] += self.clock() - began
            new = await self.write_plan(spec, body, read)
            if self.case.fault == "second_change" and spec.revise is not None:
                await self.revise(space.keys[spec.revise], "second change")
            return [new.id]

        if self.network is not None:
            await self.network.rephase(f"{self.case.label}/{spec.name}", self.policy)
        ready_ts = time.time()
        ready = self.clock()
        verdict = await self.baseline.validate(action, replan, list(space.keys))
        stall = self.clock() - ready - model[0]
        done_ts = time.time()
        action_id = await self.record_action(spec, space, verdict, action) if verdict.issued else ""
        return self.row(
            spec,
            space,
            verdict,
            stall=stall,
            replan=model[0],
            update=update,
            mark=mark,
            action_id=action_id,
            stamps=(began_ts, ready_ts, done_ts),
        )

    async def publish_updates(self, spec: ActionSpec, space: KeySpace) -> float:
        """The action's background updates and its revision (if it has one), until complete
        (K > 1 sync: settled); returns their time. Spread (the paper's workload): one after
        another, each complete before the next, the revision after `revise_at` of them.
        Burst (the ablation): the background updates concurrently, then the revision."""
        published = self.clock()
        if spec.spread:
            updates = [(space.keys[j], "background") for j in spec.dirty]
            if spec.revise is not None:
                updates.insert(spec.revise_at, (space.keys[spec.revise], "revision"))
            for key, why in updates:
                await self.revise(key, why)
        else:
            async with anyio.create_task_group() as tg:  # other agents' updates, concurrent
                for j in spec.dirty:
                    tg.start_soon(self.revise, space.keys[j], "background")
            if spec.revise is not None:
                await self.revise(space.keys[spec.revise], "revision")
        settle = getattr(self.writer, "settle", None)
        if settle is not None:
            await settle()  # K > 1 sync: the burst completes when every participant has it
        return self.clock() - published

    async def record_action(
        self, spec: ActionSpec, space: KeySpace, verdict: Verdict, action: Action
    ) -> str:
        """Write the issued action's record on the verdict's roots; returns its id in hex."""
        record = await self.writer.put(
            f"{space.executor_prefix}/a{spec.index}",
            {"action": action.name},
            verdict.roots,
            kind="action",
        )
        return record.id.hex()

    def row(
        self,
        spec: ActionSpec,
        space: KeySpace,
        verdict: Verdict,
        *,
        stall: float,
        replan: float,
        update: float,
        mark: int,
        action_id: str,
        stamps: tuple[float, float, float],
    ) -> Row:
        """The result row of one action (times in seconds in, ms out; `mark` the traffic
        before the timer; `stamps` when it began, was ready to act and was decided)."""
        began_ts, ready_ts, done_ts = stamps
        return {
            "case": self.case.label,
            "group": self.case.group,
            "x": self.case.x,
            "policy": self.policy,
            "template": spec.template.name,
            "family": spec.template.family,
            "action": spec.index,
            "agents": spec.template.agents,
            "keys": spec.template.keys,
            "d": spec.template.d,
            "declared": len(spec.declared),
            "depth": spec.depth,
            "dirty": len(spec.dirty),
            "revised": spec.revise is not None,
            "workload": "spread" if spec.spread else "burst",
            "fault": self.case.fault or "",
            "issued": verdict.issued,
            "blocked": verdict.blocked or "",
            "detail": verdict.decision.detail
            if verdict.blocked and verdict.decision is not None
            else "",
            "replanned": verdict.replanned,
            "stall_ms": round(stall * 1000, 3),
            "replan_ms": round(replan * 1000, 3),
            "update_ms": round(update * 1000, 3),
            "bytes": self.baseline.traffic() - mark,
            "invalid": None,
            "action_id": action_id,
            "deps": ";".join(space.names(spec.deps)),
            "load1": load_average(),
            "began_ts": began_ts,
            "ready_ts": ready_ts,
            "done_ts": done_ts,
            "ended_ts": time.time(),
        }


# ---- one experiment ---------------------------------------------------------------------------


async def run_experiment(
    cdir: ClusterDir,
    experiment: Experiment,
    profile: str,
    seed: int,
    links: LinkModel | None,
    progress: Progress = lambda _: None,
    sync_k: int = 1,
    clock: Clock = time.perf_counter,
) -> list[Row]:
    """Run every policy of `experiment` over its cases; returns judged per-action rows.
    `links` None is loopback (no shaping); `sync_k` is the K of the `sync` baseline (push
    after every K updates); `clock` is the stall timer (tests inject a fake one)."""
    rows: list[Row] = []
    for policy in experiment.policies:
        cases = [c for c in experiment.cases if policy in c.policies]
        rows += await _run_policy(cdir, policy, cases, links, seed, progress, sync_k, clock)
    for row in rows:
        row["profile"] = profile
    judge(cdir, rows)
    return rows


async def _run_policy(
    cdir: ClusterDir,
    policy: str,
    cases: list[Case],
    links: LinkModel | None,
    seed: int,
    progress: Progress,
    sync_k: int,
    clock: Clock,
) -> list[Row]:
    roster = cdir.roster()
    identity_of = functools.cache(cdir.identity)
    rows: list[Row] = []
    async with anyio.create_task_group() as tg:
        network = None
        if links is not None:
            network = LinkProcess(cdir.roster_path, links, seed, wired_agents(policy))
            await network.start(tg)
        addresses_of = network.addresses_of if network is not None else _direct
        writer = make_writer(policy, tg, roster, identity_of, addresses_of)
        spaces: dict[str, KeySpace] = {}
        try:
            for case in cases:
                await _init_keys(writer, roster, case, policy, spaces)
                parts = Parts(
                    tg,
                    roster,
                    identity_of,
                    EXECUTOR,
                    _addresses(case, roster, addresses_of(EXECUTOR)),
                    writer,
                    CorruptingPool if case.fault == "malformed_heads" else SessionPool,
                    sync_k=sync_k,
                    workflows=_workflows(roster, case, spaces, policy),
                    links=addresses_of,
                    handoff=hands_off(policy),
                )
                baseline = make_baseline(policy, parts)
                try:
                    await baseline.start([k for t in case.templates for k in spaces[t.name].keys])
                    run = PolicyRun(policy, case, baseline, writer, spaces, clock, network)
                    for spec in make_schedule(list(case.templates), case.params, seed):
                        rows.append(await run.act(spec))
                        progress(f"{policy} {case.label}")
                finally:
                    await baseline.aclose()
        finally:
            await writer.aclose()
            tg.cancel_scope.cancel()
    return rows


def _direct(_: str) -> Addresses:
    return {}


def _workflows(
    roster: Any, case: Case, spaces: dict[str, KeySpace], policy: str
) -> tuple[Workflow, ...]:
    """Each template of the case is one workflow: its keys and its agents."""
    return tuple(
        Workflow(
            f"{policy}/{t.name}", spaces[t.name].keys, (PLANNER, EXECUTOR, *fact_owners(roster, t))
        )
        for t in case.templates
    )


async def _init_keys(
    writer: Writer, roster: Any, case: Case, policy: str, spaces: dict[str, KeySpace]
) -> None:
    """First version of every key of the case's templates (new templates only), written
    concurrently across owners so the owners group-commit them."""
    todo = [t for t in case.templates if t.name not in spaces]
    for template in todo:
        spaces[template.name] = KeySpace.of(roster, template, policy)
    keys = [k for t in todo for k in spaces[t.name].keys]
    by_owner: dict[str, list[str]] = {}
    for key in keys:
        by_owner.setdefault(roster.owner_of(key), []).append(key)

    async def write(owner_keys: list[str]) -> None:
        for key in owner_keys:
            await writer.put(key, {"v": 1})

    async with anyio.create_task_group() as tg:
        for owner_keys in by_owner.values():
            tg.start_soon(write, owner_keys)


def _addresses(case: Case, roster: Any, addresses: Addresses) -> Addresses:
    """Where the executor reaches owners; for the outage fault every fact owner is a port
    nothing listens on."""
    if case.fault != "outage":
        return addresses
    dead = ("127.0.0.1", free_port())
    owners = {o for t in case.templates for o in fact_owners(roster, t)}
    return {**addresses, **{o: dead for o in owners}}


def judge(cdir: ClusterDir, rows: list[Row]) -> None:
    """Fill `invalid` of every issued row from the owners' and central store's logs, judged
    against the action's true dependencies (declared or not)."""
    oracle = Oracle.from_logs(cdir.log(name) for name in cdir.roster().names)
    for row in rows:
        if row["issued"]:
            deps = [k for k in row["deps"].split(";") if k]
            row["invalid"] = oracle.judge(row["action_id"], deps).invalid
        else:
            row["invalid"] = False
