"""scripts/bench-growth --quick: every curve on tiny sizes, so the script cannot rot.

Runs the real script (owners on 127.0.0.1, started and stopped by it; etcd too when the
binary and aetcd are here, skipped with one line otherwise) and checks each curve's rows:
the points asked for, in order, with every figure measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planfence_net.bench.perf import etcd as etcdlib
from planfence_net.bench.perf.growth import Sizes
from support.cluster import REPO

pytestmark = pytest.mark.slow


def test_quick_run_measures_every_curve(tmp_path: Path) -> None:
    out, plots = tmp_path / "growth.json", tmp_path / "plots"
    env = {**os.environ, "PLANFENCE_BENCH_READY": "1"}  # no installs from a test
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "bench-growth"),
            "--quick",
            "--repeat",
            "2",
            "--json",
            str(out),
            "--plots",
            str(plots),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    quick = Sizes.quick()
    data = json.loads(out.read_text())
    assert list(data) == ["keys", "spans", "executors", "machine", "history"]
    etcd_here = etcdlib.missing() is None
    if not etcd_here:
        # keys, spans and executors say why
        assert proc.stderr.count(etcdlib.missing() or "") == 3

    keys = data["keys"]["rows"]
    assert [r["d"] for r in keys] == list(quick.keys)
    for row in keys:
        assert 0 < row["p50_us"] <= row["p99_us"] and row["bytes"] > 0 and row["client_cpu_us"] > 0
        assert (row["etcd_p50_us"] is not None) == etcd_here
        # only d above etcd's default --max-txn-ops needs several Txns
        assert (row["etcd_split_p50_us"] is not None) == (etcd_here and row["d"] > 128)
    assert keys[0]["bytes"] < keys[1]["bytes"] < keys[2]["bytes"]

    spans = data["spans"]["rows"]
    assert [(r["owners"], r["d"]) for r in spans] == [(k, quick.span_keys) for k in quick.spans]
    assert spans[0]["bytes"] < spans[1]["bytes"]  # more owners, more framing and headers
    for row in spans:  # etcd's Txn on the same keys, in the same rounds
        assert (row["etcd_p50_us"] is not None) == (row["ratio_p50"] is not None) == etcd_here
        # the fan-out floor: as many bare servers as owners, asked at once, in the same rounds
        assert 0 < row["floor_p50_us"] and row["floor_cpu_us"] is not None
        assert (row["floor_x_etcd"] is not None) == etcd_here
        assert row["owner_cpu_us"] >= 0  # the owners' processes, summed (in clock ticks)

    executors = data["executors"]["rows"]  # each point in both process layouts
    expected = [(c, layout) for c in quick.executors for layout in ("4p", "8p")]
    assert [(r["executors"], r["layout"]) for r in executors] == expected
    for row in executors:
        assert row["decisions_per_s"] > 0 and row["owner_cpu"] > 0
        assert row["client_cpu_us"] > 0 and row["owner_cpu_us"] > 0
        assert row["cores"] > row["owner_cpu"] and 0 <= row["idle"] <= 1
        assert ("etcd_txns_per_s" in row) == etcd_here
        assert ("etcd_cores" in row) == ("etcd_idle" in row) == etcd_here
        assert ("etcd_client_cpu_us" in row) == etcd_here
        # two runs a side, alternating: each pair's ratio, the lowest and the median
        assert ("ratio_median" in row) == etcd_here
        if etcd_here:
            ratios = [float(r) for r in row["ratios"].split()]
            assert len(ratios) == 2 and row["ratio_min"] == pytest.approx(min(ratios), 0.01)
            assert 0 < row["ratio_min"] <= row["ratio_median"] and row["server_cpu_ratio"] > 0
            assert proc.stderr.count(f"executors: {row['executors']} in layout ") >= 2

    machine = data["machine"]["rows"]
    assert [r["owners"] for r in machine] == list(quick.machine)
    assert machine[0]["cluster_up_s"] > 0 and 5 < machine[0]["idle_rss_mib"] < 500

    history = data["history"]["rows"]
    assert [(r["records"], r["keys"]) for r in history] == [(300, 30)]
    assert history[0]["puts_per_s"] > 0 and 50 < history[0]["bytes_per_record"] < 5000
    # heads one in flight a session, then 8 sent in one write: every answer checked
    assert history[0]["heads_8_per_s"] > 0 and history[0]["heads_8_owner_us"] > 0
    assert history[0]["heads_owner_us"] > 0
    # `owner compact --keep 1`: one record a key, the 30 built and the 16 x 8 keys of the
    # put load (bench/perf/load.py)
    assert history[0]["compacted_to"] == 30 + 16 * 8

    assert sorted(p.name for p in plots.iterdir()) == [
        f"growth-{name}.png" for name in sorted(data)
    ]
    for name in data:
        assert f"### {name} (load " in proc.stdout
