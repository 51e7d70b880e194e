"""The churn benchmark: many executors deciding one plan while its owner changes one of the
declared keys every `every` seconds; every authorized decision is judged against the truth.

    rows = churn_curve(ChurnSettings(), progress=print)   # its own owners, stopped after

Executors run as tasks of worker processes (`churn_worker`), each executor with its own
sessions. The phases alternate: `quiet` (nobody writes), `churn` (the owner of the first
declared key writes a new version every `every` seconds; the executors of a process share
one replica) and `churn-own` (the same churn, each executor with a replica of its own, so each
fetches every new plan itself: what an executor per process does). After each new version the
planner writes the new plan derived from it (`plan/churn`); a drifted decision replans onto
that plan (each process learns it once, from a subscription) and is checked again.

The truth is the owner's sequence of versions of the churned key, timed by the writer: a
version is the head from some moment between its put being sent and acknowledged until some
moment between the next put being sent and acknowledged. An authorized decision whose
frontier names a version that cannot have been the head at any moment of the decision, or any
other key at a version nobody wrote, is a wrong decision.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import anyio

from ...cluster.folder import ClusterDir
from ...cluster.pids import read_pid
from ...net.client import Session, open_session
from .churn_worker import PLAN_KEY
from .latency import EXECUTOR, OWNERS, Plan, Spread, loopback_cluster, write_plan
from .load import cpu_seconds

Row = dict[str, Any]
# a version of the churned key: (id, put sent, put acknowledged), monotonic seconds
Version = tuple[bytes, float, float]


@dataclass(frozen=True, slots=True)
class ChurnSettings:
    """The layout and the phases of one churn run."""

    processes: int = 8
    per_process: int = 8
    d: int = 8
    every: float = 0.2  # seconds between two versions of the churned key
    seconds: float = 5.0  # per phase
    phases: tuple[str, ...] = ("quiet", "churn", "churn-own", "quiet", "churn", "churn-own")

    @classmethod
    def quick(cls) -> ChurnSettings:
        """Small enough for a test: every phase, a few seconds."""
        return cls(processes=2, per_process=2, d=4, every=0.1, seconds=1.0)


def churn_curve(settings: ChurnSettings, progress: Any = lambda m: None) -> list[Row]:
    """Run the phases on a fresh loopback cluster; one row per phase (module docstring)."""
    with (
        tempfile.TemporaryDirectory(prefix="planfence-churn-") as tmp,
        loopback_cluster(Path(tmp) / "cluster") as cdir,
    ):
        keys = _keys(cdir, settings.d)
        plan = anyio.run(write_plan, cdir, "churn", keys, backend="asyncio")
        progress(f"churn: plan of d = {plan.d} written; starting {settings.processes} workers")
        return anyio.run(_phases, cdir, plan, settings, progress, backend="asyncio")


def _keys(cdir: ClusterDir, d: int) -> dict[str, list[str]]:
    roster = cdir.roster()
    keys: dict[str, list[str]] = {}
    for i in range(d):
        owner = OWNERS[i % len(OWNERS)]
        keys.setdefault(owner, []).append(roster.agent(owner).owns[0].rstrip("*") + f"churn-{i}")
    return keys


async def _phases(
    cdir: ClusterDir, plan: Plan, settings: ChurnSettings, progress: Any
) -> list[Row]:
    churned = plan.keys[0]
    spec = {
        "cluster": str(cdir.root),
        "plan": plan.plan.hex(),
        "keys": list(plan.keys),
        "facts": {key: rid.hex() for key, rid in plan.facts.items()},
        "records": [r.hex() for r in (plan.plan, *plan.parts, *plan.facts.values())],
        "churned": churned,
        "clients": settings.per_process,
    }
    # the planner's session is opened first and kept: its owner keeps at most 64 sessions of
    # one roster member, and the 64 executors (which run as the planner) may take the rest
    async with open_session(cdir.roster(), cdir.identity(EXECUTOR), EXECUTOR) as planner:
        await planner.request("ping")  # a session silent past its first 5 s is closed
        return await _run_phases(cdir, plan, settings, spec, planner, progress)


async def _run_phases(
    cdir: ClusterDir,
    plan: Plan,
    settings: ChurnSettings,
    spec: dict[str, Any],
    planner: Session,
    progress: Any,
) -> list[Row]:
    churned = plan.keys[0]
    workers = [_worker(spec) for _ in range(settings.processes)]
    versions: list[Version] = [(plan.facts[churned], -math.inf, -math.inf)]
    rows = []
    try:
        for worker in workers:
            if await _line(worker.stdout) != "ready":
                raise RuntimeError("a churn worker failed to start")
        for phase in settings.phases:
            progress(f"churn: phase {phase} ({settings.seconds:g} s)")
            mode = "own" if phase.endswith("-own") else "share"
            written = len(versions)
            owners_cpu = _owners_cpu(cdir)
            stop = anyio.Event()
            async with anyio.create_task_group() as tg:
                if phase != "quiet":
                    tg.start_soon(_churn, cdir, plan, planner, settings.every, versions, stop)
                outs = await _go(workers, settings.seconds, mode)
                stop.set()  # a put under way is finished and recorded: it is the truth
            row = _row(phase, outs, versions, len(versions) - written, settings)
            row["owner_cpu_us"] = (_owners_cpu(cdir) - owners_cpu) / max(row["decisions"], 1) * 1e6
            rows.append(row)
    finally:
        for worker in workers:
            if worker.stdin is not None:
                worker.stdin.close()
        for worker in workers:
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
            if worker.stdout is not None:
                worker.stdout.close()
    return rows


def _owners_cpu(cdir: ClusterDir) -> float:
    """CPU seconds every owner of the cluster has used so far (Linux /proc)."""
    pids = [read_pid(cdir, agent.name) for agent in cdir.roster().agents]
    return sum(cpu_seconds(pid) for pid in pids if pid is not None)


def _worker(spec: dict[str, Any]) -> subprocess.Popen[str]:
    worker = subprocess.Popen(
        [sys.executable, "-m", "planfence_net.bench.perf.churn_worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdin is not None
    worker.stdin.write(json.dumps(spec) + "\n")
    worker.stdin.flush()
    return worker


async def _line(stream: IO[str] | None) -> str:
    assert stream is not None
    return (await anyio.to_thread.run_sync(stream.readline)).strip()


async def _go(workers: list[subprocess.Popen[str]], seconds: float, mode: str) -> list[Row]:
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write(f"go {seconds} {mode}\n")
        worker.stdin.flush()
    outs = []
    for worker in workers:
        line = await _line(worker.stdout)
        if not line:
            raise RuntimeError(f"a churn worker exited {worker.wait()}")
        outs.append(json.loads(line))
    return outs


async def _churn(
    cdir: ClusterDir,
    plan: Plan,
    planner: Session,
    every: float,
    versions: list[Version],
    stop: anyio.Event,
) -> None:
    """Every `every` seconds until `stop`: a new version of the plan's first key, written as
    its owner and timed, then the planner's new plan (`plan/churn`) derived from it and the
    other facts, as a planner that replans on each change would."""
    roster, key = cdir.roster(), plan.keys[0]
    owner = roster.owner_of(key)
    assert owner is not None
    async with open_session(roster, cdir.identity(owner), owner) as writer:
        tick = time.monotonic()
        while not stop.is_set():
            sent = time.monotonic()
            args = {"key": key, "kind": "fact", "parents": [], "body": {"at": sent}}
            fact = (await writer.request("put", args))["id"]
            versions.append((fact, sent, time.monotonic()))
            parents = [fact, *(plan.facts[k] for k in plan.keys[1:])]
            args = {"key": PLAN_KEY, "kind": "plan", "parents": parents, "body": {}}
            await planner.request("put", args)
            tick += every
            with anyio.move_on_after(max(0.0, tick - time.monotonic())):
                await stop.wait()


def wrong_decisions(decisions: list[list[Any]], versions: list[Version]) -> int:
    """Authorized decisions the truth refutes (module docstring): each decision is [start,
    end, outcome, reason, replanned, churned frontier id hex, others unchanged]."""
    index = {rid.hex(): i for i, (rid, _, _) in enumerate(versions)}
    wrong = 0
    for start, end, outcome, _, _, frontier, others_ok, *_ in decisions:
        if outcome != "authorized":
            continue
        i = index.get(frontier)
        if i is None or not others_ok:
            wrong += 1
            continue
        became = versions[i][1]  # the head from some moment after its put was sent ...
        ended = versions[i + 1][2] if i + 1 < len(versions) else math.inf  # ... until the next ack
        if end < became or start > ended:
            wrong += 1
    return wrong


def _row(
    phase: str, outs: list[Row], versions: list[Version], changes: int, settings: ChurnSettings
) -> Row:
    decisions = [d for out in outs for d in out["decisions"]]
    window = settings.seconds
    latencies = Spread.of([end - start for start, end, *_ in decisions] or [0.0])
    stalls = Spread.of([d[1] - d[0] - d[7] for d in decisions] or [0.0])
    planning = Spread.of([d[7] for d in decisions if d[4]] or [0.0])
    reasons = Counter(d[3] for d in decisions if d[2] != "authorized")
    return {
        "phase": phase,
        "executors": settings.processes * settings.per_process,
        "changes": changes,
        "decisions": len(decisions),
        "decisions_per_s": len(decisions) / window,
        "authorized_per_s": sum(d[2] == "authorized" for d in decisions) / window,
        "p50_us": latencies.p50,
        "p99_us": latencies.p99,
        "stall_p50_us": stalls.p50,
        "stall_p99_us": stalls.p99,
        "planning_p50_us": planning.p50,
        "replanned": sum(bool(d[4]) for d in decisions),
        "blocked": dict(reasons),
        "wrong": wrong_decisions(decisions, versions),
        "fetched_ids": sum(out["flown"] for out in outs),
        "joined_ids": sum(out["joined"] for out in outs),
        "connects": sum(out["connects"] for out in outs),  # sessions opened in the phase
        "client_cpu_us": sum(out["cpu"] for out in outs) / max(len(decisions), 1) * 1e6,
    }
