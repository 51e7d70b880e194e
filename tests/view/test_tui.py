"""`planfence view --tui` driven by Textual's pilot, on the browser test's scenario: both
sessions listed with their worktrees and their plans' files; the block appears with its
writer session and the diff; selecting it shows the lineage; an ended session is greyed."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from rich.text import Text

from planfence_net.cluster.folder import ClusterDir
from planfence_net.view.collect import Collector
from planfence_net.view.tui import ViewApp
from support.cluster import ClusterHandle

from .scenario import (
    A,
    B,
    C,
    block_line,
    end_session,
    executor_replans,
    installed,
    step_drift,
    step_read_only,
    step_reads,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def until(pilot: object, ready: Callable[[], bool], within: float = 15.0) -> None:
    """Let the app run until `ready()` holds; fails after `within` seconds."""
    deadline = time.monotonic() + within
    while not ready():
        assert time.monotonic() < deadline, "the TUI never showed it"
        await pilot.pause(0.05)  # type: ignore[attr-defined]


def cells(app: ViewApp, table: str, key: str) -> list[str]:
    from textual.widgets import DataTable

    widget = app.query_one(f"#{table}", DataTable)
    try:
        return [str(c) for c in widget.get_row(key)]
    except Exception:  # not there yet (RowDoesNotExist)
        return []


def style_of(app: ViewApp, table: str, key: str, column: int) -> str:
    from textual.widgets import DataTable

    cell = app.query_one(f"#{table}", DataTable).get_row(key)[column]
    return str(cell.style) if isinstance(cell, Text) else ""


def heads_requests(cluster: Path, peer: str) -> int:
    """How many `heads` requests of `peer` the owners' logs hold."""
    count = 0
    for log in (cluster / "logs").glob("*.jsonl"):
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            count += (
                entry.get("event") == "request"
                and entry.get("op") == "heads"
                and entry.get("peer") == peer
            )
    return count


async def test_the_tui_shows_the_team_live(tmp_path: Path) -> None:
    with installed(tmp_path) as team:
        await anyio.to_thread.run_sync(step_reads, team)
        app = ViewApp(Collector(ClusterDir(team.cluster)))
        async with app.run_test(size=(220, 60)) as pilot:
            await until(pilot, lambda: cells(app, "sessions", A) and cells(app, "sessions", B))
            await until(pilot, lambda: cells(app, "sessions", A)[2] == "main")
            assert cells(app, "sessions", A)[:2] == ["working", "api"]
            assert cells(app, "sessions", B)[:3] == ["working", "web", "web"]
            plans = {row["session"]: row for row in app.rows["plan"].values()}
            await until(pilot, lambda: bool(app.rows["plan"]) and all(
                p["reads"] for p in app.rows["plan"].values()
            ))  # fmt: skip
            plans = {row["session"]: row for row in app.rows["plan"].values()}
            assert plans[A]["reads"] == ["api:file/src/lib.py"]
            assert plans[A]["targets"] == ["api:file/src/other.py"]
            assert plans[B]["reads"] == ["web:file/src/other.py"]

            await anyio.to_thread.run_sync(step_drift, team)
            block = await anyio.to_thread.run_sync(block_line, team)
            key = f"{block['plan']}@{block['ts']}"
            await until(pilot, lambda: B[:8] in "".join(cells(app, "blocks", key)))
            assert cells(app, "blocks", key)[1] == "Write of src/other.py"
            assert "bold" in style_of(app, "blocks", key, 1)
            await until(pilot, lambda: cells(app, "sessions", A)[0] == "blocked")
            assert "red" in style_of(app, "sessions", A, 0)
            await until(pilot, lambda: "blocked" in cells(app, "owners", "planner")[5])
            assert cells(app, "owners", "planner")[5] == f"{block['plan']} blocked relevant"
            assert cells(app, "owners", "api")[3].startswith("api:")

            # The hook's validations (it asks as the planner): every heads request it made.
            asked = await anyio.to_thread.run_sync(heads_requests, team.cluster, "planner")
            await until(pilot, lambda: cells(app, "executors", "planner")[1:2] == [str(asked)])
            validations = cells(app, "executors", "planner")
            assert int(validations[2]) >= 1  # its keys moved between its looks (A's plan grew)
            assert " seq " in validations[4] and "->" in validations[4]

            # Select the block: its writer, the diff and the lineage graph.
            blocks = app.query_one("#blocks")
            blocks.focus()
            await pilot.press("enter")
            await until(pilot, lambda: app.shown_plan == block["plan"])
            detail = str(app.query_one("#detail").render())
            assert f"src/lib.py: written by session {B} of claude in {team.web}" in detail
            assert "-v = 1\n+v = 2" in detail  # B's change, as the hook diffed it
            graph = str(app.query_one("#lineage").render())
            assert f"lineage of {block['plan']}" in graph
            assert "api:file/src/lib.py" in graph and "STALE" in graph and "head now:" in graph

            await anyio.to_thread.run_sync(end_session, team, team.web, B)
            await until(pilot, lambda: cells(app, "sessions", B)[:1] == ["ended"])
            assert style_of(app, "sessions", B, 0) == "grey50"

            # A session that only read greys when it ends, its client named by its end.
            await anyio.to_thread.run_sync(step_read_only, team)
            await until(pilot, lambda: cells(app, "sessions", C)[:2] == ["working", "web"])
            await anyio.to_thread.run_sync(end_session, team, team.web, C)
            await until(pilot, lambda: cells(app, "sessions", C)[:1] == ["ended"])
            assert cells(app, "sessions", C)[4] == "claude"
            assert style_of(app, "sessions", C, 0) == "grey50"
            await pilot.press("q")


async def test_the_tui_shows_an_executors_replan_and_the_writer_of_its_drift(
    live_cluster: ClusterHandle,
) -> None:
    app = ViewApp(Collector(ClusterDir(live_cluster.path), fetch=False))
    async with app.run_test(size=(260, 60)) as pilot:
        await until(pilot, lambda: cells(app, "owners", "reqs") != [])  # the logs are followed
        done = await executor_replans(live_cluster)  # while the TUI runs: it comes in live
        await until(pilot, lambda: cells(app, "executors", "ops")[5:6] == ["1"])
        row = cells(app, "executors", "ops")
        stall = done.run.stall * 1000
        assert (
            row[5:]
            == [
                "1",  # decisions
                "1",  # authorized
                "0",  # blocked
                "1",  # replanned
                f"ship authorized, replanned onto {done.new_plan.id.hex()[:10]}",
                f"ship: req/order seq {done.r3.seq}->{done.r4.seq} by reqs",
                f"{round(stall, 3):.1f} ms",
            ]
        )
        await pilot.press("q")
