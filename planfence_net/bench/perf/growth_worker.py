"""A worker process of the executors curve: N concurrent clients deciding (or sending etcd
Txns) as fast as they can.

    python -m planfence_net.bench.perf.growth_worker planfence|etcd

Reads one JSON line (the spec: `clients`, `seconds`, and `cluster`, `plan`, `keys`, `records` for
planfence or `port`, `revisions` for etcd), opens every client and warms it with one
decision, prints `ready`, waits for a `go` line, runs for `seconds`, and prints one JSON line:
`done` (decisions or Txns that succeeded), `elapsed`, the process's `cpu` seconds (all its
threads) meanwhile and a sample of `latencies` (seconds).
Every planfence client is an executor of its own (its own `GateRunner`); with `pool`
"executor" each also has its own sessions to the owners, with "process" the executors of
one worker share one `SessionPool` (one session per owner, their requests pipelined on it),
as the executors of one real process would.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from ...cluster.folder import ClusterDir
from ...core.gate import Action
from ...executor.pool import SessionPool
from ...executor.replica import Replica
from ...executor.runner import GateRunner
from ...net.api import get_records
from .etcd import GrpcEtcd

SAMPLE = 2000  # latencies kept per client: its first SAMPLE calls


async def _planfence(spec: dict[str, Any]) -> None:
    cdir = ClusterDir(Path(spec["cluster"]))
    roster, identity = cdir.roster(), cdir.identity("planner")
    plan = bytes.fromhex(spec["plan"])
    action = Action("conc", (plan,), tuple(spec["keys"]))
    replica = await Replica.open(None)
    ids = [bytes.fromhex(r) for r in spec["records"]]
    await replica.add(await get_records(roster, identity, ids))
    async with anyio.create_task_group() as tg:
        if spec.get("pool", "executor") == "process":
            pools = [SessionPool(tg, roster, identity)]
            runners = [GateRunner(pools[0], replica) for _ in range(spec["clients"])]
        else:
            pools = [SessionPool(tg, roster, identity) for _ in range(spec["clients"])]
            runners = [GateRunner(pool, replica) for pool in pools]

        def decide(runner: GateRunner) -> Callable[[], Awaitable[bool]]:
            async def once() -> bool:
                run = await runner.wait_decision(action)
                return run.decision.authorized

            return once

        await _race([decide(r) for r in runners], spec["seconds"])
        for pool in pools:
            await pool.aclose()
        tg.cancel_scope.cancel()


async def _etcd(spec: dict[str, Any]) -> None:
    clients = [await GrpcEtcd.connect(spec["port"]) for _ in range(spec["clients"])]
    revisions = spec["revisions"]

    def txn(client: GrpcEtcd) -> Callable[[], Awaitable[bool]]:
        return lambda: client.txn_unchanged(revisions)

    try:
        await _race([txn(c) for c in clients], spec["seconds"])
    finally:
        for client in clients:
            await client.close()


async def _race(calls: list[Callable[[], Awaitable[bool]]], seconds: float) -> None:
    for call in calls:  # warm: sessions open, lineage walked once
        if not await call():
            raise AssertionError("the warm-up call did not succeed")
    print("ready", flush=True)
    await anyio.to_thread.run_sync(sys.stdin.readline)
    latencies: list[float] = []
    done = 0
    cpu = time.process_time()  # every thread of this process (gRPC's too)
    started = time.perf_counter()
    stop_at = started + seconds

    async def loop(call: Callable[[], Awaitable[bool]]) -> None:
        nonlocal done
        kept = 0
        while time.perf_counter() < stop_at:
            begun = time.perf_counter()
            if not await call():
                raise AssertionError("a call did not succeed under load")
            if kept < SAMPLE:
                latencies.append(time.perf_counter() - begun)
                kept += 1
            done += 1

    async with anyio.create_task_group() as tg:
        for call in calls:
            tg.start_soon(loop, call)
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    out = {"done": done, "elapsed": elapsed, "cpu": cpu, "latencies": latencies}
    print(json.dumps(out), flush=True)


def main() -> None:
    mode = sys.argv[1]
    spec = json.loads(sys.stdin.readline())
    run = {"planfence": _planfence, "etcd": _etcd}[mode]
    anyio.run(run, spec, backend="asyncio", backend_options={"use_uvloop": True})


if __name__ == "__main__":
    main()
