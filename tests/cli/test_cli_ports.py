"""Ports in use and deadlines: no command hangs, and each says what holds the port.

A "foreign program" here is a listening socket in the test process that never accepts: the
kernel completes the TCP handshake, so a client connects and then waits for a Noise answer
that never comes, exactly like any other program on the port.
"""

from __future__ import annotations

import socket
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomli_w
from click.testing import CliRunner, Result

from planfence_net.cli.main import app
from planfence_net.cluster import pids as clusterlib
from planfence_net.cluster.folder import ClusterDir
from support.cluster import ClusterHandle, owner_processes, wait_exit


def run(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def one_line_error(result: Result) -> str:
    """A user error: exit 1, nothing on stdout, one line on stderr; returns the line."""
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr[len("error: ") : -1]


@pytest.fixture
def squatter(cluster_dir: ClusterHandle) -> Iterator[int]:
    """A foreign program listening on reqs' roster port; yields that port."""
    port = cluster_dir.roster.agent("reqs").port
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(8)
        yield port


def test_cluster_up_names_the_port_another_program_holds(
    cluster_dir: ClusterHandle, squatter: int
) -> None:
    line = one_line_error(run("cluster", "up", cluster_dir.path))
    assert line == (
        f"port {squatter} of reqs (127.0.0.1:{squatter}) is already in use by another program; "
        f"stop that program, or give this cluster other ports: edit "
        f"{cluster_dir.cdir.roster_path}, or make a new cluster with `planfence cluster init "
        f"NEWDIR --base-port 0` (free ports)"
    )
    assert owner_processes(str(cluster_dir.path.resolve())) == {}  # started nothing


@pytest.mark.parametrize("command", [["put", "req/x", "--body", "1"], ["heads", "req/x"]])
def test_put_and_heads_give_up_at_the_deadline(
    cluster_dir: ClusterHandle, squatter: int, command: list[str]
) -> None:
    started = time.monotonic()
    line = one_line_error(run(command[0], cluster_dir.path, *command[1:], "--deadline", "0.3"))
    assert time.monotonic() - started < 5
    assert line == (
        f"owner reqs at 127.0.0.1:{squatter} did not answer within 0.3 s "
        f"(is it running? is another program on that port?)"
    )


def test_get_names_the_owners_it_could_not_ask(cluster_dir: ClusterHandle, squatter: int) -> None:
    wanted = "ab" * 32
    line = one_line_error(run("get", cluster_dir.path, wanted, "--deadline", "0.3"))
    audit = cluster_dir.roster.agent("audit").address
    assert line == (
        f"could not ask audit, inventory, ops, planner, reqs for record {wanted} "
        f"(owner audit: cannot connect to {audit}: Connection refused)"
    )


def test_owner_serve_on_a_port_in_use(cluster_dir: ClusterHandle, squatter: int) -> None:
    line = one_line_error(run("owner", "serve", cluster_dir.path, "--agent", "reqs"))
    assert line == (
        f"port {squatter} of reqs (127.0.0.1:{squatter}) is already in use by "
        f"another program; stop that program, or serve on another address with "
        f"--listen HOST:PORT"
    )


def test_cluster_init_checks_its_ports(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        line = one_line_error(run("cluster", "init", tmp_path / "c", "--base-port", port))
    assert line == (
        f"port {port} of planner (127.0.0.1:{port}) is already in use by another "
        f"program; stop that program, or choose other ports with --base-port N "
        f"(0 picks free ports)"
    )
    assert not (tmp_path / "c" / "keys").exists()  # nothing written


def test_cluster_up_names_another_cluster_on_its_ports(
    live_cluster: ClusterHandle, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    assert run("cluster", "init", other, "--base-port", "0").exit_code == 0
    data = tomllib.loads((other / "cluster.toml").read_text())
    data["agents"][0]["address"] = live_cluster.roster.agents[0].address  # planner's port
    (other / "cluster.toml").write_text(tomli_w.dumps(data))
    pid = clusterlib.read_pid(live_cluster.cdir, "planner")
    line = one_line_error(run("cluster", "up", other))
    address = live_cluster.roster.agents[0].address
    assert line == (
        f"port {address.split(':')[1]} of planner ({address}) is already in use by owner "
        f"planner of the cluster in {live_cluster.path.resolve()} (pid {pid}); stop it "
        f"(`planfence cluster down {live_cluster.path.resolve()}`), or give this cluster other "
        f"ports: edit {ClusterDir(other).roster_path}, or make a new cluster with `planfence "
        f"cluster init NEWDIR --base-port 0` (free ports)"
    )


def test_a_failed_cluster_up_stops_the_owners_it_started(cluster_dir: ClusterHandle) -> None:
    cluster_dir.cdir.key("ops").chmod(0o644)
    line = one_line_error(run("cluster", "up", cluster_dir.path))
    assert line == (
        f"ops failed to start: key file {cluster_dir.cdir.key('ops')} is accessible by group or "
        f"others (mode 644); run: chmod 600 {cluster_dir.cdir.key('ops')} (stopped the owners "
        f"this command started: planner, reqs, inventory, audit)"  # not ops: it never came up
    )
    assert owner_processes(str(cluster_dir.path.resolve())) == {}


def test_a_process_output_file_holds_only_its_last_run(cluster_dir: ClusterHandle) -> None:
    """`cluster up` quotes the last `error:` line of an owner's output: never an old run's."""
    out = cluster_dir.cdir.out("ops")
    out.write_text("Traceback (most recent call last):\nerror: an old run\n")
    pid = clusterlib.spawn(
        cluster_dir.cdir, "ops", [sys.executable, "-c", "print('noise'); print('error: this run')"]
    )
    assert wait_exit(pid)
    clusterlib.process_alive(pid, "")  # reap the child
    assert out.read_text() == "noise\nerror: this run\n"
    assert clusterlib.last_error_line(out) == "this run"


def test_a_roster_key_that_is_not_an_ed25519_point(cluster_dir: ClusterHandle) -> None:
    text = cluster_dir.cdir.roster_path.read_text()
    data = tomllib.loads(text)
    data["agents"][1]["public_key"] = "00" * 31 + "80"
    cluster_dir.cdir.roster_path.write_text(tomli_w.dumps(data))
    try:
        line = one_line_error(run("heads", cluster_dir.path, "req/x"))
    finally:
        cluster_dir.cdir.roster_path.write_text(text)  # for the fixture's teardown
    assert line == (
        f"{cluster_dir.cdir.roster_path}: agents[1] (reqs): 'public_key' is not a "
        f"valid Ed25519 public key"
    )


def test_scenario_on_a_cluster_that_is_not_up(cluster_dir: ClusterHandle, squatter: int) -> None:
    line = one_line_error(run("scenario", cluster_dir.path))
    assert line.startswith("owner ")
    assert line in {
        f"owner {name}: cannot connect to {cluster_dir.roster.agent(name).address}: "
        f"Connection refused"
        for name in cluster_dir.roster.names
    } | {
        f"owner reqs at 127.0.0.1:{squatter} did not answer within 5 s (is it running? is "
        f"another program on that port?)"
    }
