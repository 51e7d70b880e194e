"""`planfence cluster up --links packet` as real processes: every owner in a network namespace of
its own behind a packet forwarder replaying synthetic-lte; an authorize through the links, a
round trip that pays both directions' delay, a healthy `cluster status`, owner-to-owner traffic
through both links, and `cluster down` leaving no namespace, device or process. Needs root;
skips with one line elsewhere."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import anyio
import pytest

from planfence_net.cluster import netns
from planfence_net.cluster.packetlinks import (
    forwarder_name,
    link_prefix,
    read_packet_links,
    stop_packet_links,
)
from planfence_net.cluster.pids import process_alive, read_pid
from planfence_net.net.client import open_session
from planfence_net.traces import load_profile
from support.cluster import PLANFENCE, ClusterHandle, owner_processes, run_planfence, wait_exit

pytestmark = pytest.mark.partition

PROFILE = "synthetic-lte"


def planfence(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PLANFENCE), *args], capture_output=True, text=True, timeout=60, check=False
    )


def devices(prefix: str) -> list[str]:
    listed = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    return [line.split(":")[1].strip() for line in listed.stdout.splitlines() if prefix in line]


def namespace_of(pid: int) -> str:
    named = subprocess.run(
        ["ip", "netns", "identify", str(pid)], capture_output=True, text=True, check=True
    )
    return named.stdout.strip()


@pytest.fixture
def packet_cluster(cluster_dir: ClusterHandle) -> Iterator[ClusterHandle]:
    """The folder of `cluster_dir`; whatever a test leaves of its packet links is removed."""
    reason = netns.available()
    if reason is not None:
        pytest.skip(reason)
    try:
        yield cluster_dir
    finally:
        cluster_dir.stop()
        stop_packet_links(cluster_dir.cdir)


async def timed_pings(h: ClusterHandle, agent: str, n: int) -> tuple[float, list[float]]:
    """Seconds to open a session to `agent`'s owner (TCP and Noise), and `n` ping round trips."""
    roster = h.cdir.roster()
    began = time.perf_counter()
    async with open_session(roster, h.identity("ops"), agent) as session:
        opened = time.perf_counter() - began
        rtts = []
        for _ in range(n):
            began = time.perf_counter()
            await session.request("ping")
            rtts.append(time.perf_counter() - began)
    return opened, rtts


def test_cluster_up_on_packet_links_serves_through_them_and_down_removes_them(
    packet_cluster: ClusterHandle,
) -> None:
    h = packet_cluster
    path, prefix = str(h.path), link_prefix(h.cdir)
    before = {a.name: a.address for a in h.roster.agents}
    up = planfence("cluster", "up", path, "--profile", PROFILE, "--links", "packet")
    assert up.returncode == 0, up.stderr
    assert up.stdout == (
        "started 5 owner(s): planner, reqs, inventory, ops, audit; 5 running; "
        f"packet links with {PROFILE}, one network namespace per owner\n"
    )
    roster = h.cdir.roster()
    assert all(a.host.startswith("198.19.") for a in roster.agents)
    assert [a.port for a in roster.agents] == [a.port for a in h.roster.agents]
    assert sorted(netns.namespaces(prefix)) == sorted(f"{prefix}-{a}" for a in roster.names)

    status = planfence("cluster", "status", path, "--json")
    assert status.returncode == 0, status.stderr
    rows = json.loads(status.stdout)
    assert [r["shaper"]["packet"] and r["shaper"]["running"] for r in rows] == [True] * 5

    # a plan on a fact, authorized through the links
    put = json.loads(run_planfence("put", path, "req/order-17", "--body", "3", "--json").stdout)
    plan = run_planfence(
        "plan", path, "plan/ship-17", "--body", "1", "--parent", put["id"], "--json"
    )
    root = json.loads(plan.stdout)["id"]
    authorized = planfence(
        "authorize", path, "--root", root, "--dep", "req/order-17", "--as", "ops"
    )
    assert authorized.returncode == 0, authorized.stdout + authorized.stderr

    # every round trip crosses the link both ways: at least twice the one-way delay
    delay = load_profile(PROFILE).delay_ms / 1000
    opened, rtts = anyio.run(timed_pings, h, "reqs", 5)
    assert min(rtts) >= 2 * delay, rtts
    assert opened >= 2 * 2 * delay, opened  # TCP's handshake, then Noise's

    # owner to owner: out through the first owner's link, in through the second's
    reqs = roster.agent("reqs")
    argv = [sys.executable, "-c", CONNECT, reqs.host, str(reqs.port)]
    inside = subprocess.run(
        netns.exec_argv(f"{prefix}-planner", argv), capture_output=True, text=True, timeout=30
    )
    assert inside.returncode == 0, inside.stderr
    assert float(inside.stdout) >= 4 * delay  # SYN and SYN-ACK, each across two links

    owners = owner_processes(str(h.path.resolve()))
    assert sorted(map(namespace_of, owners)) == sorted(f"{prefix}-{a}" for a in roster.names)
    forwarders = [read_pid(h.cdir, forwarder_name(a)) for a in roster.names]
    assert len(owners) == 5 and None not in forwarders
    down = planfence("cluster", "down", path)
    assert down.returncode == 0, down.stderr
    assert down.stdout == (
        "stopped 5 owner(s): planner, reqs, inventory, ops, audit; 5 packet link(s)\n"
    )
    assert netns.namespaces(prefix) == []
    assert devices(prefix) == []
    assert owner_processes(str(h.path.resolve())) == {}
    assert [p for p in forwarders if p and process_alive(p, "tunlink")] == []
    assert {a.name: a.address for a in h.cdir.roster().agents} == before
    assert read_packet_links(h.cdir) == {}


CONNECT = """
import socket, sys, time
began = time.perf_counter()
socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10).close()
print(time.perf_counter() - began)
"""


def test_ctrl_c_during_cluster_up_removes_the_links_it_made(
    packet_cluster: ClusterHandle,
) -> None:
    h = packet_cluster
    prefix = link_prefix(h.cdir)
    up = subprocess.Popen(
        [str(PLANFENCE), "cluster", "up", str(h.path), "--profile", PROFILE, "--links", "packet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not netns.namespaces(prefix):
            assert time.monotonic() < deadline, "cluster up made no namespace in time"
            time.sleep(0.005)  # another process makes them; nothing to wait on
        up.send_signal(signal.SIGINT)
        out, err = up.communicate(timeout=60)
    finally:
        if up.poll() is None:
            up.kill()
            up.communicate()
    assert (up.returncode, out) == (130, ""), (up.returncode, out, err)
    assert err.startswith("interrupted: stopped what this command started: "), err
    assert netns.namespaces(prefix) == []
    assert devices(prefix) == []
    assert owner_processes(str(h.path.resolve())) == {}
    assert [a.address for a in h.cdir.roster().agents] == [a.address for a in h.roster.agents]
    assert read_packet_links(h.cdir) == {}


def test_other_links_are_refused_and_a_stopped_forwarder_fails_the_status(
    packet_cluster: ClusterHandle,
) -> None:
    h = packet_cluster
    up = planfence("cluster", "up", str(h.path), "--profile", PROFILE, "--links", "packet")
    assert up.returncode == 0, up.stderr
    again = planfence("cluster", "up", str(h.path), "--profile", PROFILE, "--links", "packet")
    assert (again.returncode, again.stdout) == (
        0,
        (
            f"started 0 owner(s): -; 5 running; packet links with {PROFILE}, one network "
            "namespace per owner\n"
        ),
    ), again.stderr
    relay = planfence("cluster", "up", str(h.path), "--profile", PROFILE)
    assert relay.returncode == 1
    assert relay.stderr == (
        f"error: {h.path} runs on packet links: `planfence cluster down {h.path}` first "
        "(or `cluster up --links packet`)\n"
    )

    # an owner restarted runs in its namespace again, behind its link
    restarted = planfence("owner", "restart", str(h.path), "reqs")
    assert restarted.returncode == 0, restarted.stderr
    assert namespace_of(h.owner_pid("reqs")) == f"{link_prefix(h.cdir)}-reqs"

    # a forwarder gone: nothing reaches its owner, and status says which link is down
    forwarder = read_pid(h.cdir, forwarder_name("reqs"))
    assert forwarder is not None
    os.kill(forwarder, signal.SIGKILL)
    assert wait_exit(forwarder)
    status = planfence("cluster", "status", str(h.path), "--timeout", "1")
    assert status.returncode == 1
    assert status.stderr == (
        "error: 1 of 5 owner(s) not alive: reqs: its synthetic-lte packet link is not "
        "running: nothing reaches it (`planfence cluster down DIR`, then "
        "`cluster up DIR --links packet`)\n"
    )
