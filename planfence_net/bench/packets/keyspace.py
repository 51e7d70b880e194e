"""The keyspace experiment on packet-level links beside the relay, in one run.

    scripts/bench-packets att-lte --keyspace [--quick] --out DIR

Two bench clusters (`paper.benchcluster`: eight owners and the central store) run side by
side. The relay one is the paper's network model (`paper.network`: every agent behind its
own access link relayed by `traces.shaper`, half the profile's one-way delay each). The
packet one is `cluster up --links packet`'s (`cluster.packetlinks`): every agent's process in a
network namespace of its own behind a packet forwarder with the profile's whole one-way delay,
and this process, the executor, in the root namespace, so an executor's session crosses one
link with the profile's delay end to end, as the relay's crosses two with half each. For
every (case, policy) of the experiment, alternating: the relay run, then the packet run
(`paper.harness.run_experiment`, direct to the roster's addresses). Besides each row's stall
and the session bytes the harness charges, the packet run reads every forwarder's packet
counts (SIGUSR1, `traces/tunlink.py`) before and after, so the report has the IP packets and
bytes that crossed the links, TCP's ACKs and headers included; and the requests per action
counted from both clusters' owner logs (`paper.requests`). Needs root.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from ...cluster import processes as clusterlib
from ...cluster.folder import ClusterDir
from ...cluster.netns import exec_argv
from ...cluster.packetlinks import (
    forwarder_name,
    forwarder_pid,
    packet_namespaces,
    start_packet_links,
    stop_packet_links,
)
from ...cluster.pids import spawn
from ...cluster.ready import wait_cluster_ready
from ...traces.profiles import load_profile
from ..paper.benchcluster import bench_cluster, central_argv, init_bench_cluster
from ..paper.experiments import Experiment, build
from ..paper.harness import run_experiment
from ..paper.network import LinkModel
from ..paper.requests import count_requests, per_action, read_requests
from ..paper.workload import EXECUTOR

Row = dict[str, Any]
COUNTS_TIMEOUT = 10.0


def start_packet_cluster(root: Path, profile: str) -> ClusterDir:
    """The bench cluster at `root`, every agent in its namespace behind its packet link."""
    cdir = init_bench_cluster(root)
    central = central_argv(cdir)  # its last word is the central store's roster name
    try:
        namespaces = start_packet_links(cdir, profile)
        for agent in cdir.roster().agents:
            argv = central if agent.name == central[-1] else clusterlib.owner_argv(cdir, agent.name)
            spawn(cdir, agent.name, exec_argv(namespaces[agent.name], argv))
        anyio.run(wait_cluster_ready, cdir, cdir.roster().names, 60.0, backend="asyncio")
    except BaseException:
        stop_packet_cluster(cdir)
        raise
    return cdir


def stop_packet_cluster(cdir: ClusterDir) -> None:
    clusterlib.stop_owners(cdir)
    stop_packet_links(cdir)


def link_counts(cdir: ClusterDir) -> dict[str, dict[str, Any]]:
    """Every forwarder's packet counts now (agent -> its `{"counts": true}` answer)."""
    counts = {}
    for agent in packet_namespaces(cdir):
        out = cdir.out(forwarder_name(agent))
        before = len(out.read_text().splitlines())
        pid = forwarder_pid(cdir, agent)
        assert pid is not None, f"the packet forwarder of {agent} is not running"
        os.kill(pid, signal.SIGUSR1)
        deadline = time.monotonic() + COUNTS_TIMEOUT
        while len(lines := out.read_text().splitlines()) <= before:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the packet forwarder of {agent} did not say its counts")
            time.sleep(0.01)  # another process writes the file; nothing to wait on
        counts[agent] = json.loads(lines[-1])
    return counts


def wire_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    """Packets and bytes out of every link, both directions, between two `link_counts`."""
    total = {"packets": 0, "bytes": 0, "dropped": 0}
    for agent, now in after.items():
        for way in ("near_to_far", "far_to_near"):
            a, b = now[way], before[agent][way]
            total["packets"] += a["packets_out"] - b["packets_out"]
            total["bytes"] += a["bytes_out"] - b["bytes_out"]
            total["dropped"] += (
                a["dropped_loss"] + a["dropped_queue"] - b["dropped_loss"] - b["dropped_queue"]
            )
    return total


def run(
    root: Path, profile: str, seed: int, quick: bool, progress: Callable[[str], None]
) -> tuple[list[Row], list[dict[str, Any]], dict[str, Any]]:
    """Both clusters started, every (case, policy) run on each, alternating, everything
    stopped; returns the rows (each with `variant`), the packet runs' wire counts, and the
    requests per action of each variant."""
    plan = build("keyspace", quick=quick)
    links = LinkModel(load_profile(profile))
    rows: list[Row] = []
    wires: list[dict[str, Any]] = []
    with bench_cluster(root / "relay") as relay:
        packet = start_packet_cluster(root / "packet", profile)
        try:
            for case in plan.cases:
                for policy in case.policies:
                    one = Experiment(plan.name, (replace(case, policies=(policy,)),))
                    progress(f"{case.label} {policy}: relay")
                    done = anyio.run(run_experiment, relay, one, profile, seed, links)
                    rows += [{**r, "variant": "relay"} for r in done]
                    progress(f"{case.label} {policy}: packet")
                    before = link_counts(packet)
                    done = anyio.run(run_experiment, packet, one, profile, seed, None)
                    wire = wire_delta(before, link_counts(packet))
                    wires.append(
                        {"case": case.label, "policy": policy, "actions": len(done), **wire}
                    )
                    rows += [{**r, "variant": "packet", "profile": profile} for r in done]
            requests = {
                variant: requests_per_action(cdir, [r for r in rows if r["variant"] == variant])
                for variant, cdir in (("relay", relay), ("packet", packet))
            }
        finally:
            stop_packet_cluster(packet)
    return rows, wires, requests


def requests_per_action(cdir: ClusterDir, rows: list[Row]) -> dict[str, float]:
    """(policy, op, by, when) joined by spaces -> requests per action, from the owners' logs."""
    events = read_requests((cdir.root / "logs").glob("*.jsonl"))
    counts, actions = count_requests(events, rows, EXECUTOR)
    return {" ".join(key): rate for key, rate in per_action(counts, actions).items()}


def report(
    rows: list[Row],
    wires: list[dict[str, Any]],
    requests: dict[str, Any],
    profile: str,
    command: str,
) -> str:
    loads = [r["load1"] for r in rows if r.get("load1") is not None]
    lines = [
        f"# The keyspace experiment on `{profile}`: packet-level links beside the relay",
        "",
        f"Command: `{command}`",
        "",
        f"Load average during the run: {min(loads, default=0):.1f} to "
        f"{max(loads, default=0):.1f} (2 cores, shared). Layout: two bench clusters of eight "
        "owners and the central store each, one process per agent; the relay's links in one "
        "process of their own (`paper.linkproc`); one packet forwarder process per agent of "
        "the packet cluster; the harness (the executor) in the root namespace. Runs "
        "alternate per (case, policy): relay, then packet.",
        "",
        "| case | policy | n | relay stall ms mean (median) | packet stall ms mean (median) "
        "| packet/relay (means) | session KiB/action (relay, packet) | wire packets/action "
        "| wire KiB/action | invalid (relay, packet) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for wire in wires:
        case, policy = wire["case"], wire["policy"]
        by = {
            v: [r for r in rows if (r["case"], r["policy"], r["variant"]) == (case, policy, v)]
            for v in ("relay", "packet")
        }
        stall = {v: statistics.fmean(r["stall_ms"] for r in by[v]) for v in by}
        middle = {v: statistics.median(r["stall_ms"] for r in by[v]) for v in by}
        kib = {v: statistics.fmean(r["bytes"] for r in by[v]) / 1024 for v in by}
        invalid = {v: sum(bool(r["invalid"]) for r in by[v]) for v in by}
        n = wire["actions"]
        lines.append(
            f"| {case} | {policy} | {n} | {stall['relay']:.1f} ({middle['relay']:.1f}) "
            f"| {stall['packet']:.1f} ({middle['packet']:.1f}) "
            f"| {stall['packet'] / stall['relay']:.2f} | {kib['relay']:.2f}, {kib['packet']:.2f} "
            f"| {wire['packets'] / n:.1f} | {wire['bytes'] / n / 1024:.2f} "
            f"| {invalid['relay']}, {invalid['packet']} |"
        )
    lines += [
        "",
        "Stall: from ready to act to the decision, per action. Session KiB: what the harness "
        "charges an action (encrypted, framed, both directions; the same bytes on either "
        "link). Wire: every IP packet out of every packet link during the (case, policy) "
        "run, both directions, TCP's handshakes, headers and ACKs included, and the key "
        "setup of the case too, over its actions.",
        "",
        "What differs between the two links besides the packets: the relay's model puts the "
        "executor behind a link of its own (half the one-way delay at each end) and re-anchors "
        "every link's trace phase before each action, paired across policies; the packet "
        "links give the whole delay to the owner's link and replay the trace continuously "
        "from the cluster's start, so the two policies of a case meet different stretches of "
        "the trace. The executor's sessions are persistent in both, so TCP's handshake "
        "rarely falls inside a stall; slow start, ACKs and the queue's drops do.",
        "",
        "## Requests per action, from the owners' logs (relay, packet)",
        "",
        "| policy | op | by | when | relay | packet |",
        "|---|---|---|---|---|---|",
    ]
    for key in sorted(set(requests["relay"]) | set(requests["packet"])):
        policy, op, who, when = key.split(" ")
        relay, packet = (requests[v].get(key, 0.0) for v in ("relay", "packet"))
        lines.append(f"| {policy} | {op} | {who} | {when} | {relay:.2f} | {packet:.2f} |")
    return "\n".join([*lines, ""])


def write(
    out: Path,
    rows: list[Row],
    wires: list[dict[str, Any]],
    requests: dict[str, Any],
    profile: str,
    command: str,
) -> None:
    """rows.jsonl, wire.json and report.md into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "rows.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    (out / "wire.json").write_text(json.dumps({"wire": wires, "requests": requests}, indent=1))
    (out / "report.md").write_text(report(rows, wires, requests, profile, command))
