"""The partition run's workload, run as its own process in the executors' namespace:

    python -m planfence_net.bench.partition.workload CLUSTER HISTORY SECONDS DEADLINE

Writers put a new version of one key per data owner every `WRITE_EVERY` (as that owner);
executors, one per plan in `PLANS`, write a plan (as planner) over the versions last
acknowledged and ask the gate to authorize it, replanning on drift. Every put and every
decision goes to HISTORY as one JSON line with its start and end (time.time(), the clock the
owners' logs use); the checker (checker.py) reads it. Prints `ready` once every owner has
answered, and exits after SECONDS.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import anyio

from ...cluster.folder import ClusterDir
from ...core.errors import PlanfenceError
from ...core.gate import Action
from ...core.records import Record
from ...executor.pool import SessionPool
from ...executor.replica import Replica
from ...executor.runner import GateRunner

WRITE_EVERY = 0.1
DECIDE_EVERY = 0.05
KEYS = {"reqs": "req/p", "inventory": "inv/p", "ops": "ops/p", "audit": "audit/p"}
PLANS = {  # action name -> the keys its plan declares
    "ship": ("req/p", "inv/p"),
    "restock": ("inv/p", "ops/p"),
    "report": ("ops/p", "audit/p"),
    "bill": ("req/p", "audit/p"),
}
PLANNER = "planner"


class Workload:
    def __init__(self, root: Path, history: TextIO, deadline: float) -> None:
        self.cdir = ClusterDir(root)
        self.roster = self.cdir.roster()
        self.history = history
        self.deadline = deadline
        self.latest: dict[str, bytes] = {}  # key -> last acknowledged id
        self.have_all = anyio.Event()

    def record(self, entry: dict[str, Any]) -> None:
        self.history.write(json.dumps(entry, separators=(",", ":")) + "\n")
        self.history.flush()

    async def put(
        self, pool: SessionPool, owner: str, args: dict[str, Any], kind: str
    ) -> bytes | None:
        """One put under the deadline, recorded; the id when acknowledged."""
        started = time.time()
        entry: dict[str, Any] = {"type": kind, "owner": owner, "key": args["key"], "start": started}
        result = None
        try:
            with anyio.move_on_after(self.deadline):
                result = await pool.request(owner, "put", args)
        except PlanfenceError as exc:
            entry["error"] = str(exc)
        entry["end"] = time.time()
        if result is None:
            entry.setdefault("error", "timeout")
            self.record(entry)
            return None
        entry.update(ok=True, id=result["id"].hex(), seq=result["seq"])
        self.record(entry)
        return bytes(result["id"])

    async def write(self, tg: Any, owner: str, stop: float) -> None:
        pool = SessionPool(tg, self.roster, self.cdir.identity(owner))
        key, n = KEYS[owner], 0
        while time.time() < stop:
            n += 1
            rid = await self.put(pool, owner, {"key": key, "body": n}, "put")
            if rid is not None:
                self.latest[key] = rid
                if len(self.latest) == len(KEYS):
                    self.have_all.set()
            await anyio.sleep(WRITE_EVERY)
        await pool.aclose()

    async def execute(self, tg: Any, name: str, stop: float) -> None:
        deps = PLANS[name]
        planner = SessionPool(tg, self.roster, self.cdir.identity(PLANNER))
        runner = GateRunner(
            SessionPool(tg, self.roster, self.cdir.identity(PLANNER)),
            await Replica.open(None),
            timeout=self.deadline,  # the whole decision, not each step
        )
        await self.have_all.wait()
        while time.time() < stop:
            parents = {k: self.latest[k] for k in deps}
            plan = await self.plan(planner, name, parents)
            if plan is not None:
                await self.decide(runner, planner, name, plan, parents)
            await anyio.sleep(DECIDE_EVERY)
        await planner.aclose()
        await runner.pool.aclose()

    async def plan(
        self, planner: SessionPool, name: str, parents: dict[str, bytes]
    ) -> bytes | None:
        args = {
            "key": f"plan/{name}",
            "kind": "plan",
            "parents": list(parents.values()),
            "body": name,
        }
        return await self.put(planner, PLANNER, args, "plan")

    async def decide(
        self,
        runner: GateRunner,
        planner: SessionPool,
        name: str,
        plan: bytes,
        parents: dict[str, bytes],
    ) -> None:
        async def replan(action: Action, changed: tuple[Record, ...]) -> list[bytes]:
            for record in changed:
                parents[record.key] = record.id
            new = await self.plan(planner, name, parents)
            if new is None:
                raise PlanfenceError("replan: the plan could not be written")
            return [new]

        started = time.time()
        entry: dict[str, Any] = {"type": "authorize", "action": name, "plan": plan.hex()}
        entry.update(deps=list(PLANS[name]), start=started)
        run = None
        try:
            with anyio.move_on_after(6 * self.deadline):
                run = await runner.wait_decision(Action(name, (plan,), PLANS[name]), replan)
        except PlanfenceError as exc:
            entry["error"] = str(exc)
        entry["end"] = time.time()
        if run is None:
            entry.setdefault("error", "no decision")
            self.record(entry)
            return
        d = run.decision
        entry.update(
            outcome=d.outcome,
            reason=d.reason,
            elapsed=d.elapsed,
            frontier={k: v.hex() for k, v in d.frontier.items()},
            heads={k: [v[0].hex() if v[0] else None, v[1]] for k, v in d.heads.items()},
        )
        self.record(entry)


async def main(root: Path, history_path: Path, seconds: float, deadline: float) -> None:
    with history_path.open("a") as history:
        workload = Workload(root, history, deadline)
        stop = time.time() + seconds
        async with anyio.create_task_group() as tg:
            for owner in KEYS:
                tg.start_soon(workload.write, tg, owner, stop)
            for name in PLANS:
                tg.start_soon(workload.execute, tg, name, stop)
            with anyio.fail_after(10 * deadline):
                await workload.have_all.wait()
            print("ready", flush=True)
            await anyio.sleep(max(0.0, stop - time.time()) + 2 * deadline)  # the last decisions
            tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))
