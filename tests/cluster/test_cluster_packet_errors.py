"""`cluster up --links packet` where packet links cannot be made: one line on stderr, exit 1,
nothing started and the roster untouched. Runs anywhere (no root needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from planfence_net.cli.main import app
from planfence_net.cluster import netns
from support.cluster import ClusterHandle, owner_processes

runner = CliRunner()


def up_packet(h: ClusterHandle) -> tuple[int, str, str]:
    result = runner.invoke(
        app, ["cluster", "up", str(h.path), "--profile", "synthetic-lte", "--links", "packet"]
    )
    return result.exit_code, result.stdout, result.stderr


def test_not_root_is_one_line_and_starts_nothing(
    cluster_dir: ClusterHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    roster = (cluster_dir.path / "cluster.toml").read_text()
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    assert up_packet(cluster_dir) == (
        1,
        "",
        "error: packet-level links need root (network namespaces, TUN devices)\n",
    )
    assert owner_processes(str(cluster_dir.path.resolve())) == {}
    assert (cluster_dir.path / "cluster.toml").read_text() == roster
    assert not (cluster_dir.path / "run" / "packets.toml").exists()


def test_no_tun_device_is_one_line(
    cluster_dir: ClusterHandle, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(netns.os, "geteuid", lambda: 0)
    monkeypatch.setattr(netns.shutil, "which", lambda name: f"/usr/sbin/{name}")
    monkeypatch.setattr(netns, "TUN", tmp_path / "no-tun")
    assert up_packet(cluster_dir) == (1, "", "error: packet-level links need /dev/net/tun\n")
    assert owner_processes(str(cluster_dir.path.resolve())) == {}


def test_a_links_value_other_than_relay_or_packet_is_a_usage_error(
    cluster_dir: ClusterHandle,
) -> None:
    result = runner.invoke(app, ["cluster", "up", str(cluster_dir.path), "--links", "wire"])
    assert result.exit_code == 64
    assert "'wire' is not one of 'relay', 'packet'" in result.stderr
