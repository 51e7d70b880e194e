"""`planfence mcp proxy` in front of a real MCP server subprocess (tests/support/kv_mcp_server.py).

The test is the agent: it writes JSON-RPC lines to the proxy's stdin and reads its stdout.
Another "process" (the test, writing the database file) migrates the schema in between.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from support.cluster import PLANFENCE, REPO

SERVER = REPO / "tests" / "support" / "kv_mcp_server.py"
TIMEOUT = 10.0
V1 = {"schema": {"columns": ["id", "name"]}, "rows": {}}


class Agent:
    """The agent's side of one proxy process: numbered requests, answers matched by id."""

    def __init__(self, proc: subprocess.Popen[bytes], mode: str) -> None:
        self.proc, self.lines, self.next_id = proc, queue.Queue[dict[str, Any]](), 0
        self.mode = mode  # "subscribed" when the server offers subscriptions
        self.notifications: list[dict[str, Any]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def send(self, message: dict[str, Any] | list[Any] | bytes) -> None:
        assert self.proc.stdin is not None
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}})
        return self.answer(self.next_id)

    def answer(self, rid: Any) -> dict[str, Any]:
        while True:
            message = self.lines.get(timeout=TIMEOUT)
            if "id" in message and message["id"] == rid:
                return message
            self.notifications.append(message)

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        return self.request("tools/call", {"name": tool, "arguments": arguments})["result"]

    def read_schema(self) -> dict[str, Any]:
        result = self.request("resources/read", {"uri": "db://schema"})["result"]
        return json.loads(result["contents"][0]["text"])


@contextmanager
def proxy_session(tmp_path: Path, mode: str, *options: str) -> Iterator[tuple[Agent, Path, Path]]:
    """A real `planfence mcp proxy OPTIONS -- kv server` with the agent's side initialized:
    (agent, database file, the server's request log). The server offers subscriptions when
    `mode` is "subscribed". The proxy is stopped (its stdin closed) when the block ends."""
    db, log = tmp_path / "db.json", tmp_path / "calls.jsonl"
    db.write_text(json.dumps(V1))
    extra = ["--subscribe"] if mode == "subscribed" else []
    server = [sys.executable, str(SERVER), str(db), "--log", str(log), *extra]
    proc = subprocess.Popen(
        [str(PLANFENCE), "mcp", "proxy", "--name", "db", *options, "--", *server],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    agent = Agent(proc, mode)
    try:
        init = agent.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        )
        assert init["result"]["serverInfo"]["name"] == "kv-test"
        agent.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        yield agent, db, log
    finally:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        agent.reader.join(TIMEOUT)  # it reads to the end of the proxy's output
        proc.stdout.close()


@pytest.fixture(params=["lazy", "subscribed"])
def session(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Agent, Path, Path]]:
    """A proxy in front of the server, which offers subscriptions in the `subscribed` run."""
    with proxy_session(tmp_path, request.param, "--reads", "get_row") as found:
        yield found


def migrate(db: Path, columns: list[str]) -> None:
    data = json.loads(db.read_text())
    data["schema"]["columns"] = columns
    db.write_text(json.dumps(data))


def served(log: Path, method: str) -> int:
    return sum(json.loads(line)["method"] == method for line in log.read_text().splitlines())


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
