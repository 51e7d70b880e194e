"""A worker process of the churn benchmark: N executors deciding one plan while its owner
changes one of the declared keys.

    python -m planfence_net.bench.perf.churn_worker

Reads one JSON line (the spec: `cluster`, `plan`, `keys`, `facts` (key -> id hex), `records`
(the lineage, hex), `clients`), opens every executor (its own sessions to the owners) and
warms it with one decision, prints `ready`, then runs one phase per line it reads,
`go SECONDS share|own`, and prints one JSON line per phase: its `decisions` (each
[start, end, outcome, reason, replanned, the churned key's frontier id hex or None,
the other keys unchanged, seconds in the replan hook], times on
the machine's monotonic clock), `cpu` seconds, and the replica's fetch statistics.

A drifted decision replans: the executors of a process share one planner, which writes one
new plan per changed fact (`plan/churn-<pid>`, derived from the changed fact and the other
facts), hands its id to every executor that asks, and keeps the newest: each decision starts
from the newest plan of the process, as executors working on one plan would. With `share` the executors share one
replica (records, walks, fetches in flight); with `own` each has its own, as an executor
process of its own would.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from ...cluster.folder import ClusterDir
from ...core.gate import Action
from ...core.records import Record
from ...executor.pool import SessionPool
from ...executor.replica import Replica, settle
from ...executor.runner import GateRunner
from ...net.api import get_records

PLANNER = "planner"


class Planner:
    """One new plan per changed fact for the executors of this process (asked once, by the
    first executor that needs it; the others wait for its id)."""

    def __init__(self, pool: SessionPool, facts: dict[str, bytes], plan: bytes) -> None:
        self.pool = pool
        self.facts = dict(facts)
        self.current = (plan,)  # the newest plan: derived from the newest changed facts
        self._newest = -1  # the highest seq of a changed fact a plan was made from
        self.key = f"plan/churn-{os.getpid()}"
        self._plans: dict[tuple[bytes, ...], asyncio.Future[bytes]] = {}

    async def replan(self, action: Action, changed: tuple[Record, ...]) -> Sequence[bytes]:
        facts = dict(self.facts) | {record.key: record.id for record in changed}
        parents = tuple(facts[key] for key in action.deps)
        plan = self._plans.get(parents)
        if plan is None:
            plan = self._plans[parents] = asyncio.get_running_loop().create_future()
            args = {"key": self.key, "kind": "plan", "parents": list(parents), "body": {}}
            try:
                plan.set_result((await self.pool.request(PLANNER, "put", args))["id"])
                newest = max(record.seq for record in changed)
                if newest > self._newest:
                    self._newest, self.current = newest, (plan.result(),)
            except BaseException as exc:
                del self._plans[parents]
                plan.set_exception(exc)
                raise
        return [await asyncio.shield(plan)]


async def _run(spec: dict[str, Any]) -> None:
    cdir = ClusterDir(Path(spec["cluster"]))
    roster, identity = cdir.roster(), cdir.identity(PLANNER)
    churned, keys = spec["churned"], tuple(spec["keys"])
    facts = {key: bytes.fromhex(rid) for key, rid in spec["facts"].items()}
    lineage = await get_records(roster, identity, [bytes.fromhex(r) for r in spec["records"]])
    shared = await Replica.open(None)
    await shared.add(lineage)
    async with anyio.create_task_group() as tg:
        pools = [SessionPool(tg, roster, identity) for _ in range(spec["clients"])]
        own = [await Replica.open(None) for _ in pools]
        for replica in own:
            await replica.add(lineage)
        # the planner writes through an executor's sessions: an owner keeps at most 64
        # sessions of one roster member, and 64 executors hold that many already
        planner = Planner(pools[0], facts, bytes.fromhex(spec["plan"]))
        for pool, replica in zip(pools, own, strict=True):  # warm: sessions open, walks done
            for runner in (GateRunner(pool, shared), GateRunner(pool, replica)):
                await runner.wait_decision(Action("churn", planner.current, keys), planner.replan)
        settle()
        print("ready", flush=True)
        while (line := await anyio.to_thread.run_sync(sys.stdin.readline)).startswith("go"):
            _, seconds, mode = line.split()
            replicas = [shared] * len(pools) if mode == "share" else own
            runners = [GateRunner(p, r) for p, r in zip(pools, replicas, strict=True)]
            out = await _phase(runners, keys, churned, planner, float(seconds))
            print(json.dumps(out), flush=True)
        for pool in pools:
            await pool.aclose()
        tg.cancel_scope.cancel()


async def _phase(
    runners: list[GateRunner],
    keys: tuple[str, ...],
    churned: str,
    planner: Planner,
    seconds: float,
) -> dict[str, Any]:
    """Every runner decides as fast as it can for `seconds`, following its replans."""
    decisions: list[list[Any]] = []
    replicas = {id(r.replica): r.replica for r in runners}.values()
    before = [r.flights.statistics() for r in replicas]
    connects = sum(r.pool.connects for r in runners)
    cpu, stop_at = time.process_time(), time.monotonic() + seconds

    async def loop(runner: GateRunner) -> None:
        while (started := time.monotonic()) < stop_at:
            action = Action("churn", planner.current, keys)
            run = await runner.wait_decision(action, planner.replan)
            d = run.decision
            frontier = d.frontier.get(churned) if d.authorized else None
            decisions.append(
                [
                    started,
                    time.monotonic(),
                    d.outcome,
                    d.reason,
                    d.replanned,
                    frontier.hex() if frontier is not None else None,
                    _others_unchanged(d.frontier, planner.facts, churned) if d.authorized else True,
                    run.planning,
                ]
            )

    async with anyio.create_task_group() as tg:
        for runner in runners:
            tg.start_soon(loop, runner)
    after = [r.flights.statistics() for r in replicas]
    return {
        "decisions": decisions,
        "cpu": time.process_time() - cpu,
        "connects": sum(r.pool.connects for r in runners) - connects,
        "flown": sum(a["flown"] - b["flown"] for a, b in zip(after, before, strict=True)),
        "joined": sum(a["joined"] - b["joined"] for a, b in zip(after, before, strict=True)),
    }


def _others_unchanged(frontier: dict[str, bytes], facts: dict[str, bytes], churned: str) -> bool:
    """True when every declared key but the churned one is at the version the run began with
    (no one writes them)."""
    return all(rid == facts[key] for key, rid in frontier.items() if key != churned)


def main() -> None:
    spec = json.loads(sys.stdin.readline())
    anyio.run(_run, spec, backend="asyncio", backend_options={"use_uvloop": True})


if __name__ == "__main__":
    main()
