"""The concurrency curve: C executors deciding one d = 8 plan over 2 owners as fast as they
can, next to C etcd gRPC clients sending the same d = 8 Txn, in each process layout.

    rows = executors_curve(Sizes(), progress=print, layouts=("4p", "8p"))

A layout says how the clients are spread over worker processes (growth_worker.py) and how
PlanFence's executors of one process reach the owners: each with a session pool of its own
(`executor`), or all through one pool (`process`: one session per owner, their requests
pipelined on it, as the executors of one real process would). etcd's clients always have one
gRPC channel each, in the same number of processes. Each point runs both sides `sizes.repeat`
times, alternating which goes first, and reports every pair's ratio of rates beside each
side's median run, and the servers' CPU per call (the owners' against etcd's).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...cluster.pids import read_pid
from . import etcd as etcdlib
from .growth import Progress, Sizes, _etcd_wanted, _run, _spread
from .latency import OWNERS, Spread, loopback_cluster, write_plan
from .load import cpu_seconds

Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Layout:
    """How C clients run: over at most `processes` worker processes, PlanFence's executors
    with a session pool each (`pool` "executor") or one per process ("process")."""

    processes: int
    pool: str

    def shares(self, c: int) -> list[int]:
        """How many of `c` clients each worker process runs."""
        procs = min(c, self.processes)
        return [c // procs + (1 if i < c % procs else 0) for i in range(procs)]


LAYOUTS = {
    "4p": Layout(4, "executor"),  # the layout of the runs of record before session 8
    "8p": Layout(8, "process"),  # 8 processes x 8 at 64, one session pool per process
    "8p-own": Layout(8, "executor"),  # 8 processes, a session pool per executor
}


def executors_curve(
    sizes: Sizes, progress: Progress = lambda m: None, layouts: tuple[str, ...] = ("4p", "8p")
) -> list[Row]:
    """One row per point of `sizes.executors` and layout (names of LAYOUTS), in that order;
    each pair's figures also go to `progress` as they are measured."""
    binary = _etcd_wanted(sizes, progress)
    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="planfence-growth-") as tmp,
        loopback_cluster(Path(tmp) / "cluster") as cdir,
        etcdlib.maybe_loopback_etcd(binary, etcdlib.DEFAULT_MAX_TXN_OPS) as etcd_port,
    ):
        plan = _run(write_plan, cdir, "conc8", _spread(cdir, OWNERS, 8))
        owner_pids = [read_pid(cdir, o) for o in OWNERS]
        spec: Row = {
            "cluster": str(cdir.root),
            "plan": plan.plan.hex(),
            "keys": plan.keys,
            "records": [r.hex() for r in (plan.plan, *plan.parts, *plan.facts.values())],
        }
        etcd_spec, etcd_pids = None, []
        if etcd_port is not None:
            etcd_spec = {"port": etcd_port, "revisions": _run(_etcd_put, etcd_port, plan.keys)}
            etcd_pids = [_pid_listening(etcd_port)]
        for c in sizes.executors:
            for name in layouts:
                layout = LAYOUTS[name]
                pfs: list[Row] = []
                etcds: list[Row] = []
                for turn in range(sizes.repeat):  # alternate which side goes first
                    order = ("planfence", "etcd") if turn % 2 == 0 else ("etcd", "planfence")
                    for side in order:
                        if side == "planfence":
                            run = {**spec, "pool": layout.pool}
                            pfs.append(_concurrent(side, run, c, layout, sizes, owner_pids))
                        elif etcd_spec is not None:
                            etcds.append(_concurrent(side, etcd_spec, c, layout, sizes, etcd_pids))
                    progress(_pair_line(c, name, pfs[-1], etcds[-1] if etcds else None, turn))
                rows.append(_executors_row(c, name, pfs, etcds))
    return rows


def _pair_line(c: int, layout: str, pf: Row, etcd: Row | None, turn: int) -> str:
    line = (
        f"executors: {c} in layout {layout}, pair {turn + 1}: {pf['per_s']:,.0f} decisions/s"
        f" (owners {pf['server_cpu_us']:.0f} us CPU a decision)"
    )
    if etcd is None:
        return line
    return (
        f"{line}, etcd {etcd['per_s']:,.0f} Txns/s ({etcd['server_cpu_us']:.0f} us a Txn):"
        f" {pf['per_s'] / etcd['per_s']:.2f} x, server CPU"
        f" {pf['server_cpu_us'] / etcd['server_cpu_us']:.2f} x"
    )


def _executors_row(c: int, layout: str, pfs: list[Row], etcds: list[Row]) -> Row:
    """The curve's row for `c` clients in `layout` from each side's runs: the median run of
    each side and every pair's ratio of rates (each pair ran back to back: the fair one)."""
    pf = _median_run(pfs)
    row: Row = {
        "executors": c,
        "layout": layout,
        "decisions_per_s": pf["per_s"],
        "p50_us": pf["p50_us"],
        "p99_us": pf["p99_us"],
        "owner_cpu": pf["server_cpu"],
        "client_cpu_us": pf["client_cpu_us"],
        "owner_cpu_us": pf["server_cpu_us"],
        "cores": pf["cores"],
        "idle": pf["idle"],
    }
    if etcds:
        e = _median_run(etcds)
        ratios = [a["per_s"] / b["per_s"] for a, b in zip(pfs, etcds, strict=True)]
        row |= {
            "etcd_txns_per_s": e["per_s"],
            "etcd_p99_us": e["p99_us"],
            "etcd_cpu": e["server_cpu"],
            "etcd_client_cpu_us": e["client_cpu_us"],
            "etcd_cpu_us": e["server_cpu_us"],
            "etcd_cores": e["cores"],
            "etcd_idle": e["idle"],
            "server_cpu_ratio": pf["server_cpu_us"] / e["server_cpu_us"],
            "ratios": " ".join(f"{r:.2f}" for r in ratios),
            "ratio_min": min(ratios),
            "ratio_median": sorted(ratios)[len(ratios) // 2],
        }
    return row


def _median_run(runs: list[Row]) -> Row:
    """The run with the median rate (the upper one of an even count): one real run's
    columns, not a mix of several."""
    return sorted(runs, key=lambda r: r["per_s"])[len(runs) // 2]


async def _etcd_put(port: int, keys: tuple[str, ...]) -> dict[str, int]:
    client = await etcdlib.GrpcEtcd.connect(port)
    try:
        return {k: await client.put(k, "v1") for k in keys}
    finally:
        await client.close()


def _pid_listening(port: int) -> int | None:
    """The pid of the etcd listening on `port` (found by its command line)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"etcd") and f":{port}".encode() in b" ".join(argv):
                return int(entry.name)
    return None


def _concurrent(
    mode: str, spec: Row, c: int, layout: Layout, sizes: Sizes, server_pids: list[int | None]
) -> Row:
    """Run `c` clients spread as `layout` says for `sizes.seconds` after all are ready;
    their throughput, latency and the servers' CPU (cores) meanwhile."""
    shares = layout.shares(c)
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "planfence_net.bench.perf.growth_worker", mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in shares
    ]
    try:
        for worker, share in zip(workers, shares, strict=True):
            assert worker.stdin is not None
            run = {**spec, "clients": share, "seconds": sizes.seconds}
            worker.stdin.write(json.dumps(run) + "\n")
            worker.stdin.flush()
        for worker in workers:  # each says "ready" once its sessions are open and warm
            assert worker.stdout is not None
            if worker.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a {mode} worker failed to start")
        pids = [p for p in server_pids if p is not None]
        before, started = sum(cpu_seconds(p) for p in pids), time.perf_counter()
        machine = machine_ticks()
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.close()
        outs = [json.loads(w.stdout.read()) for w in workers if w.stdout is not None]
        for worker in workers:
            if worker.wait(timeout=60) != 0:
                raise RuntimeError(f"a {mode} worker exited {worker.returncode}")
        elapsed = time.perf_counter() - started
        cpu = (sum(cpu_seconds(p) for p in pids) - before) / elapsed
        busy, idle = (b - a for a, b in zip(machine, machine_ticks(), strict=True))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    return _workers_row(outs, cpu, elapsed, busy, idle)


def _workers_row(outs: list[Row], cpu: float, elapsed: float, busy: int, idle: int) -> Row:
    """One run's figures from its workers' reports (`outs`), the servers' cores (`cpu`)
    over `elapsed` seconds, and the machine's busy and idle ticks meanwhile."""
    latencies = sorted(x for out in outs for x in out["latencies"])
    spread = Spread.of(latencies)
    done = sum(out["done"] for out in outs)
    window = max(out["elapsed"] for out in outs)
    return {
        "per_s": done / window,
        "p50_us": spread.p50,
        "p99_us": spread.p99,
        "server_cpu": cpu,
        # CPU per call, which a busy machine inflates less than it cuts throughput
        "client_cpu_us": sum(out["cpu"] for out in outs) / done * 1e6,
        "server_cpu_us": cpu * elapsed / done * 1e6,
        "cores": cpu + sum(out["cpu"] for out in outs) / window,
        "idle": idle / max(busy + idle, 1),
    }


def machine_ticks() -> tuple[int, int]:
    """(busy, idle) clock ticks of every CPU of the machine so far (Linux /proc/stat; idle
    counts iowait too)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]
    return sum(ticks[:8]) - idle, idle
