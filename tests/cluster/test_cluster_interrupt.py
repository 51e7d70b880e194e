"""Ctrl-C during `planfence cluster up` stops what it started: a real `cluster up` process gets
SIGINT while its owners are starting, and no owner process or port of the folder is left."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time

from planfence_net.cluster.ports import port_in_use
from support.cluster import PLANFENCE, ClusterHandle, interruptible_popen, owner_processes


def owner_answers(h: ClusterHandle, name: str) -> bool:
    """True once `name`'s port accepts a TCP connection (it is past its start-up)."""
    agent = h.roster.agent(name)
    try:
        socket.create_connection((agent.host, agent.port), timeout=1).close()
    except OSError:
        return False
    return True


def start_cluster_up(h: ClusterHandle) -> subprocess.Popen[str]:
    """`planfence cluster up` of `h` as a real process the test will Ctrl-C."""
    return interruptible_popen(
        [str(PLANFENCE), "cluster", "up", str(h.path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )


def wait_pid_files(h: ClusterHandle, count: int, timeout: float = 30.0) -> None:
    """Wait until `count` owners have pid files (spawned, not yet answering)."""
    deadline = time.monotonic() + timeout
    while len(list((h.path / "run").glob("*.pid"))) < count:
        assert time.monotonic() < deadline, "cluster up spawned no owners in time"
        time.sleep(0.005)  # the pid files are another process's; nothing to wait on


def test_ctrl_c_while_owners_start_leaves_no_process_and_frees_the_ports(
    cluster_dir: ClusterHandle,
) -> None:
    h = cluster_dir
    up = start_cluster_up(h)
    try:
        wait_pid_files(h, 5)
        assert owner_processes(str(h.path.resolve()))  # they are starting
        up.send_signal(signal.SIGINT)
        out, err = up.communicate(timeout=60)
    finally:
        if up.poll() is None:
            up.kill()
            up.communicate()
    assert (up.returncode, out) == (130, ""), (up.returncode, out, err)
    assert err == (
        "interrupted: stopped what this command started: planner, reqs, inventory, ops, audit\n"
    )
    assert owner_processes(str(h.path.resolve())) == {}
    assert [a.name for a in h.roster.agents if port_in_use(a.host, a.port)] == []
    assert list((h.path / "run").glob("*.pid")) == []


def test_ctrl_c_keeps_the_owners_that_ran_before(cluster_dir: ClusterHandle) -> None:
    """Only what this `cluster up` started is stopped: an owner already running stays."""
    h = cluster_dir
    started = subprocess.run(
        [str(PLANFENCE), "owner", "start", str(h.path), "reqs"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert started.returncode == 0, started.stderr
    reqs = h.owner_pid("reqs")
    up = start_cluster_up(h)
    try:
        wait_pid_files(h, 5)
        up.send_signal(signal.SIGINT)
        _, err = up.communicate(timeout=60)
    finally:
        if up.poll() is None:
            up.kill()
            up.communicate()
    assert up.returncode == 130, err
    assert err == "interrupted: stopped what this command started: planner, inventory, ops, audit\n"
    assert list(owner_processes(str(h.path.resolve()))) == [reqs]


def test_status_names_a_dead_shaper_and_cluster_up_starts_it_again(
    cluster_dir: ClusterHandle,
) -> None:
    """An owner whose shaper died still answers, but sessions would reach it unshaped: the
    status shows the shaper as not running and exits 1; `cluster up --profile` restarts it."""
    import json
    import os

    from planfence_net.cluster import processes as clusterlib
    from support.cluster import run_planfence, wait_exit

    h = cluster_dir
    shaped = ("--profile", "synthetic-lte", "--delay-ms", "1")
    try:
        run_planfence("cluster", "up", str(h.path), *shaped)
        shaper = clusterlib.running_pid(
            h.cdir, "shaper-ops", clusterlib.shaper_marker(h.roster.agent("ops").address)
        )
        assert shaper is not None
        os.kill(shaper, signal.SIGKILL)
        assert wait_exit(shaper)
        status = subprocess.run(
            [str(PLANFENCE), "cluster", "status", str(h.path), "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert status.returncode == 1
        assert status.stderr == (
            "error: 1 of 5 owner(s) not reachable as shaped: ops: its synthetic-lte shaper is "
            "not running: sessions reach it unshaped (`planfence cluster up DIR --profile "
            "synthetic-lte` starts it again)\n"
        )
        rows = {r["name"]: r for r in json.loads(status.stdout)}
        assert rows["ops"]["alive"] is True
        assert (rows["ops"]["shaper"]["pid"], rows["ops"]["shaper"]["running"]) == (shaper, False)
        assert all(rows[n]["shaper"]["running"] for n in rows if n != "ops")
        run_planfence("cluster", "up", str(h.path), *shaped)
        again = json.loads(run_planfence("cluster", "status", str(h.path), "--json").stdout)
        assert all(r["alive"] and r["shaper"]["running"] for r in again)
    finally:
        clusterlib.stop_shapers(h.cdir)


def test_ctrl_c_while_cluster_up_waits_for_a_frozen_owner_stops_it_too(
    cluster_dir: ClusterHandle,
) -> None:
    """Ctrl-C lands inside the wait for the owners to answer (one is frozen, so the wait is
    still going): asyncio's runner must not take it for a cancellation that the wait's
    retries absorb, so that `cluster up` went on and exited 0 (seen in a clean-clone run)."""
    h = cluster_dir
    up = start_cluster_up(h)
    frozen = 0
    try:
        wait_pid_files(h, 5)
        frozen = int((h.path / "run" / "audit.pid").read_text())
        os.kill(frozen, signal.SIGSTOP)  # audit cannot answer: cluster up keeps waiting
        while not owner_answers(h, "planner"):
            time.sleep(0.01)  # another process's start-up; nothing to wait on
        up.send_signal(signal.SIGINT)
        os.kill(frozen, signal.SIGCONT)
        out, err = up.communicate(timeout=60)
    finally:
        if frozen:
            with contextlib.suppress(ProcessLookupError):  # stopped by cluster up's clean-up
                os.kill(frozen, signal.SIGCONT)
        if up.poll() is None:
            up.kill()
            up.communicate()
    assert (up.returncode, out) == (130, ""), (up.returncode, out, err)
    assert owner_processes(str(h.path.resolve())) == {}
