"""Figure 2 on packet-level links, beside the relay's, in one run.

    scripts/bench-packets att-lte --reps 5 --out DIR [--quick]

For every point of the paper's three sweeps (`paper.figure2.settings`: payload, one-way
delay, loss), `reps` times, alternating: one sync through the relay (`planfence shape` in
front of an owner on loopback, `paper.figure2.figure2`), then one through a packet-level link
(the owner in a namespace of its own behind `PacketNet`), each on links made anew at the same
trace phase, one with no outage in the next 5 s (`paper.network.usable_phase`). One sync is TCP
connect, the Noise handshake, one `put` of a record of the payload's size and its durable
answer. The relay accepts the TCP connection itself and forwards bytes, so it charges no
TCP handshake, no slow start and no ACKs on the reverse link, and emulates loss as a delay;
the packet-level link charges all of it and drops packets for real. Writes rows.jsonl and
report.md (mean sync time per point, packet/relay). Needs root.
"""

from __future__ import annotations

import json
import random
import statistics
import time
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
import tomli_w

from ...cluster import processes as clusterlib
from ...cluster.folder import ClusterDir
from ...cluster.pids import spawn
from ...cluster.ready import wait_cluster_ready
from ...net.client import open_session
from ...traces.profiles import load_profile, load_trace
from ..paper.figure2 import OWNER, WRITER, figure2
from ..paper.hostload import load_average
from ..paper.network import usable_phase
from .net import PacketNet

OWNER_PORT = 7000  # inside the owner's own namespace, nothing else listens
QUICK = [("payload", 1, 0, 0.0), ("payload", 64, 0, 0.0), ("loss", 16, 0, 0.05)]


@dataclass(frozen=True, slots=True)
class Sync:
    variant: str  # "relay" | "packet"
    sweep: str
    payload_kib: int
    delay_ms: int
    loss: float
    rep: int
    sync_ms: float
    load1: float | None


def one_owner_cluster(root: Path, address: str | None = None) -> ClusterDir:
    """A cluster folder of two agents (`planner`, `reqs`) with `reqs` at `address` if given."""
    clusterlib.init_cluster(root, agents=2, base_port=0)
    cdir = ClusterDir(root)
    if address is not None:
        data = tomllib.loads(cdir.roster_path.read_text())
        for agent in data["agents"]:
            if agent["name"] == OWNER:
                agent["address"] = address
        cdir.roster_path.write_text(tomli_w.dumps(data))
    return cdir


async def packet_sync(
    cdir: ClusterDir,
    net: PacketNet,
    point: tuple[str, int, int, float],
    rep: int,
    offset: int,
) -> tuple[Sync, dict[str, Any]]:
    """One sync of one point through the packet-level link, its links made anew at the
    trace phase `offset` (no outage ahead), and the links' packet counts for it (`tunlink`)."""
    sweep, kib, delay, loss = point
    net.configure(delay, loss, offset, seed=rep)
    began = time.perf_counter()
    roster, identity = cdir.roster(), cdir.identity(WRITER)
    async with open_session(roster, identity, OWNER, host=net.owner_ip, port=OWNER_PORT) as s:
        await s.request(
            "put",
            {
                "key": f"req/figure2/{sweep}/{kib}/{delay}/{loss}",
                "kind": "fact",
                "parents": [],
                "body": "x" * (kib * 1024),
            },
        )
    ms = (time.perf_counter() - began) * 1000
    return Sync("packet", sweep, kib, delay, loss, rep, ms, load_average()), net.counts()


async def compare(
    relay: ClusterDir,
    packet: ClusterDir,
    net: PacketNet,
    profile: str,
    reps: int,
    seed: int,
    points: list[tuple[str, int, int, float]],
    progress: Any = print,
) -> tuple[list[Sync], list[dict[str, Any]]]:
    """Every point, each repetition through the relay then through the packet-level link,
    both starting at the same trace phase with no outage ahead (module docstring); the rows,
    and the packet link's counts per point."""
    found = load_profile(profile)
    traces = [load_trace(t) for t in (found.up, found.down) if t is not None]
    rows: list[Sync] = []
    counts = []
    for sweep, kib, delay, loss in points:
        point = (sweep, kib, delay or found.delay_ms, loss)
        progress(f"{sweep}: {kib} KiB, {point[2]} ms, {loss:.0%} loss")
        # figure2 draws the phase of its first point from (seed, 0): the packet link gets it
        # too; every repetition starts there, so a sync never meets the trace's outages
        offset = usable_phase(traces, random.Random(f"{seed}:figure2:0")) if traces else 0
        total: dict[str, Any] = {}
        for rep in range(reps):
            for p in await figure2(relay, profile, 1, seed, only=[point]):
                rows.append(Sync("relay", *{**asdict(p), "rep": rep}.values()))
            sync, count = await packet_sync(packet, net, point, rep, offset)
            rows.append(sync)
            total = _added(total, count)
        counts.append(total)
    return rows, counts


def _added(total: dict[str, Any], count: dict[str, Any]) -> dict[str, Any]:
    """`tunlink`'s counts, summed field by field (nested dicts too)."""
    out = dict(total)
    for key, value in count.items():
        out[key] = (
            _added(out.get(key, {}), value) if isinstance(value, dict) else out.get(key, 0) + value
        )
    return out


def report(rows: list[Sync], profile: str, command: str, counts: list[dict[str, Any]]) -> str:
    groups: dict[tuple[str, int, int, float], dict[str, list[float]]] = {}
    for r in rows:
        key = (r.sweep, r.payload_kib, r.delay_ms, r.loss)
        groups.setdefault(key, {}).setdefault(r.variant, []).append(r.sync_ms)
    loads = [r.load1 for r in rows if r.load1 is not None]
    lines = [
        f"# Figure 2 on `{profile}`: packet-level links beside the relay",
        "",
        f"Command: `{command}`",
        "",
        f"Load average during the run: {min(loads, default=0):.1f} to {max(loads, default=0):.1f}.",
        "",
        "| sweep | payload KiB | one-way delay ms | loss | relay ms (mean) | packet ms (mean) "
        "| packet/relay | packets up / down | dropped |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for ((sweep, kib, delay, loss), by), count in zip(groups.items(), counts, strict=True):
        relay, packet = statistics.fmean(by["relay"]), statistics.fmean(by["packet"])
        up, down = count["near_to_far"], count["far_to_near"]
        dropped = sum(d["dropped_loss"] + d["dropped_queue"] for d in (up, down))
        lines.append(
            f"| {sweep} | {kib} | {delay} | {loss:.0%} | {relay:.1f} | {packet:.1f} "
            f"| {packet / relay:.2f} | {up['packets_in']} / {down['packets_in']} | {dropped} |"
        )
    lines += [
        "",
        "Packets up: participant to owner (the profile's `up` trace); down: the owner's "
        "answers and ACKs (`down`), over every repetition of the point; dropped: lost to the "
        "loss rate or a full queue.",
        "",
    ]
    return "\n".join(lines)


def write(
    out: Path, rows: list[Sync], counts: list[dict[str, Any]], profile: str, command: str
) -> None:
    """rows.jsonl and report.md into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "rows.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(asdict(row)) + "\n")
    (out / "report.md").write_text(report(rows, profile, command, counts), encoding="utf-8")


def run(
    root: Path,
    profile: str,
    reps: int,
    seed: int,
    points: list[tuple[str, int, int, float]],
    progress: Any = lambda line: None,
) -> tuple[list[Sync], list[dict[str, Any]]]:
    """Both owners started, every point measured, everything stopped."""
    relay = one_owner_cluster(root / "relay")
    with PacketNet(profile) as net:
        packet = one_owner_cluster(root / "packet", f"{net.owner_ip}:{OWNER_PORT}")
        net.start_owner(packet, OWNER)
        spawn(relay, OWNER, clusterlib.owner_argv(relay, OWNER))
        try:
            anyio.run(wait_cluster_ready, relay, [OWNER], backend="asyncio")
            return anyio.run(
                compare,
                relay,
                packet,
                net,
                profile,
                reps,
                seed,
                points,
                progress,
                backend="asyncio",
            )
        finally:
            clusterlib.stop_owners(relay)
