"""Growth curves: how a decision's costs grow with declared keys and owners spanned, next
to etcd's Txn (concurrent executors are in `concurrency`, the owners per machine and
history curves in `growth_scale`).

    rows = keys_curve(Sizes.full(), progress=print)   # each curve on its own fresh cluster

Every curve starts its own owners on 127.0.0.1 (and etcd when `etcd.missing()` is None),
measures and stops them; each returns one dict per point, whose keys are the table's columns.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ...cluster.folder import ClusterDir
from ...cluster.pids import read_pid
from ...core.gate import Action
from ...executor.pool import SessionPool
from ...executor.replica import Replica, settle
from ...executor.runner import GateRunner
from ...net.api import get_records
from . import etcd as etcdlib
from .floor import FloorServer, connect_floor, fan_out_round_trip, floor_servers
from .latency import (
    EXECUTOR,
    OWNERS,
    Plan,
    Results,
    Settings,
    Spread,
    latency_rounds,
    loopback_cluster,
    write_plan,
)
from .load import cpu_seconds

Progress = Callable[[str], None]
Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Sizes:
    """The points of every curve and how long each is measured."""

    keys: tuple[int, ...] = (1, 8, 32, 128, 512, 1024)
    spans: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    span_keys: int = 64
    executors: tuple[int, ...] = (1, 8, 32, 64)
    machine: tuple[int, ...] = (5, 50, 200)
    history: tuple[int, ...] = (10**4, 10**5, 10**6)
    rounds: int = 3
    per_round: int = 100
    seconds: float = 5.0  # per concurrency point
    etcd: bool = True
    repeat: int = 1  # executors curve: PlanFence and etcd runs per point, alternating

    @classmethod
    def quick(cls) -> Sizes:
        """Small enough for a test: every code path, a few seconds a curve."""
        return cls(
            keys=(1, 8, 130),
            spans=(1, 3),
            span_keys=6,
            executors=(1, 4),
            machine=(3,),
            history=(300,),
            rounds=1,
            per_round=10,
            seconds=0.5,
        )


def _run(fn: Callable[..., Any], *args: Any) -> Any:
    return anyio.run(fn, *args, backend="asyncio", backend_options={"use_uvloop": True})


def _etcd_wanted(sizes: Sizes, progress: Progress) -> str | None:
    if not sizes.etcd:
        return None
    why = etcdlib.missing()
    if why is not None:
        progress(why)
        return None
    return etcdlib.etcd_binary()


def keys_curve(sizes: Sizes, progress: Progress = lambda m: None) -> list[Row]:
    """Declared keys d over 2 owners: p50/p99, bytes and client CPU per decision; etcd's gRPC
    Txn on the same keys (one Txn, limit raised; and Txns of <= 128) and its bytes per Txn."""
    binary = _etcd_wanted(sizes, progress)
    limit = max(etcdlib.DEFAULT_MAX_TXN_OPS, *sizes.keys)
    results = Results()
    settings = Settings(ds=sizes.keys, rounds=sizes.rounds, per_round=sizes.per_round)
    with (
        tempfile.TemporaryDirectory(prefix="planfence-growth-") as tmp,
        loopback_cluster(Path(tmp) / "cluster") as cdir,
        etcdlib.maybe_loopback_etcd(binary, limit) as etcd_port,
    ):
        plans = [
            _run(write_plan, cdir, f"keys{d}", _spread(cdir, OWNERS if d > 1 else OWNERS[:1], d))
            for d in sizes.keys
        ]
        progress(f"keys: {len(plans)} plans written; timing decisions and etcd Txns")
        _run(latency_rounds, cdir, plans, settings, results, None, etcd_port, progress)
        etcd_bytes = _run(_etcd_bytes, etcd_port, plans) if etcd_port is not None else {}
    rows = []
    for plan in plans:
        a, e, split = (r.get(plan.d) for r in (results.authorize, results.etcd, results.etcd_split))
        rows.append(
            {
                "d": plan.d,
                "p50_us": a.p50 if a else None,
                "p99_us": a.p99 if a else None,
                "bytes": results.bytes_per_action[plan.d],
                "client_cpu_us": results.client_cpu[plan.d],
                "etcd_p50_us": e.p50 if e else None,
                "etcd_p99_us": e.p99 if e else None,
                "etcd_split_p50_us": split.p50 if split else None,
                "etcd_bytes": etcd_bytes.get(plan.d),
            }
        )
    return rows


def _spread(cdir: ClusterDir, owners: tuple[str, ...] | list[str], d: int) -> dict[str, list[str]]:
    """d keys spread evenly over `owners` (the first owners take one more when uneven), each
    under the first pattern the owner owns (`req/*` -> `req/g-...`)."""
    roster = cdir.roster()
    keys: dict[str, list[str]] = {}
    for i in range(d):
        owner = owners[i % len(owners)]
        prefix = roster.agent(owner).owns[0].rstrip("*")
        keys.setdefault(owner, []).append(f"{prefix}g{d}-{len(owners)}-{i}")
    return keys


async def _etcd_bytes(port: int, plans: list[Plan], n: int = 20) -> dict[int, int]:
    """Bytes on the wire per gRPC Txn (both ways, HTTP/2 and gRPC framing included), through
    a counting relay, averaged over `n` Txns after a warm-up one."""
    out = {}
    async with etcdlib.ByteCounter(port) as counter:
        client = await etcdlib.GrpcEtcd.connect(counter.port)
        try:
            for plan in plans:
                revisions = {k: await client.put(k, "v1") for k in plan.keys}
                await client.txn_unchanged(revisions)
                before = counter.bytes
                for _ in range(n):
                    if not await client.txn_unchanged(revisions):
                        raise AssertionError(f"etcd Txn d={plan.d} did not succeed")
                out[plan.d] = round((counter.bytes - before) / n)
        finally:
            await client.close()
    return out


def spans_curve(sizes: Sizes, progress: Progress = lambda m: None) -> list[Row]:
    """One plan of `span_keys` keys spread evenly over 1..32 owners: latency, bytes and client
    CPU per decision, and the owners' CPU per decision (every owner process's, summed);
    etcd's gRPC Txn on the same keys, and the fan-out floor (as many bare floor servers,
    asked at once: `floor.fan_out_round_trip`), timed in the same rounds."""
    binary = _etcd_wanted(sizes, progress)
    agents = max(sizes.spans) + 1  # the executor and the owners
    rows = []
    cores = os.cpu_count() or 1
    with (
        tempfile.TemporaryDirectory(prefix="planfence-growth-") as tmp,
        loopback_cluster(Path(tmp) / "cluster", agents=agents) as cdir,
        etcdlib.maybe_loopback_etcd(
            binary, max(etcdlib.DEFAULT_MAX_TXN_OPS, sizes.span_keys)
        ) as port,
        floor_servers(max(sizes.spans)) as floor,
    ):
        owners = [a.name for a in cdir.roster().agents if a.name != EXECUTOR]
        plans = [
            _run(write_plan, cdir, f"span{k}", _spread(cdir, owners[:k], sizes.span_keys))
            for k in sizes.spans
        ]
        progress(f"spans: {agents} owners up, {len(plans)} plans written")
        floors = {p.plan: floor[:k] for k, p in zip(sizes.spans, plans, strict=True)}
        timed = _run(time_plans, cdir, plans, sizes.rounds, sizes.per_round, port, floors)
        for k, plan in zip(sizes.spans, plans, strict=True):
            t = timed[plan.plan]
            rows.append(
                {
                    "owners": k,
                    "d": plan.d,
                    "p50_us": t.spread.p50,
                    "p99_us": t.spread.p99,
                    "bytes": t.nbytes,
                    "client_cpu_us": t.client_cpu,
                    "owner_cpu_us": t.owner_cpu,
                    "etcd_p50_us": t.etcd.p50 if t.etcd else None,
                    "etcd_p99_us": t.etcd.p99 if t.etcd else None,
                    "ratio_p50": t.spread.p50 / t.etcd.p50 if t.etcd else None,
                    # the least p50 this machine allows: one decision's CPU, both sides,
                    # spread over every core
                    "cpu_over_cores_us": (t.client_cpu + t.owner_cpu) / cores,
                    "floor_p50_us": t.floor.p50 if t.floor else None,
                    "floor_cpu_us": t.floor_cpu,
                    "floor_x_etcd": t.floor.p50 / t.etcd.p50 if t.floor and t.etcd else None,
                }
            )
    return rows


@dataclass(frozen=True, slots=True)
class Timed:
    """One plan's figures from `time_plans`: its decisions' latency, bytes and client CPU
    (us) per decision, the owner processes' CPU per decision (us, all of them summed),
    and, when asked for, etcd's Txn latency and the fan-out floor's (with its CPU per
    fan-out, us: the client's and the floor servers', summed)."""

    spread: Spread
    nbytes: int
    client_cpu: float
    owner_cpu: float
    etcd: Spread | None = None
    floor: Spread | None = None
    floor_cpu: float | None = None


async def _time_plans(
    cdir: ClusterDir, plans: list[Plan], rounds: int, per_round: int
) -> dict[bytes, tuple[Spread, int, float]]:
    """`time_plans` without etcd: latency, bytes and client CPU per decision."""
    timed = await time_plans(cdir, plans, rounds, per_round)
    return {rid: (t.spread, t.nbytes, t.client_cpu) for rid, t in timed.items()}


async def time_plans(
    cdir: ClusterDir,
    plans: list[Plan],
    rounds: int,
    per_round: int,
    etcd_port: int | None = None,
    floors: dict[bytes, list[FloorServer]] | None = None,
) -> dict[bytes, Timed]:
    """Warm decisions of every plan, in rounds (a warm-up round first), each plan's followed
    by as many etcd Txns on the same keys when `etcd_port` is given, and as many fan-outs to
    the floor servers `floors` names for the plan (their ports) when given."""
    roster, identity = cdir.roster(), cdir.identity(EXECUTOR)
    replica = await Replica.open(None)
    ids = [rid for p in plans for rid in (p.plan, *p.parts, *p.facts.values())]
    await replica.add(await get_records(roster, identity, ids))
    etcd = await etcdlib.GrpcEtcd.connect(etcd_port) if etcd_port is not None else None
    revisions = (
        {p.plan: {k: await etcd.put(k, "v1") for k in p.keys} for p in plans} if etcd else {}
    )
    floor_clients = {
        rid: [await connect_floor(s.port) for s in servers]
        for rid, servers in (floors or {}).items()
    }
    owner_pids = [read_pid(cdir, a.name) for a in roster.agents]
    floor_pids = list({s.pid for servers in (floors or {}).values() for s in servers})
    samples: dict[bytes, list[float]] = {p.plan: [] for p in plans}
    txns: dict[bytes, list[float]] = {p.plan: [] for p in plans}
    fans: dict[bytes, list[float]] = {p.plan: [] for p in plans}
    cpu = {p.plan: [0.0, 0.0, 0.0] for p in plans}  # client, owners, the floor's (s)
    nbytes: dict[bytes, int] = {}
    async with anyio.create_task_group() as tg:
        pool = SessionPool(tg, roster, identity)
        runner = GateRunner(pool, replica)
        for rnd in range(rounds + 1):
            if rnd == 1:  # warm: the executor's state stays out of the collector's way
                settle()
            for plan in plans:
                action = Action(f"p{plan.d}", (plan.plan,), plan.keys)
                started_cpu, started_owners = time.process_time(), processes_cpu(owner_pids)
                for _ in range(per_round):
                    started = time.perf_counter()
                    run = await runner.wait_decision(action)
                    elapsed = time.perf_counter() - started
                    if not run.decision.authorized:
                        raise AssertionError(f"not authorized: {run.decision.explain()}")
                    if rnd:
                        samples[plan.plan].append(elapsed)
                if rnd:
                    cpu[plan.plan][0] += time.process_time() - started_cpu
                    cpu[plan.plan][1] += processes_cpu(owner_pids) - started_owners
                nbytes[plan.plan] = run.decision.bytes_sent + run.decision.bytes_received
                for _ in range(per_round if etcd is not None else 0):
                    assert etcd is not None
                    started = time.perf_counter()
                    if not await etcd.txn_unchanged(revisions[plan.plan]):
                        raise AssertionError(f"etcd Txn d={plan.d} did not succeed")
                    if rnd:
                        txns[plan.plan].append(time.perf_counter() - started)
                clients = floor_clients.get(plan.plan, [])
                started_floor = processes_cpu(floor_pids) + time.process_time()
                for _ in range(per_round if clients else 0):
                    elapsed = await fan_out_round_trip(clients)
                    if rnd:
                        fans[plan.plan].append(elapsed)
                if rnd:
                    cpu[plan.plan][2] += processes_cpu(floor_pids) + time.process_time()
                    cpu[plan.plan][2] -= started_floor
        await pool.aclose()
        tg.cancel_scope.cancel()
    if etcd is not None:
        await etcd.close()
    for client in (c for cs in floor_clients.values() for c in cs):
        if client.transport is not None:
            client.transport.close()
    n = rounds * per_round
    return {
        rid: Timed(
            Spread.of(s),
            nbytes[rid],
            cpu[rid][0] / n * 1e6,
            cpu[rid][1] / n * 1e6,
            Spread.of(txns[rid]) if txns[rid] else None,
            Spread.of(fans[rid]) if fans[rid] else None,
            cpu[rid][2] / n * 1e6 if fans[rid] else None,
        )
        for rid, s in samples.items()
    }


def processes_cpu(pids: Sequence[int | None]) -> float:
    """The CPU seconds the processes `pids` have used so far, summed (None counts nothing)."""
    return sum(cpu_seconds(pid) for pid in pids)
