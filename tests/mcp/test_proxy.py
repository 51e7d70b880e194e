"""`planfence mcp proxy` in front of a real MCP server subprocess (tests/support/kv_mcp_server.py).

The test is the agent: it writes JSON-RPC lines to the proxy's stdin and reads its stdout.
Another "process" (the test, writing the database file) migrates the schema in between.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cluster import REPO
from support.mcp_proxy import Agent, migrate, proxy_session, served


@pytest.fixture(params=["lazy", "subscribed"])
def session(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Agent, Path, Path]]:
    """A proxy in front of the server, which offers subscriptions in the `subscribed` run."""
    with proxy_session(tmp_path, request.param, "--reads", "get_row") as found:
        yield found


def test_a_write_after_a_migration_is_refused_until_the_schema_is_read_again(session) -> None:  # type: ignore[no-untyped-def]
    agent, db, log = session
    assert agent.read_schema() == {"columns": ["id", "name"]}
    assert agent.call("put_row", key="1", row={"id": 1, "name": "a"}) == {
        "content": [{"type": "text", "text": "stored"}]
    }
    migrate(db, ["id", "name", "email"])  # another process changes what the plan rests on
    refused = agent.call("put_row", key="2", row={"id": 2, "name": "b"})
    assert refused == {
        "content": [
            {
                "type": "text",
                "text": (
                    "PlanFence refused put_row: this session's plan rests on db:resource/db://schema, "
                    "which changed since it was read. Read it again, re-plan once, then retry; if it "
                    "changes again, stop and report."
                ),
            }
        ],
        "isError": True,
    }
    assert "2" not in json.loads(db.read_text())["rows"]  # the server never saw the call
    assert agent.read_schema() == {"columns": ["id", "name", "email"]}  # the replan's read
    stored = agent.call("put_row", key="2", row={"id": 2, "name": "b", "email": "b@x"})
    assert stored == {"content": [{"type": "text", "text": "stored"}]}
    migrate(db, ["id"])  # changed again after the re-read: the one replan is spent
    again = agent.call("put_row", key="3", row={"id": 3})
    assert again["isError"] is True
    assert again["content"][0]["text"].startswith(
        "PlanFence refused put_row: db:resource/db://schema changed again after this session "
        "read it anew. Stop"
    )
    assert served(log, "tools/call") == 2


def test_every_write_reads_what_the_session_read_again(session) -> None:  # type: ignore[no-untyped-def]
    """A subscription's notice comes after the change, so it never replaces the re-read."""
    agent, db, log = session
    agent.read_schema()
    assert agent.call("get_row", key="nope") == {"content": [{"type": "text", "text": "null"}]}
    agent.call("put_row", key="1", row={"id": 1, "name": "a"})
    agent.call("put_row", key="2", row={"id": 2, "name": "b"})
    assert served(log, "resources/read") == 1 + 2  # the agent's read, one per write check
    assert served(log, "tools/call") == 1 + 2 + 2  # get_row, called again per check, 2 writes
    assert served(log, "resources/subscribe") == (1 if agent.mode == "subscribed" else 0)
    migrate(db, ["id", "name", "email"])
    assert agent.call("put_row", key="3", row={"id": 3, "name": "c"})["isError"] is True
    assert agent.notifications == []  # the proxy's own subscription is not the agent's


def test_what_the_proxy_cannot_read_is_refused_not_forwarded(session) -> None:  # type: ignore[no-untyped-def]
    agent, db, log = session
    agent.send(b"{not json")
    assert agent.answer(None)["error"]["code"] == -32700
    agent.send(
        [
            {
                "jsonrpc": "2.0",
                "id": "b1",
                "method": "resources/read",
                "params": {"uri": "db://schema"},
            }
        ]
    )  # a batch is taken apart
    agent.answer("b1")
    migrate(db, ["x"])
    agent.send(
        [
            {
                "jsonrpc": "2.0",
                "id": "b2",
                "method": "tools/call",
                "params": {"name": "put_row", "arguments": {"key": "k", "row": {"x": 1}}},
            }
        ]
    )
    assert agent.answer("b2")["result"]["isError"] is True  # a write cannot hide in a batch
    assert served(log, "tools/call") == 0


def test_the_proxy_benchmark_runs() -> None:
    """scripts/bench-mcp (figures in docs/PERFORMANCE.md) still runs end to end."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench-mcp"), "--runs", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("planfence mcp proxy, 3 requests of each kind, load ")
    assert [line.split("  ")[0] for line in lines[2:5]] == [
        "ping (forwarded)",
        "resources/read (recorded)",
        "put_row (checked)",
    ]
    assert lines[5].startswith("a forwarded call costs ")
