"""One partition run: owners and executors in their own network namespaces, links cut and
healed mid-run, the history checked (netns.py, workload.py, checker.py).

The cluster's five owners each serve in their own namespace, the workload (writers and
executors) runs in the hub namespace. The schedule (`SCHEDULE`, seconds after the workload
is ready): inventory isolated; the executors split from half the data owners (reqs and
inventory); a flapping link (ops, down and up every `FLAP` seconds). Each cut and heal is
timed with time.time() and handed to the checker with the workload's history, the owners'
logs and their stores (read after they stopped).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ...cluster.folder import ClusterDir
from ...cluster.processes import init_cluster
from ...owners.reader import StoreReader
from .checker import Verdict, Window, check, read_jsonl
from .netns import Topology, available
from .workload import KEYS

OWNERS = ("planner", "reqs", "inventory", "ops", "audit")
PORT = 7400
DEADLINE = 1.5  # the gate's deadline per step
FLAP = 0.3
SCHEDULE = (  # (start, end, owners cut) in seconds after the workload is ready
    (2.0, 5.0, ("inventory",)),
    (12.0, 15.0, ("reqs", "inventory")),
)
FLAPPING = ("ops", 22.0, 25.0)
TAIL = 8.0  # seconds of workload after the last heal
STOP_TIMEOUT = 15.0


@dataclass
class PartitionResult:
    verdict: Verdict
    windows: list[Window]
    prefix: str  # of every namespace and veth name of the run
    leftovers: list[str]  # cleanup errors


def prepare(root: Path, topology: Topology) -> ClusterDir:
    """A cluster folder whose roster puts each owner at its namespace's address."""
    init_cluster(root, agents=len(OWNERS), base_port=0)
    cdir = ClusterDir(root)
    text = cdir.roster_path.read_text()
    for name in OWNERS:
        text = re.sub(
            rf'(name = "{name}"\naddress = )"[^"]*"',
            rf'\1"{topology.address[name]}:{PORT}"',
            text,
        )
    cdir.roster_path.write_text(text)
    return cdir


def run(workdir: Path) -> PartitionResult:
    """The whole run; raises RuntimeError when the namespaces or processes cannot be set up
    (everything made is removed either way)."""
    reason = available()
    if reason is not None:
        raise RuntimeError(reason)
    topology = Topology(OWNERS)
    procs: list[subprocess.Popen[str]] = []
    windows: list[Window] = []
    history = workdir / "history.jsonl"
    cdir = prepare(workdir / "cluster", topology)
    try:
        topology.create()
        for name in OWNERS:
            procs.append(_start_owner(topology, cdir, name))
        seconds = FLAPPING[2] + TAIL
        workload = _spawn(
            topology.command(
                "hub",
                [
                    sys.executable,
                    "-m",
                    "planfence_net.bench.partition.workload",
                    str(cdir.root),
                    str(history),
                    str(seconds),
                    str(DEADLINE),
                ],
            )
        )
        procs.append(workload)
        ready = workload.stdout.readline() if workload.stdout else ""
        if ready.strip() != "ready":
            raise RuntimeError(f"the workload did not start: {ready.strip()} {_err(workload)}")
        windows = _inject(topology, time.time())
        workload.wait(timeout=seconds + STOP_TIMEOUT)
        if workload.returncode != 0:
            raise RuntimeError(f"the workload failed: {_err(workload)}")
    finally:
        for proc in procs:
            stop_process(proc)
        leftovers = topology.close()
    verdict = check(
        read_jsonl(history),
        {name: read_jsonl(cdir.log(name)) for name in OWNERS},
        {name: _store(cdir, name) for name in OWNERS},
        windows,
        {key: owner for owner, key in KEYS.items()},
        block_bound=2 * DEADLINE + 1.0,
        recovery=6.0,
    )
    return PartitionResult(verdict, windows, topology.prefix, leftovers)


def _inject(topology: Topology, ready: float) -> list[Window]:
    """Run the schedule from `ready`; returns the windows as they happened."""
    windows: list[Window] = []
    # A window is the time the link was surely down: from after `ip link set down` returned
    # to before `ip link set up` began (on a busy machine either command can take a while,
    # and an action in those moments may rightly reach its owner).
    for start, end, owners in SCHEDULE:
        _sleep_until(ready + start)
        for owner in owners:
            topology.cut(owner)
        cut = time.time()
        _sleep_until(ready + end)
        healing = time.time()
        for owner in owners:
            topology.heal(owner)
        windows += [Window(owner, cut, healing) for owner in owners]
    owner, start, end = FLAPPING
    _sleep_until(ready + start)
    while time.time() < ready + end:
        topology.cut(owner)
        cut = time.time()
        time.sleep(FLAP)
        healing = time.time()
        topology.heal(owner)
        windows.append(Window(owner, cut, healing))
        time.sleep(FLAP)
    return windows


def _sleep_until(when: float) -> None:
    time.sleep(max(0.0, when - time.time()))


def _start_owner(topology: Topology, cdir: ClusterDir, name: str) -> subprocess.Popen[str]:
    proc = _spawn(
        topology.command(
            name,
            [
                sys.executable,
                "-m",
                "planfence_net",
                "owner",
                "serve",
                str(cdir.root),
                "--agent",
                name,
            ],
        )
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith(f"owner {name} listening on "):
        stop_process(proc)
        raise RuntimeError(f"owner {name} did not start: {line.strip()} {_err(proc)}")
    return proc


def _spawn(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def stop_process(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL after STOP_TIMEOUT s; closes its pipes."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _err(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None or proc.stderr is None or proc.stderr.closed:
        return ""
    return proc.stderr.read().strip()[-400:]


def _store(cdir: ClusterDir, name: str) -> dict[bytes, int]:
    path = cdir.db(name)
    if not path.exists():
        return {}
    return {r.id: r.seq for r in StoreReader(path).records()}
