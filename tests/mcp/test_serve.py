"""`planfence mcp serve` as a real process over stdio, against a real `workspace serve` owner.

The test is the agent: JSON-RPC lines to the server's stdin, answers read from its stdout.
What the tools answer is compared with what the shell commands print for the same state.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from planfence_net.mcp.serve import person_only
from support.cluster import PLANFENCE
from support.workspace import make_repo, payload, run_cli, run_hook, served, stop, write

TIMEOUT = 30.0
TOOLS = {"check", "trust", "heads", "plans", "history"}


class Client:
    """The agent's side of one `planfence mcp serve`: numbered requests, answers by id."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc, self.lines, self.next_id = proc, queue.Queue[dict[str, Any]](), 0
        threading.Thread(target=self._read, daemon=True).start()
        init = self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        )
        assert init["result"]["serverInfo"]["name"] == "planfence", init
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            message = self.lines.get(timeout=TIMEOUT)
            if message.get("id") == self.next_id:
                return message

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """The tool's structured answer; fails the test on a tool error."""
        result = self.request("tools/call", {"name": tool, "arguments": arguments})["result"]
        assert not result.get("isError"), result
        structured: dict[str, Any] = result["structuredContent"]
        return structured

    def error(self, tool: str, **arguments: Any) -> str:
        """The text of the tool error the call must end in."""
        result = self.request("tools/call", {"name": tool, "arguments": arguments})["result"]
        assert result.get("isError") is True, result
        text: str = result["content"][0]["text"]
        return text


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    """A git worktree served by `planfence workspace serve` (agent `ws`)."""
    root = make_repo(tmp_path / "repo", {"src/a.py": "a = 1\n", "src/b.py": "b = 1\n"})
    with served(root):
        yield root


@pytest.fixture
def client(repo: Path) -> Iterator[Client]:
    """`planfence mcp serve` started in the worktree, finding its cluster as the hook does."""
    proc = subprocess.Popen(
        [str(PLANFENCE), "mcp", "serve"],
        cwd=repo,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield Client(proc)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the client leaves: the server ends on its own
        assert proc.wait(timeout=TIMEOUT) == 0, proc.stderr.read() if proc.stderr else ""
        stop(proc)
        if proc.stderr is not None:
            proc.stderr.close()


def test_tools_have_schemas(client: Client) -> None:
    tools = {t["name"]: t for t in client.request("tools/list", {})["result"]["tools"]}
    assert set(tools) == TOOLS
    trust = tools["trust"]["inputSchema"]
    assert trust["required"] == ["plan"]
    assert set(trust["properties"]) == {
        "plan",
        "read",
        "target",
        "new",
        "lockfiles",
        "session",
        "agent",
        "fresh",
        "narrow",
        "make_current",
    }
    assert trust["properties"]["lockfiles"]["enum"] == ["auto", "none"]
    assert tools["heads"]["inputSchema"]["required"] == ["keys"]
    assert tools["heads"]["inputSchema"]["properties"]["keys"]["type"] == "array"
    assert tools["history"]["inputSchema"]["required"] == ["key"]
    assert "required" not in tools["check"]["inputSchema"]
    assert tools["plans"]["inputSchema"]["properties"] == {}


def test_trust_check_drift_heads_history(client: Client, repo: Path) -> None:
    trusted = client.call("trust", plan="fix", read=["src/a.py"], target=["src/b.py"])
    assert (trusted["plan"], trusted["key"], trusted["trust"]) == ("fix", "plan/fix", 1)
    assert trusted["declaration"]["ws:file/src/a.py"] == ["read"]
    assert trusted["declaration"]["ws:file/src/b.py"] == ["target"]
    assert trusted["current"] == "fix"

    clean = client.call("check", plan="fix")
    assert (clean["class"], clean["exit_code"], clean["reread"]) == ("none", 0, [])
    code, out, _ = run_cli("workspace", "check", "fix", cwd=repo)
    assert (code, clean["text"]) == (0, out.splitlines())

    write(repo, {"src/a.py": "a = 2\n"})  # another agent changes a file the plan read
    stale = client.call("check", session="s1")  # a session without its own: the current plan
    assert (stale["plan"], stale["class"], stale["exit_code"]) == ("fix", "relevant", 2)
    assert stale["reread"] == ["src/a.py"]
    code, out, _ = run_cli("workspace", "check", "fix", cwd=repo)
    assert (code, stale["text"]) == (2, out.splitlines())
    assert stale["text"][-1] == "Drift class: relevant"

    rows = client.call("heads", keys=["plan/fix", "plan/never"])["heads"]
    assert rows == [
        {"key": "plan/fix", "owner": "ws", "id": trusted["id"], "seq": trusted["seq"]},
        {"key": "plan/never", "owner": "ws", "id": None, "seq": 0},
    ]

    events = client.call("history", key="plan/fix")["events"]
    assert [(e["event"], e["id"], e["kind"]) for e in events] == [("put", trusted["id"], "plan")]

    assert client.call("plans") == {
        "cluster": str(repo / ".planfence"),
        "current": "fix",
        "shared": ["fix"],
        "sessions": {},
        "agents": {},
    }


@pytest.mark.parametrize("flag", ["fresh", "narrow", "make_current"])
def test_person_flags_refused_in_the_hooks_words(client: Client, repo: Path, flag: str) -> None:
    text = client.error("trust", plan="fix", read=["src/a.py"], **{flag: True})
    cli_flag = "--" + flag.replace("_", "-")
    assert text == f"Error executing tool trust: {person_only(cli_flag)}"
    command = f"planfence workspace trust fix --read src/a.py {cli_flag}"
    code, err = run_hook("claude", payload("claude-bash", repo, command=command))
    assert (code, err.partition("`: ")[2]) == (2, text.partition("trust tool: ")[2] + "\n")
    assert client.call("heads", keys=["plan/fix"])["heads"][0]["id"] is None  # nothing written


def test_trust_limits_are_the_commands(client: Client, repo: Path) -> None:
    for arguments, cli in (
        ({}, []),
        ({"read": ["src/gone.py"]}, ["--read", "src/gone.py"]),
        ({"new": ["src/a.py"]}, ["--new", "src/a.py"]),
        ({"read": ["../outside.py"]}, ["--read", "../outside.py"]),
    ):
        text = client.error("trust", plan="fix", **arguments)
        code, out, err = run_cli("workspace", "trust", "fix", *cli, cwd=repo)
        assert (code, out) == (1, "")
        assert text == f"Error executing tool trust: {err.removeprefix('error: ').strip()}"
    client.call("trust", plan="fix", read=["src/a.py"], target=["src/b.py"])
    narrower = client.error("trust", plan="fix", read=["src/a.py"])  # the replan drops b.py
    assert "would declare less than its trusted state: ws:src/b.py (target)" in narrower


def test_without_sdk_one_line(tmp_path: Path) -> None:
    code = "import sys; sys.modules['mcp'] = None; from planfence_net.cli import main; main()"
    proc = subprocess.run(
        [sys.executable, "-c", code, "mcp", "serve"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=tmp_path,
    )
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (
        "error: planfence mcp serve needs the MCP SDK: install the wheel with its mcp extra "
        "(README, Install), or pip install 'mcp>=2.0,<3' where planfence runs\n"
    )


def test_bad_cluster_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(PLANFENCE), "mcp", "serve", "--cluster", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == f"error: no roster at {tmp_path / 'cluster.toml'}\n"
