"""Owners behind trace shapers: `cluster up --profile`, the delay on the wire, clean shutdown."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from planfence_net.cli.main import app
from planfence_net.cluster import processes as clusterlib
from planfence_net.net.client import open_session
from planfence_net.traces import load_profile

runner = CliRunner()
needs_traces = pytest.mark.usefixtures("mahimahi_traces")  # skips when there are none


def shaper_processes(fragment: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            if state != "Z" and " shape --listen" in cmd and fragment in cmd:
                found.append(int(entry.name))
    return found


def invoke(*args: object) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture
def shaped(cluster_dir):  # type: ignore[no-untyped-def]
    """The five owners, each behind a shaper; everything stopped afterwards."""
    ports = [str(a.port) for a in cluster_dir.roster.agents]
    try:
        yield cluster_dir
    finally:
        runner.invoke(app, ["cluster", "down", str(cluster_dir.path)])
        for pid in [p for port in ports for p in shaper_processes(f"127.0.0.1:{port}")]:
            os.kill(pid, 9)


async def ping_rtts(cluster_dir, via: dict[str, tuple[str, int]] | None, n: int = 8) -> list[float]:  # type: ignore[no-untyped-def]
    address = {"host": via["reqs"][0], "port": via["reqs"][1]} if via else {}
    rtts = []
    async with open_session(
        cluster_dir.roster, cluster_dir.identity("ops"), "reqs", **address
    ) as session:
        for _ in range(n):
            started = time.perf_counter()
            await session.request("heads", {"keys": ["req/shaped"]})
            rtts.append(time.perf_counter() - started)
    return rtts


@needs_traces
def test_put_and_heads_through_verizon_shapers_see_the_delay(shaped) -> None:  # type: ignore[no-untyped-def]
    path = shaped.path
    out = invoke("cluster", "up", path, "--profile", "verizon-lte")
    assert out.endswith("links shaped with verizon-lte\n")
    status = json.loads(invoke("cluster", "status", path, "--json"))
    assert all(row["alive"] and row["shaper"]["profile"] == "verizon-lte" for row in status)
    links = clusterlib.link_addresses(shaped.cdir)
    assert sorted(links) == sorted(shaped.roster.names)
    assert all(links[a.name] != (a.host, a.port) for a in shaped.roster.agents)

    put = json.loads(invoke("put", path, "req/shaped", "--body", '{"v": 1}', "--json"))
    heads = json.loads(invoke("heads", path, "req/shaped", "--json"))
    assert heads[0]["id"] == put["id"] and heads[0]["seq"] == 1
    # the put went through the shaper: the owner saw the shaper's connection, not ours
    delay = load_profile("verizon-lte").delay_ms / 1000
    shaped_rtts = anyio.run(ping_rtts, shaped, links)
    direct_rtts = anyio.run(ping_rtts, shaped, None)
    assert min(shaped_rtts) >= 2 * delay
    assert sorted(direct_rtts)[len(direct_rtts) // 2] < delay


@needs_traces
def test_att_lte_cluster_down_leaves_no_process(shaped) -> None:  # type: ignore[no-untyped-def]
    from support.cluster import owner_processes

    invoke("cluster", "up", shaped.path, "--profile", "att-lte")
    fragments = [f"127.0.0.1:{a.port}" for a in shaped.roster.agents]
    assert sum(len(shaper_processes(f)) for f in fragments) == 5
    out = invoke("cluster", "down", shaped.path)
    assert out == ("stopped 5 owner(s): planner, reqs, inventory, ops, audit; 5 shaper(s)\n")
    assert sum(len(shaper_processes(f)) for f in fragments) == 0
    assert owner_processes(str(shaped.path.resolve())) == {}


def test_synthetic_profile_needs_no_external_traces(shaped, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PLANFENCE_TRACES", "")
    monkeypatch.setenv("XDG_DATA_HOME", str(shaped.path / "no-data"))
    invoke("cluster", "up", shaped.path, "--profile", "synthetic-lte")
    put = json.loads(invoke("put", shaped.path, "req/synthetic", "--body", "1", "--json"))
    assert put["seq"] == 1


def test_missing_traces_fail_before_anything_starts(shaped, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PLANFENCE_TRACES", str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    result = runner.invoke(app, ["cluster", "up", str(shaped.path), "--profile", "att-lte"])
    assert result.exit_code == 1
    assert "trace 'ATT-LTE-driving.up' not found; searched:" in result.stderr
    assert "PLANFENCE_TRACES" in result.stderr
    assert not shaped.alive("reqs")
