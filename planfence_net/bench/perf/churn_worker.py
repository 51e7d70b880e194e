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

A drifted decision replans onto the plan the cluster's planner wrote for the changed fact
(`plan/churn`, written by the benchmark right after each new version). Each process learns
the new plans once: one subscription to the planner's owner pushes each new plan with its
record, verified once, and the process's `Board` hands its id to every executor whose
decision drifted (and starts every decision from the newest one). With `share` the executors
of a process share one replica (the pushed plans are in it: nothing to fetch; records,
walks and fetches in flight shared); with `own` each has its own and fetches each new plan
itself, as an executor process of its own would.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from ...cluster.folder import ClusterDir
from ...core.answers import verified_records, verifier
from ...core.errors import PlanfenceError
from ...core.gate import Action
from ...core.records import Record
from ...executor.pool import SessionPool
from ...executor.replica import Replica, settle
from ...executor.runner import GateRunner
from ...net.api import get_records

PLANNER = "planner"
PLAN_KEY = "plan/churn"  # the cluster planner's plan, one version per changed fact
PLAN_WAIT = 2.0  # seconds a replan waits for the planner's new plan


class Board:
    """The plans the planner wrote, by the changed fact each was made for, as one
    subscription pushes them (verified, and added to the process's shared replica)."""

    def __init__(self, plan: bytes, replica: Replica, verify: Any) -> None:
        self.current = (plan,)  # the newest plan
        self.replica = replica
        self.verify = verify
        self._newest = -1
        self._plans: dict[bytes, bytes] = {}  # changed fact id -> plan id
        self._waiting: dict[bytes, anyio.Event] = {}

    async def run(self, pool: SessionPool) -> None:
        """Subscribe to the planner's plans on `pool`'s session and take the pushes, again
        whenever the session ends (an owner refuses a session beyond 64 of one roster member,
        and 64 executors run as that member)."""
        while True:
            try:
                session = await pool.session(PLANNER)
                pushes = await session.subscribe([PLAN_KEY], records=True)
            except PlanfenceError:
                await anyio.sleep(0.05)  # the owner refused a session: try again soon
                continue
            async with pushes:
                async for push in pushes:
                    await self._take(push)

    async def _take(self, push: dict[str, Any]) -> None:
        records = verified_records(push.get("records"), self.verify, bad="drop")
        await self.replica.add(records)
        for record in records:
            if record.key != PLAN_KEY:
                continue
            for fact in record.parents:
                self._plans[fact] = record.id
                if (event := self._waiting.pop(fact, None)) is not None:
                    event.set()
            if record.seq > self._newest:
                self._newest, self.current = record.seq, (record.id,)

    async def replan(self, action: Action, changed: tuple[Record, ...]) -> Sequence[bytes]:
        """The plan made for the changed facts, once the planner has written it (at most
        PLAN_WAIT seconds; then the newest plan, which the gate will find stale)."""
        with anyio.move_on_after(PLAN_WAIT):
            for record in changed:
                while record.id not in self._plans:
                    await self._waiting.setdefault(record.id, anyio.Event()).wait()
            return [self._plans[changed[0].id]]
        return list(self.current)


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
        board = Board(bytes.fromhex(spec["plan"]), shared, verifier(roster, shared.records))
        # subscribed on an executor's session: an owner keeps at most 64 sessions of one
        # roster member, and 64 executors hold that many already
        tg.start_soon(board.run, pools[0])
        for pool, replica in zip(pools, own, strict=True):  # warm: sessions open, walks done
            for runner in (GateRunner(pool, shared), GateRunner(pool, replica)):
                await runner.wait_decision(Action("churn", board.current, keys), board.replan)
        settle()
        print("ready", flush=True)
        while (line := await anyio.to_thread.run_sync(sys.stdin.readline)).startswith("go"):
            _, seconds, mode = line.split()
            replicas = [shared] * len(pools) if mode == "share" else own
            runners = [GateRunner(p, r) for p, r in zip(pools, replicas, strict=True)]
            out = await _phase(runners, keys, churned, board, facts, float(seconds))
            print(json.dumps(out), flush=True)
        for pool in pools:
            await pool.aclose()
        tg.cancel_scope.cancel()


async def _phase(
    runners: list[GateRunner],
    keys: tuple[str, ...],
    churned: str,
    board: Board,
    facts: dict[str, bytes],
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
            action = Action("churn", board.current, keys)
            run = await runner.wait_decision(action, board.replan)
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
                    _others_unchanged(d.frontier, facts, churned) if d.authorized else True,
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
