"""Growth curves of scale: owners per machine and an owner's history.

    rows = machine_curve(Sizes.full())   # 5, 50, 200 owners: `cluster up`, RSS, d = 8 p50
    rows = history_curve(Sizes.full())   # 10^4..10^6 records: start-up, heads, puts, bytes

Each point starts its own owners on 127.0.0.1 and stops them; each curve returns one dict
per point, whose keys are the table's columns.
"""

from __future__ import annotations

import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from ...cluster import processes as clusterlib
from ...cluster.folder import ClusterDir
from ...cluster.pids import read_pid
from ...cluster.ready import wait_cluster_ready
from ...net.api import put_records
from ...net.client import open_session
from ...owners.compact import compact
from ...owners.store import Store
from ...protocol.messages import MAX_PUT_ITEMS
from .growth import Progress, Row, Sizes, _run, _spread, _time_plans
from .latency import EXECUTOR, OWNERS, Spread, write_plan
from .load import cpu_seconds, owner_load

BUILD_BATCH = 16 * MAX_PUT_ITEMS  # items per put_records call while a history is built


def machine_curve(sizes: Sizes, progress: Progress = lambda m: None) -> list[Row]:
    """For n owners on this machine: wall time of `planfence cluster up`, idle RSS per owner
    (VmRSS from /proc once all are up; with PSS and USS, which divide or leave out the
    library pages the owners share) and a d = 8 decision's p50 over two of them."""
    planfence = str(Path(sys.executable).parent / "planfence")
    rows = []
    for n in sizes.machine:
        with tempfile.TemporaryDirectory(prefix="planfence-growth-") as tmp:
            root = Path(tmp) / "cluster"
            clusterlib.init_cluster(root, agents=n, base_port=0, name="planfence-growth")
            cdir = ClusterDir(root)
            try:
                progress(f"machine: {n} owners, cluster up")
                started = time.perf_counter()
                subprocess.run(
                    [planfence, "cluster", "up", str(root), "--timeout", str(30 + 3 * n)],
                    check=True,
                    capture_output=True,
                )
                up = time.perf_counter() - started
                pids = [read_pid(cdir, a.name) for a in cdir.roster().agents]
                rss = [_rss_kib(p) for p in pids if p is not None]
                unshared = [_unshared_kib(p) for p in pids if p is not None]
                plan = _run(write_plan, cdir, "machine8", _spread(cdir, OWNERS, 8))
                spread, _, _ = _run(_time_plans, cdir, [plan], sizes.rounds, sizes.per_round)[
                    plan.plan
                ]
            finally:
                clusterlib.stop_owners(cdir)
        rows.append(
            {
                "owners": n,
                "cluster_up_s": up,
                "idle_rss_mib": statistics.median(rss) / 1024,
                "idle_pss_mib": statistics.median(u[0] for u in unshared) / 1024,
                "idle_uss_mib": statistics.median(u[1] for u in unshared) / 1024,
                "p50_us": spread.p50,
                "p99_us": spread.p99,
            }
        )
    return rows


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _unshared_kib(pid: int) -> tuple[int, int]:
    """(PSS, USS) of `pid` in KiB, from /proc/PID/smaps_rollup: what the process costs the
    machine once the libraries' pages it shares with the other owners are divided among
    them (PSS) or left out (USS); RSS counts them whole in every owner. (0, 0) when the
    kernel has no smaps_rollup."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0, 0
    fields = {}
    for line in text.splitlines()[1:]:
        name, _, value = line.partition(":")
        fields[name] = int(value.split()[0]) if value.split() else 0
    return fields.get("Pss", 0), fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)


def history_curve(sizes: Sizes, progress: Progress = lambda m: None) -> list[Row]:
    """One owner holding N records over max(N / 10, ...) keys, written through its daemon
    with put_many (the build's time and records/s): the owner's start-up (`cluster
    up` of that owner, which opens the store and checks the heads), `Store.open` alone, heads
    p50 (one random key a request: the first requests after start-up, then as many more),
    heads/s and durable puts/s from 16 sessions, bytes on disk per
    record; then `owner compact --keep 1` and the owner's start-up again."""
    rows = []
    for n in sizes.history:
        keys = max(1, min(10**5, n // 10))
        with tempfile.TemporaryDirectory(prefix="planfence-growth-") as tmp:
            root = Path(tmp) / "cluster"
            clusterlib.init_cluster(root, agents=2, base_port=0, name="planfence-growth")
            cdir = ClusterDir(root)
            owner = cdir.roster().agents[1].name  # `reqs`, owning req/*
            progress(f"history: building {n:,} records over {keys:,} keys")
            built = time.perf_counter()
            owner_cpu, client_cpu = _build(cdir, owner, n, keys)
            built = time.perf_counter() - built
            progress(f"  built through put_many in {built:.0f} s")
            db = cdir.db(owner)
            on_disk = sum(f.stat().st_size for f in db.parent.glob(db.name + "*"))
            opens = [_run(_time_open, db) for _ in range(3)]
            try:
                started = time.perf_counter()
                names = clusterlib.start_owners(cdir)
                anyio.run(wait_cluster_ready, cdir, names, 120.0, backend="asyncio")
                up = time.perf_counter() - started
                pid = read_pid(cdir, owner)
                up_cpu = cpu_seconds(pid)  # what a busy machine stretches less than the wall
                memory = (_rss_kib(pid), *_unshared_kib(pid)) if pid is not None else (0, 0, 0)
                cold = _run(_heads_p50, cdir, owner, keys, sizes.per_round * 5)
                heads = _run(_heads_p50, cdir, owner, keys, sizes.per_round * 5)
                load = _run(
                    owner_load, cdir, owner, EXECUTOR, "req/h0", 16, 8, sizes.seconds / 2, 8
                )
            finally:
                clusterlib.stop_owners(cdir)
            done = compact(cdir, owner, keep=1)
            started = time.perf_counter()
            try:
                names = clusterlib.start_owners(cdir, [owner])
                anyio.run(wait_cluster_ready, cdir, names, 120.0, backend="asyncio")
                compacted_up = time.perf_counter() - started
            finally:
                clusterlib.stop_owners(cdir)
        rows.append(
            {
                "records": n,
                "keys": keys,
                "build_s": built,
                "built_puts_per_s": n / built,
                "build_owner_cpu_us": owner_cpu / n * 1e6,
                "build_client_cpu_us": client_cpu / n * 1e6,
                "owner_up_s": up,
                "owner_up_cpu_s": up_cpu,
                "store_open_s": statistics.median(t for t, _ in opens),
                "store_open_cpu_s": statistics.median(c for _, c in opens),
                "idle_rss_mib": memory[0] / 1024,
                "idle_pss_mib": memory[1] / 1024,
                "heads_first_p50_us": cold.p50,
                "heads_p50_us": heads.p50,
                "heads_p99_us": heads.p99,
                "heads_per_s": load.heads_per_s,
                # owner CPU per heads request: one in flight a session, then 8 in one write
                "heads_owner_us": load.heads_cpu / load.heads_per_s * 1e6,
                "heads_8_per_s": load.heads_pipelined_per_s,
                "heads_8_owner_us": load.heads_pipelined_cpu / load.heads_pipelined_per_s * 1e6,
                "puts_per_s": load.puts_per_s,
                "bytes_per_record": on_disk / n,
                "compacted_to": done.records_after,
                "owner_up_compacted_s": compacted_up,
            }
        )
    return rows


def _build(cdir: ClusterDir, owner: str, n: int, keys: int) -> tuple[float, float]:
    """n records of `owner` through its daemon, key `req/h{i % keys}`, no parents (a new
    version of a fact does not name the old one: a plan walking both would be ambiguous):
    `put_records` sends them (two writers at once) as put_many requests of MAX_PUT_ITEMS, each signed by the
    owner and committed in one transaction, durable before the next is sent. Returns the
    CPU seconds the owner and this client spent (figures a loaded machine changes less
    than the wall time)."""
    try:
        names = clusterlib.start_owners(cdir, [owner])
        anyio.run(wait_cluster_ready, cdir, names, 120.0, backend="asyncio")
        pid = read_pid(cdir, owner)
        owner_cpu, client_cpu = cpu_seconds(pid), time.process_time()
        for at in range(0, n, BUILD_BATCH):
            items = [
                {"key": f"req/h{i % keys}", "body": {"i": i}}
                for i in range(at, min(n, at + BUILD_BATCH))
            ]
            anyio.run(_put, cdir, owner, items, backend="asyncio")
        return cpu_seconds(pid) - owner_cpu, time.process_time() - client_cpu
    finally:
        clusterlib.stop_owners(cdir)


async def _put(cdir: ClusterDir, owner: str, items: list[dict[str, Any]]) -> None:
    """`items` through two `put_records` writers at once, each on its own session, halves
    of `items`: while the owner signs and commits one's request, the other's is on its
    way (one writer leaves the owner idle while it encodes the next request)."""
    roster, identity = cdir.roster(), cdir.identity(owner)
    half = len(items) // 2
    written: list[int] = []

    async def write(part: list[dict[str, Any]]) -> None:
        written.append(len(await put_records(roster, identity, part)))

    async with anyio.create_task_group() as tg:
        for part in (items[:half], items[half:]):
            tg.start_soon(write, part)
    if sum(written) != len(items):
        raise AssertionError(f"{sum(written)} of {len(items)} records written")


async def _time_open(db: Path) -> tuple[float, float]:
    """`Store.open`'s wall and CPU seconds (this process's threads: its SQLite thread too)."""
    started, cpu = time.perf_counter(), time.process_time()
    store = await Store.open(db)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    await store.close()
    return elapsed, cpu


async def _heads_p50(cdir: ClusterDir, owner: str, keys: int, n: int) -> Spread:
    rng = random.Random(7)
    times = []
    async with open_session(cdir.roster(), cdir.identity(EXECUTOR), owner) as session:
        for _ in range(n):
            key = f"req/h{rng.randrange(keys)}"
            started = time.perf_counter()
            answer: Any = await session.request("heads", {"keys": [key]})
            times.append(time.perf_counter() - started)
            if answer["heads"][0][0] != key:
                raise AssertionError(f"heads of {key} answered {answer}")
    return Spread.of(times)
