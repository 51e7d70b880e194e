"""What an executor decided, end to end on five real owners on 127.0.0.1: its `gate` lines in
its decision log (`executor.decisionlog`), `planfence view --json` (the executor row: the
replan and the writer of the drift) and `planfence logs` (following a log that appears after it
started, merged, by agent, `--event gate`);
`planfence authorize` logs its decisions too, on both of its paths."""

from __future__ import annotations

import json
import re
import select
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from support.cluster import PLANFENCE, ClusterHandle
from support.workspace import run_cli, stop

from .scenario import DEPS, Replanned, executor_replans

pytestmark = pytest.mark.slow
STAMP = r"\d\d:\d\d:\d\d\.\d{3}"


def gate_lines(cluster: Path, executor: str = "ops") -> list[dict[str, Any]]:
    log = cluster / "logs" / "executors" / f"{executor}.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()]


def expected_line(done: Replanned) -> dict[str, Any]:
    """The executor's line for `done`, as its decision log must have written it."""
    d = done.run.decision
    return {
        "agent": "ops",
        "event": "gate",
        "action": "ship",
        "outcome": "authorized",
        "reason": None,
        "detail": d.detail,
        "drift": [
            {"key": "req/order", "from": done.r3.id.hex(), "to": done.r4.id.hex(), "owner": "reqs"}
        ],
        "replanned": True,
        "roots": [done.plan.id.hex()],
        "new_roots": [done.new_plan.id.hex()],
        "rounds": d.round_trips,
        "stall_ms": round(done.run.stall * 1000, 3),
        "bytes": d.bytes_sent + d.bytes_received,
    }


def test_a_replanned_decision_is_in_its_log_the_view_and_planfence_logs(
    live_cluster: ClusterHandle,
) -> None:
    follow = subprocess.Popen(  # started before the executor has a log: it follows it
        [str(PLANFENCE), "logs", str(live_cluster.path), "--follow", "--event", "gate", "--json"],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        done = anyio.run(executor_replans, live_cluster)
        assert done.run.decision.round_trips >= 2  # the drifting round, the one after the replan
        (line,) = gate_lines(live_cluster.path)
        assert {k: v for k, v in line.items() if k != "ts"} == expected_line(done)
        assert follow.stdout is not None
        ready, _, _ = select.select([follow.stdout], [], [], 15.0)
        assert ready, "planfence logs --follow never printed the executor's line"
        assert json.loads(follow.stdout.readline()) == line
    finally:
        stop(follow)

    code, out, err = run_cli("view", "--cluster", live_cluster.path, "--json", "--once")
    assert (code, err) == (0, "")
    rows = [json.loads(row) for row in out.splitlines()]
    (ops,) = [r for r in rows if r["type"] == "executor" and r["id"] == "ops"]
    counts = ("decisions", "authorized", "blocked", "replanned", "last_stall_ms")
    assert {k: ops[k] for k in counts} == {
        "decisions": 1,
        "authorized": 1,
        "blocked": 0,
        "replanned": 1,
        "last_stall_ms": line["stall_ms"],
    }
    assert ops["validations"] >= 2  # the owners' side of the same decision: its heads requests
    assert ops["decided"][-1]["new_roots"] == [done.new_plan.id.hex()]
    assert ops["last_drift"]["drift"] == [
        {
            "key": "req/order",
            "from": done.r3.id.hex(),
            "to": done.r4.id.hex(),
            "owner": "reqs",  # who wrote the head the plan had not seen
            "from_seq": done.r3.seq,
            "to_seq": done.r4.seq,
        }
    ]
    assert not [r for r in rows if r["type"] == "owner" and r["id"] == "ops" and r["puts"]]

    code, out, err = run_cli("logs", live_cluster.path, "--event", "gate", "--json")
    assert (code, err) == (0, "")
    assert [json.loads(row) for row in out.splitlines()] == [line]
    code, out, err = run_cli("logs", live_cluster.path)  # every log merged, as text
    assert code == 0, err
    (text,) = [row for row in out.splitlines() if " gate " in row]
    assert re.fullmatch(
        rf"ops {{7}}{STAMP} gate {{14}}action=ship outcome=authorized reason=None detail=.* "
        rf"drift=\[\{{'key': 'req/order', 'from': '{done.r3.id.hex()}', "
        rf"'to': '{done.r4.id.hex()}', 'owner': 'reqs'\}}\] replanned=True "
        rf"roots=\[{done.plan.id.hex()[:16]}\] new_roots=\[{done.new_plan.id.hex()[:16]}\] "
        rf"rounds={line['rounds']} stall_ms=[\d.]+ bytes={line['bytes']}",
        text,
    ), text
    code, out, err = run_cli("logs", live_cluster.path, "ops", "--event", "gate")  # one agent
    assert code == 0, err
    assert len(out.splitlines()) == 1 and " gate " in out

    # `planfence authorize` on the stale plan, one-shot and through click: both log the block
    for root in (done.plan.id.hex(), done.plan.id.hex()[:16]):  # a prefix goes to click
        deps = [arg for dep in DEPS for arg in ("--dep", dep)]
        argv = ["authorize", str(live_cluster.path), "--root", root, *deps, "--as", "ops"]
        proc = subprocess.run(
            [str(PLANFENCE), *argv, "--name", f"ship-{len(root)}"],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == 2, proc.stdout + proc.stderr  # stale plan
    blocked = gate_lines(live_cluster.path)[1:]
    assert [(b["action"], b["outcome"], b["reason"], b["replanned"]) for b in blocked] == [
        ("ship-64", "blocked", "stale_plan", False),
        ("ship-16", "blocked", "stale_plan", False),
    ]
    for b in blocked:
        assert b["drift"] == line["drift"] and b["new_roots"] == []
        assert b["roots"] == [done.plan.id.hex()]
