"""The latency benchmark: warm authorize against etcd's Txn, owner throughput, CLI start-up.

    results = measure(Settings())      # starts its own owners (and etcd), stops them

Warm authorize is the steady state of an executor: sessions open, the plan's lineage already
in the replica, so one decision is one heads round per owner. For each d the benchmark times
`GateRunner.wait_decision` end to end, in rounds interleaved with the same number of etcd Txns
(comparing mod_revision of the same d keys, through etcd's gRPC API; for d above etcd's default
--max-txn-ops also as the several Txns a client under the default limit needs; and, labelled,
through etcd's JSON gateway) and raw-socket floor round trips, so machine noise falls on all
alike. Then one owner's heads/s from 16 sessions and its acknowledged
durable puts/s, and the wall time of one-shot `planfence` processes next to the interpreter's
own start-up.
"""

from __future__ import annotations

import functools
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from ...cluster import processes as clusterlib
from ...cluster.folder import ClusterDir
from ...cluster.ready import wait_cluster_ready
from ...core.gate import Action
from ...core.records import MAX_PARENTS
from ...core.roster import Roster
from ...executor.pool import SessionPool
from ...executor.replica import Replica, settle
from ...executor.runner import GateRunner
from ...net.api import get_records
from ...net.client import open_session
from . import etcd as etcdlib
from .floor import FloorClient, connect_floor, floor_servers
from .load import owner_load

OWNERS = ("reqs", "inventory")  # the d keys are split evenly over these two
EXECUTOR = "planner"  # writes the plans and runs the gate
PREFIX = {"reqs": "req", "inventory": "inv"}


@dataclass(frozen=True, slots=True)
class Settings:
    ds: tuple[int, ...] = (1, 8, 128, 512)
    rounds: int = 5
    per_round: int = 200
    throughput_seconds: float = 3.0
    sessions: int = 16
    put_in_flight: int = 8  # concurrent puts per session
    cli_runs: int = 7
    etcd: bool = True
    gateway: bool = True  # also etcd's JSON gateway, labelled as such


@dataclass(frozen=True, slots=True)
class Spread:
    """Latency figures in microseconds."""

    p50: float
    p99: float
    n: int

    @classmethod
    def of(cls, seconds: list[float]) -> Spread:
        ordered = sorted(seconds)
        return cls(_rank(ordered, 0.50) * 1e6, _rank(ordered, 0.99) * 1e6, len(ordered))


def _rank(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Results:
    authorize: dict[int, Spread] = field(default_factory=dict)
    bytes_per_action: dict[int, int] = field(default_factory=dict)
    etcd: dict[int, Spread] = field(default_factory=dict)  # gRPC, one Txn (limit raised)
    etcd_split: dict[int, Spread] = field(default_factory=dict)  # gRPC, Txns of <= 128
    gateway: dict[int, Spread] = field(default_factory=dict)  # JSON gateway, one Txn
    etcd_max_txn_ops: int = etcdlib.DEFAULT_MAX_TXN_OPS
    etcd_skipped: str | None = None
    floor: Spread | None = None
    heads_per_s: float = 0.0
    heads_owner_cpu: float = 0.0
    puts_per_s: float = 0.0
    puts_owner_cpu: float = 0.0
    puts_per_commit: float = 0.0
    cli: dict[str, Spread] = field(default_factory=dict)
    cli_cpu: dict[str, float] = field(default_factory=dict)  # median ms, user + system
    client_cpu: dict[int, float] = field(default_factory=dict)  # us per decision
    etcd_client_cpu: dict[int, float] = field(default_factory=dict)  # us per gRPC Txn (aetcd)
    etcd_version: str | None = None


def keys_for(d: int) -> dict[str, list[str]]:
    """The d declared keys, split over the owners (d = 1: one owner)."""
    owners = OWNERS[:1] if d == 1 else OWNERS
    return {o: [f"{PREFIX[o]}/lat{d}-{i}" for i in range(d // len(owners))] for o in owners}


def measure(settings: Settings, progress: Callable[[str], None] = lambda m: None) -> Results:
    """Run every measurement on a fresh loopback cluster (and etcd when wanted and on PATH)."""
    results = Results()
    binary = None
    if settings.etcd:
        results.etcd_skipped = etcdlib.missing()
        binary = etcdlib.etcd_binary() if results.etcd_skipped is None else None
        if results.etcd_skipped:
            progress(results.etcd_skipped)
    results.etcd_max_txn_ops = max(etcdlib.DEFAULT_MAX_TXN_OPS, *settings.ds)
    with (
        tempfile.TemporaryDirectory(prefix="planfence-latency-") as tmp,
        loopback_cluster(Path(tmp) / "cluster") as cdir,
        _floor_server() as floor_port,
        etcdlib.maybe_loopback_etcd(binary, results.etcd_max_txn_ops) as etcd_port,
    ):
        if binary is not None:
            results.etcd_version = _etcd_version(binary)
        progress("writing facts and plans")
        plans = _run(_write_plans, cdir, settings.ds)
        progress("warm authorize, etcd Txn and the raw-socket floor, interleaved")
        _run(latency_rounds, cdir, plans, settings, results, floor_port, etcd_port, progress)
        progress(f"owner throughput: heads and durable puts from {settings.sessions} sessions")
        load = _run(
            owner_load,
            cdir,
            OWNERS[0],
            EXECUTOR,
            keys_for(1)[OWNERS[0]][0],
            settings.sessions,
            settings.put_in_flight,
            settings.throughput_seconds,
        )
        results.heads_per_s, results.heads_owner_cpu = load.heads_per_s, load.heads_cpu
        results.puts_per_s, results.puts_owner_cpu = load.puts_per_s, load.puts_cpu
        results.puts_per_commit = load.puts_per_commit
        progress("one-shot CLI processes")
        _cli_times(cdir, plans, settings, results)
    return results


def _run(fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    return anyio.run(
        functools.partial(fn, *args), backend="asyncio", backend_options={"use_uvloop": True}
    )


@contextmanager
def loopback_cluster(root: Path, agents: int = 3) -> Iterator[ClusterDir]:
    """A new cluster of `agents` owners on free loopback ports, up until the block ends."""
    clusterlib.init_cluster(root, agents=agents, base_port=0, name="planfence-latency")
    cdir = ClusterDir(root)
    try:
        started = clusterlib.start_owners(cdir)
        anyio.run(wait_cluster_ready, cdir, started, backend="asyncio")
        yield cdir
    finally:
        clusterlib.stop_owners(cdir)


@contextmanager
def _floor_server() -> Iterator[int]:
    with floor_servers(1) as servers:
        yield servers[0].port


def _etcd_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    return out.split("\n")[0].removeprefix("etcd Version: ").strip()


@dataclass(frozen=True, slots=True)
class Plan:
    d: int
    plan: bytes
    keys: tuple[str, ...]
    facts: dict[str, bytes]
    parts: tuple[bytes, ...] = ()  # records gathering the facts when they exceed 256


async def _write_plans(cdir: ClusterDir, ds: tuple[int, ...]) -> list[Plan]:
    return [await write_plan(cdir, f"lat{d}", keys_for(d)) for d in ds]


async def write_plan(cdir: ClusterDir, name: str, keys: dict[str, list[str]]) -> Plan:
    """One fact per key at its owner, then `plan/NAME` on all of them by the executor (its
    parents gathered through part records when there are more than 256)."""
    roster = cdir.roster()
    facts: dict[str, bytes] = {}
    for owner, owned in keys.items():
        facts.update(await _put_all(roster, cdir, owner, [(k, [], {"v": 1}) for k in owned]))
    plan_key = f"plan/{name}"
    parents, parts = list(facts.values()), []
    if len(parents) > MAX_PARENTS:
        chunks = [parents[at : at + MAX_PARENTS] for at in range(0, len(parents), MAX_PARENTS)]
        items = [(f"{plan_key}-part{i}", c, {"part": i}) for i, c in enumerate(chunks)]
        parents = parts = list((await _put_all(roster, cdir, EXECUTOR, items)).values())
    ids = await _put_all(
        roster, cdir, EXECUTOR, [(plan_key, parents, {"steps": ["act"]})], kind="plan"
    )
    return Plan(len(facts), ids[plan_key], tuple(facts), facts, tuple(parts))


async def _put_all(
    roster: Roster,
    cdir: ClusterDir,
    owner: str,
    items: list[tuple[str, list[bytes], Any]],
    kind: str = "fact",
) -> dict[str, bytes]:
    ids = {}
    async with open_session(roster, cdir.identity(owner), owner) as session:
        for key, parents, body in items:
            result = await session.request(
                "put", {"key": key, "kind": kind, "parents": parents, "body": body}
            )
            ids[key] = result["id"]
    return ids


async def latency_rounds(
    cdir: ClusterDir,
    plans: list[Plan],
    settings: Settings,
    results: Results,
    floor_port: int | None,
    etcd_port: int | None,
    progress: Callable[[str], None],
) -> None:
    """Time warm decisions of every plan in rounds, interleaved with etcd's Txns on the same
    keys (when `etcd_port`) and floor round trips (when `floor_port`); fills `results`."""
    roster = cdir.roster()
    identity = cdir.identity(EXECUTOR)
    all_ids = [rid for p in plans for rid in (p.plan, *p.parts, *p.facts.values())]
    replica = await Replica.open(None)
    await replica.add(await get_records(roster, identity, all_ids))
    floor = await connect_floor(floor_port) if floor_port is not None else None
    etcd = await etcdlib.GrpcEtcd.connect(etcd_port) if etcd_port is not None else None
    gateway = (
        await etcdlib.EtcdClient.connect(etcd_port)
        if etcd_port is not None and settings.gateway
        else None
    )
    revisions = (
        {p.d: {k: await etcd.put(k, "v1") for k in p.keys} for p in plans}
        if etcd is not None
        else {}
    )
    limit = etcdlib.DEFAULT_MAX_TXN_OPS
    etcd_kinds = txn_kinds(etcd, gateway, revisions, limit)
    samples: dict[str, dict[int, list[float]]] = {
        kind: {} for kind in ("pf", "etcd", "etcd_split", "gateway")
    }
    floor_samples: list[float] = []
    async with anyio.create_task_group() as tg:
        pool = SessionPool(tg, roster, identity)
        runner = GateRunner(pool, replica)
        for rnd in range(settings.rounds + 1):  # round 0 warms up and is not kept
            keep = rnd > 0
            for plan in plans:
                await time_decisions(runner, plan, settings, results, samples["pf"], keep)
                for kind, txn in etcd_kinds:
                    if kind == "etcd_split" and plan.d <= limit:
                        continue  # one Txn under the default limit: the same as "etcd"
                    await time_txns(kind, txn, plan.d, settings, results, samples[kind], keep)
            for _ in range(settings.per_round if floor is not None else 0):
                assert floor is not None
                elapsed = await floor.wait_round_trip()
                if keep:
                    floor_samples.append(elapsed)
            progress(f"  round {rnd}/{settings.rounds} done")
            if rnd == 0:  # warm: the executor's state stays out of the collector's way
                settle()
        await pool.aclose()
        tg.cancel_scope.cancel()
    await close_clients(etcd, gateway, floor)
    results.authorize = {d: Spread.of(v) for d, v in samples["pf"].items()}
    results.etcd = {d: Spread.of(v) for d, v in samples["etcd"].items()}
    results.etcd_split = {d: Spread.of(v) for d, v in samples["etcd_split"].items()}
    results.gateway = {d: Spread.of(v) for d, v in samples["gateway"].items()}
    results.floor = Spread.of(floor_samples) if floor_samples else None


async def close_clients(
    etcd: etcdlib.GrpcEtcd | None, gateway: etcdlib.EtcdClient | None, floor: FloorClient | None
) -> None:
    """Close whichever of the benchmark's etcd, gateway and floor clients were opened."""
    if etcd is not None:
        await etcd.close()
    if gateway is not None:
        gateway.close()
    if floor is not None and floor.transport is not None:
        floor.transport.close()


def txn_kinds(
    etcd: etcdlib.GrpcEtcd | None,
    gateway: etcdlib.EtcdClient | None,
    revisions: dict[int, dict[str, int]],
    limit: int,
) -> list[tuple[str, Callable[[int], Awaitable[bool]]]]:
    """The etcd Txns timed next to each decision, by kind, each a function of d: one gRPC
    Txn ("etcd"), gRPC Txns of at most `limit` ops ("etcd_split"), one JSON-gateway Txn
    ("gateway"); only those whose client is given."""
    kinds: list[tuple[str, Callable[[int], Awaitable[bool]]]] = []
    if etcd is not None:
        grpc = etcd
        kinds.append(("etcd", lambda d: grpc.txn_unchanged(revisions[d])))
        kinds.append(("etcd_split", lambda d: grpc.txn_unchanged(revisions[d], limit)))
    if gateway is not None:
        gw = gateway
        kinds.append(("gateway", lambda d: gw.txn_unchanged(revisions[d])))
    return kinds


async def time_decisions(
    runner: GateRunner,
    plan: Plan,
    settings: Settings,
    results: Results,
    samples: dict[int, list[float]],
    keep: bool,
) -> None:
    """`settings.per_round` warm decisions of `plan`, each timed into `samples[plan.d]` when
    `keep` (not in the warm-up round); the client's CPU per decision and the bytes of the
    last go into `results`. Raises AssertionError when a decision does not authorize."""
    action = Action(f"lat{plan.d}", (plan.plan,), plan.keys)
    pf = samples.setdefault(plan.d, [])
    cpu = time.process_time()
    for _ in range(settings.per_round):
        started = time.perf_counter()
        run = await runner.wait_decision(action)
        elapsed = time.perf_counter() - started
        if not run.decision.authorized:
            raise AssertionError(
                f"warm authorize d={plan.d} did not authorize: {run.decision.explain()}"
            )
        if keep:
            pf.append(elapsed)
    results.client_cpu[plan.d] = (time.process_time() - cpu) / settings.per_round * 1e6
    results.bytes_per_action[plan.d] = run.decision.bytes_sent + run.decision.bytes_received


async def time_txns(
    kind: str,
    txn: Callable[[int], Awaitable[bool]],
    d: int,
    settings: Settings,
    results: Results,
    samples: dict[int, list[float]],
    keep: bool,
) -> None:
    """`settings.per_round` etcd Txns of `kind` on `d` keys, each timed into `samples[d]`
    when `keep`; for plain "etcd", the client's CPU per Txn goes into `results`. Raises
    AssertionError when a Txn does not succeed."""
    etcd_times = samples.setdefault(d, [])
    cpu = time.process_time()
    for _ in range(settings.per_round):
        started = time.perf_counter()
        ok = await txn(d)
        elapsed = time.perf_counter() - started
        if not ok:
            raise AssertionError(f"etcd {kind} Txn d={d} did not succeed")
        if keep:
            etcd_times.append(elapsed)
    if kind == "etcd":
        used = time.process_time() - cpu
        results.etcd_client_cpu[d] = used / settings.per_round * 1e6


def _cli_times(cdir: ClusterDir, plans: list[Plan], settings: Settings, results: Results) -> None:
    """Wall time of fresh processes: the bare interpreter, `planfence --help`, and
    `planfence authorize` for the d = 8 plan (cold: it fetches the lineage first)."""
    python = sys.executable
    planfence = str(Path(python).parent / "planfence")
    plan = next((p for p in plans if p.d == 8), plans[0])
    authorize = [
        planfence,
        "authorize",
        str(cdir.root),
        "--root",
        plan.plan.hex(),
        *[a for k in plan.keys for a in ("--dep", k)],
        "--as",
        EXECUTOR,
    ]
    commands = {
        "python -c pass": [python, "-c", "pass"],
        "planfence --help": [planfence, "--help"],
        f"planfence authorize (d={plan.d})": authorize,
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(settings.cli_runs):  # interleaved: a change of load hits every command
        for name, argv in commands.items():
            before = _children_cpu()
            started = time.perf_counter()
            proc = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL)
            times[name].append(time.perf_counter() - started)
            cpu[name].append(_children_cpu() - before)
            if proc.returncode != 0:
                raise AssertionError(f"{name} exited {proc.returncode}: {proc.stderr[-300:]!r}")
    for name in commands:
        results.cli[name] = Spread.of(times[name])
        results.cli_cpu[name] = sorted(cpu[name])[len(cpu[name]) // 2] * 1000


def _children_cpu() -> float:
    """CPU seconds (user + system) of the children waited for so far: unlike wall time,
    hardly moved by other processes on a busy machine."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
