"""The agent's side of a real `planfence mcp proxy` in front of tests/support/kv_mcp_server.py.

Agent          one proxy process seen from the agent: numbered JSON-RPC requests over its
               stdin, answers matched by id, notifications kept
proxy_session  a real `planfence mcp proxy OPTIONS -- kv server`, initialized; stopped (its
               stdin closed) when the block ends, also when a test fails
migrate        another process changes the database's schema
served         how many requests for `method` the server logged
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


def migrate(db: Path, columns: list[str]) -> None:
    data = json.loads(db.read_text())
    data["schema"]["columns"] = columns
    db.write_text(json.dumps(data))


def served(log: Path, method: str) -> int:
    return sum(json.loads(line)["method"] == method for line in log.read_text().splitlines())
