"""Owner processes for the torture suite and the legitimate client that watches them.

`OwnerProcess` runs `planfence owner serve` for one agent (optionally under a descriptor
limit and with `--limit`s) and reads its peak resident set from /proc. `Bystander` runs a
legitimate client in its own process while an attack goes on: one session pings the owner
every 10 ms (its latencies are what a user would see), another writes a small record every
50 ms (what the owner acknowledges must be readable afterwards). It runs in a separate
process so that the attacker's own work (encrypting 16 MiB messages) cannot slow its pings.

    python -m planfence_net.bench.torture.probe CLUSTER_DIR OWNER   (prints JSON at stdin EOF)
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ...cluster.folder import ClusterDir
from ...core.errors import PlanfenceError
from ...net.client import open_session

PING_EVERY = 0.01
PUT_EVERY = 0.05
STOP_TIMEOUT = 15.0


class OwnerProcess:
    """`planfence owner serve DIR --agent NAME` as a child process; a context manager that
    starts it (returning once it listens) and stops it (SIGTERM, then SIGKILL)."""

    def __init__(
        self, root: Path, agent: str, *, limits: tuple[str, ...] = (), nofile: int | None = None
    ) -> None:
        self.argv = [
            sys.executable,
            "-m",
            "planfence_net",
            "owner",
            "serve",
            str(root),
            "--agent",
            agent,
            *(f"--limit={limit}" for limit in limits),
        ]
        self.agent = agent
        self.nofile = nofile
        self.proc: subprocess.Popen[str] | None = None

    async def __aenter__(self) -> OwnerProcess:
        nofile = self.nofile

        def lower_nofile() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lower_nofile,
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        line = await anyio.to_thread.run_sync(self.proc.stdout.readline)
        if not line.startswith(f"owner {self.agent} listening on "):
            await self.__aexit__()
            raise PlanfenceError(f"owner {self.agent} did not start: {line}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            await anyio.to_thread.run_sync(proc.wait, STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            await anyio.to_thread.run_sync(proc.wait)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def peak_rss_mb(self) -> float:
        """The owner's peak resident set size so far (VmHWM), in MB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        raise PlanfenceError("no VmHWM in /proc")


@dataclass(frozen=True, slots=True)
class Watch:
    """What the bystander saw: ping latencies (ms), ids acknowledged, requests that failed."""

    pings_ms: list[float]
    acknowledged: list[bytes]
    failures: int

    @property
    def p99_ms(self) -> float:
        if not self.pings_ms:
            return float("inf")
        ordered = sorted(self.pings_ms)
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


class Bystander:
    """The legitimate client process (module docstring); `stop()` returns its Watch."""

    def __init__(self, root: Path, owner: str) -> None:
        self.argv = [sys.executable, "-m", "planfence_net.bench.torture.probe", str(root), owner]
        self.proc: subprocess.Popen[str] | None = None

    async def start(self) -> None:
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        ready = await anyio.to_thread.run_sync(self.proc.stdout.readline)
        if ready.strip() != "ready":
            await self.stop()
            raise PlanfenceError(f"bystander did not start: {ready}")

    async def stop(self) -> Watch:
        proc, self.proc = self.proc, None
        assert proc is not None
        out, err = await anyio.to_thread.run_sync(lambda: proc.communicate(timeout=STOP_TIMEOUT))
        try:
            report = json.loads(out)
        except json.JSONDecodeError:
            raise PlanfenceError(f"bystander failed: {err.strip()[-300:]}") from None
        return Watch(
            report["pings_ms"],
            [bytes.fromhex(i) for i in report["acknowledged"]],
            report["failures"],
        )


async def _watch(root: Path, owner: str) -> dict[str, Any]:
    cdir = ClusterDir(root)
    roster = cdir.roster()
    report: dict[str, Any] = {"pings_ms": [], "acknowledged": [], "failures": 0}
    done = anyio.Event()

    async def ping(session: Any) -> None:
        while not done.is_set():
            started = time.perf_counter()
            try:
                await session.request("ping")
            except PlanfenceError:
                report["failures"] += 1
                return  # a lost session: the suite reports the failure
            report["pings_ms"].append((time.perf_counter() - started) * 1000)
            await anyio.sleep(PING_EVERY)

    async def write(session: Any) -> None:
        for n in range(1_000_000):
            if done.is_set():
                return
            try:
                result = await session.request("put", {"key": f"req/bystander-{n}", "body": n})
                report["acknowledged"].append(result["id"].hex())
            except PlanfenceError:
                report["failures"] += 1
            await anyio.sleep(PUT_EVERY)

    async with (
        open_session(roster, cdir.identity("planner"), owner) as pinger,
        open_session(roster, cdir.identity(owner), owner) as writer,
    ):
        async with anyio.create_task_group() as tg:
            tg.start_soon(ping, pinger)
            tg.start_soon(write, writer)
            print("ready", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.read)  # until the suite closes stdin
            done.set()
    return report


def main() -> None:
    root, owner = Path(sys.argv[1]), sys.argv[2]
    print(json.dumps(anyio.run(_watch, root, owner)))


if __name__ == "__main__":
    main()
