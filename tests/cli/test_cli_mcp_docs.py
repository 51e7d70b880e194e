"""docs/MCP.md's owner-mode example runs as written: the commands of its code blocks, in a
fresh folder, with a small database server (tests/support/kv_mcp_server.py) as
`my_db_server.py`; the agent reads the schema through the proxy, and another member asks for
its head as the document shows."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from support.cluster import PLANFENCE, REPO, kill_all
from support.mcp_proxy import SERVER, TIMEOUT, V1, Agent

DOC = REPO / "docs" / "MCP.md"
SECTION = "## The server's state as an owner"


def blocks(text: str) -> list[list[str]]:
    """The lines of each fenced code block of `text` (comments after `#` dropped)."""
    found, current = [], None
    for line in text.splitlines():
        if line.startswith("```"):
            if current is not None:
                found.append(current)
            current = None if current is not None else []
        elif current is not None and line.strip():
            current.append(line.split("  #")[0].strip())
    return found


def owner_section() -> list[list[str]]:
    text = DOC.read_text()
    start = text.index(SECTION)
    return blocks(text[start : text.index("\n## ", start + len(SECTION))])


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A working folder holding `my_db_server.py`: the test server on its own database."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "db.json").write_text(json.dumps(V1))
    (work / "my_db_server.py").write_text(
        "import runpy, sys\n"
        f"sys.argv = [{str(SERVER)!r}, 'db.json']\n"
        f"runpy.run_path({str(SERVER)!r}, run_name='__main__')\n"
    )
    return work


def shell(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": f"{PLANFENCE.parent}:{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    return subprocess.run(
        ["/bin/sh", "-c", line],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT * 3,
        stdin=subprocess.DEVNULL,
    )


def test_the_owner_mode_example_runs_as_written(folder: Path) -> None:
    setup, heads = owner_section()
    *prepare, proxy = setup
    assert [line.split()[:3] for line in prepare] == [
        ["planfence", "cluster", "init"],
        ["planfence", "cluster", "add"],
    ]
    for line in prepare:
        done = shell(line, folder)
        assert done.returncode == 0, (line, done.stderr)
    assert proxy.startswith("planfence mcp proxy ") and proxy.endswith("-- python my_db_server.py")
    env = {**os.environ, "PATH": f"{PLANFENCE.parent}:{os.environ['PATH']}"}
    proc = subprocess.Popen(
        shlex.split(proxy), cwd=folder, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    agent = Agent(proc, "lazy")
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
        assert agent.read_schema() == V1["schema"]
        [line] = heads
        done = shell(line + " --json", folder)
        assert done.returncode == 0, done.stderr
        [row] = json.loads(done.stdout)
        assert (row["key"], row["owner"], row["seq"]) == ("db:resource/db://schema", "db", 1)
    finally:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        agent.reader.join(TIMEOUT)
        proc.stdout.close()
        kill_all(str(folder))
