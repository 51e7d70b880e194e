"""The paper's Figure 2 on our links: the time of one authenticated sync against payload size,
one-way delay and loss.

    points = await figure2(cdir, "att-lte", reps=10, seed=0)
    write_figure2(out, "att-lte", points, command)

    python -m planfence_net.bench.paper.figure2 att-lte [--reps 10] [--seed 0] [--out DIR]

One **sync** is what a participant pays to bring one update to an owner over a fresh
session: TCP connect and the Noise handshake through the link, one `put` of a record whose
body is `payload` bytes, and its answer (the owner answers once the record is durable). The
link is `planfence shape` in a process of its own in front of the owner (the profile's traces
in each direction, the given one-way delay, loss emulated as a retransmission delay), started
at a trace phase with no outage ahead (bench/paper/network.py's rule) drawn from the seed. Three
sweeps, each varying one axis from a base point (16 KiB, the profile's one-way delay, no
loss): payload 1 to 256 KiB, one-way delay 5 to 120 ms, loss 0 to 10%. `reps` syncs per
point, one after the other.
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream

from ...cluster.folder import ClusterDir
from ...core.errors import ConfigError, PlanfenceError
from ...net.client import open_session
from ...traces.profiles import load_profile, load_trace, require_traces
from .benchcluster import bench_cluster
from .hostload import host_load, load_average
from .network import usable_phase
from .stats import Resampler, informative, mean

BASE_KIB, SIZES_KIB = 16, (1, 4, 16, 64, 256)
DELAYS_MS = (5, 15, 30, 60, 120)
LOSSES = (0.0, 0.01, 0.02, 0.05, 0.10)
OWNER, WRITER = "reqs", "reqs"


@dataclass(frozen=True, slots=True)
class Point:
    """One sync: the sweep it belongs to, its link settings and its time."""

    sweep: str  # "payload" | "delay" | "loss"
    payload_kib: int
    delay_ms: int
    loss: float
    rep: int
    sync_ms: float
    load1: float | None


def settings(profile_delay_ms: int) -> list[tuple[str, int, int, float]]:
    """(sweep, payload KiB, one-way delay ms, loss) of every point."""
    points = [("payload", kib, profile_delay_ms, 0.0) for kib in SIZES_KIB]
    points += [("delay", BASE_KIB, delay, 0.0) for delay in DELAYS_MS]
    points += [("loss", BASE_KIB, profile_delay_ms, loss) for loss in LOSSES]
    return points


async def _shaper(
    upstream: str, profile: str, delay_ms: int, loss: float, offset_ms: int
) -> tuple[Any, int]:
    """Start `planfence shape` for one point; returns (process, the port it listens on)."""
    process = await anyio.open_process(
        [
            sys.executable,
            "-m",
            "planfence_net",
            "shape",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            upstream,
            "--profile",
            profile,
            "--delay-ms",
            str(delay_ms),
            "--loss",
            str(loss),
            "--offset-ms",
            str(offset_ms),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    try:
        line = await BufferedByteReceiveStream(process.stdout).receive_until(b"\n", 4096)
    except (anyio.EndOfStream, anyio.IncompleteRead):
        await process.aclose()
        raise ConfigError(f"planfence shape did not start for {profile}") from None
    # "shaping 127.0.0.1:PORT -> ..."
    return process, int(line.decode().split()[1].rsplit(":", 1)[1])


async def figure2(
    cdir: ClusterDir,
    profile: str,
    reps: int = 10,
    seed: int = 0,
    only: list[tuple[str, int, int, float]] | None = None,
) -> list[Point]:
    """Every point of the three sweeps (or the `only` ones, as `settings` gives them), `reps`
    syncs each, against the owner `reqs` of the running cluster at `cdir`."""
    roster = cdir.roster()
    identity = cdir.identity(WRITER)
    found = load_profile(profile)
    traces = [load_trace(t) for t in (found.up, found.down) if t is not None]
    owner = roster.agent(OWNER)
    points: list[Point] = []
    for index, (sweep, kib, delay, loss) in enumerate(only or settings(found.delay_ms)):
        draw = random.Random(f"{seed}:figure2:{index}")
        offset = usable_phase(traces, draw) if traces else 0
        process, port = await _shaper(owner.address, profile, delay, loss, offset)
        try:
            for rep in range(reps):
                body = "x" * (kib * 1024)
                began = time.perf_counter()
                async with open_session(
                    roster, identity, OWNER, host="127.0.0.1", port=port
                ) as session:
                    await session.request(
                        "put",
                        {
                            "key": f"req/figure2/{sweep}/{index}",
                            "kind": "fact",
                            "parents": [],
                            "body": body,
                        },
                    )
                sync_ms = (time.perf_counter() - began) * 1000
                points.append(Point(sweep, kib, delay, loss, rep, sync_ms, load_average()))
        finally:
            process.terminate()
            await process.aclose()
    return points


def write_figure2(out: Path, profile: str, points: list[Point], command: str) -> None:
    """rows.jsonl, report.md and figure2.png (three panels: the paper's axes) into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "rows.jsonl", "w", encoding="utf-8") as f:
        for point in points:
            f.write(json.dumps(asdict(point)) + "\n")
    load = host_load([asdict(p) for p in points])
    lines = [
        f"# Figure 2 on `{profile}`: one authenticated sync",
        "",
        f"Command: `{command}`",
        "",
        "One sync: TCP connect and Noise handshake through the link, one `put` of a record "
        "with a body of the given size, its answer once durable (bench/paper/figure2.py). The link "
        f"is `planfence shape` with `{profile}`'s traces, in a process of its own. Each sweep "
        "varies one axis from 16 KiB, the profile's one-way delay, no loss. Mean sync time "
        "with a 95% bootstrap interval over the repetitions.",
        "",
        f"**Load:** {load.text()}.",
        "",
        "| sweep | payload KiB | one-way delay ms | loss | n | sync ms mean [95% CI] |",
        "|---|---|---|---|---|---|",
    ]
    for key, mine in _groups(points).items():
        estimate = _estimate(mine)
        sweep, kib, delay, loss = key
        lines.append(
            f"| {sweep} | {kib} | {delay} | {loss:.0%} | {len(mine)} | "
            f"{informative(estimate.text(), len(mine), 'repetitions')} |"
        )
    lines += ["", "![figure2](figure2.png)", ""]
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")
    _plot(out / "figure2.png", profile, points)


def _groups(points: list[Point]) -> dict[tuple[str, int, int, float], list[Point]]:
    groups: dict[tuple[str, int, int, float], list[Point]] = {}
    for p in points:
        groups.setdefault((p.sweep, p.payload_kib, p.delay_ms, p.loss), []).append(p)
    return groups


def _estimate(mine: list[Point]) -> Any:
    boot = Resampler([str(p.rep) for p in mine])
    rows = [{"template": str(p.rep), "v": p.sync_ms} for p in mine]
    return boot.estimate(boot.groups(rows, lambda r: float(r["v"])), mean)


def _plot(path: Path, profile: str, points: list[Point]) -> None:
    # matplotlib is the optional `bench` extra, and its backend must be chosen before pyplot
    # is imported: both happen here, when the figure is drawn.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axes_of: dict[str, tuple[str, Callable[[Point], float], bool]] = {
        "payload": ("payload size (KiB)", lambda p: p.payload_kib, True),
        "delay": ("one-way delay (ms)", lambda p: p.delay_ms, False),
        "loss": ("loss rate (%)", lambda p: p.loss * 100, False),
    }
    groups = _groups(points)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, (sweep, (label, x_of, logx)) in zip(axes, axes_of.items(), strict=True):
        keys = [k for k in groups if k[0] == sweep]
        estimates = [_estimate(groups[k]) for k in keys]
        xs = [x_of(groups[k][0]) for k in keys]
        ax.errorbar(
            xs,
            [e.value for e in estimates],
            yerr=[
                [max(0.0, e.value - e.low) for e in estimates],
                [max(0.0, e.high - e.value) for e in estimates],
            ],
            marker="o",
            capsize=3,
        )
        if logx:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(label)
        ax.set_ylabel("sync time (ms, mean, 95% CI)")
        ax.grid(alpha=0.3)
    n = max((len(v) for v in groups.values()), default=0)
    fig.suptitle(f"one authenticated sync on {profile} (n={n} per point)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(
    argv: list[str] | None = None, prog: str = "python -m planfence_net.bench.paper.figure2"
) -> int:
    """PROFILE [--reps N] [--seed S] [--out DIR]: start three owners on free loopback ports,
    run the sweeps, stop everything, write the report into DIR (default
    docs/results/figure2-PROFILE, relative to the working directory). A missing trace or an
    unknown profile is one line on stderr and exit status 1."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("profile")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    out = args.out or Path("docs/results") / f"figure2-{args.profile}"
    command = shlex.join(
        ["scripts/bench-figure2", args.profile, "--reps", str(args.reps), "--seed", str(args.seed)]
    )
    try:
        require_traces(args.profile)
        with tempfile.TemporaryDirectory(prefix="planfence-figure2-") as tmp:
            with bench_cluster(Path(tmp) / "cluster", agents=3) as cdir:
                points = anyio.run(
                    figure2, cdir, args.profile, args.reps, args.seed, backend="asyncio"
                )
    except PlanfenceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    write_figure2(out, args.profile, points, command)
    print(f"report: {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
