"""`planfence mcp proxy` registered as an MCP server in the real Claude Code.

The scripted model reads the database's schema resource through the proxy, has a shell
command (another process) migrate the schema, and calls the write tool: the proxy refuses
it with a reason naming the schema resource; the model reads the schema again and the same
call goes through.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from support.cluster import PLANFENCE, REPO

from .clients import run_claude, skip_without_clients
from .model_server import ANTHROPIC, ModelServer, Text, ToolCall

pytestmark = pytest.mark.agents
skip_without_clients()

SERVER = REPO / "tests" / "support" / "kv_mcp_server.py"
REASON = (
    "PlanFence refused put_row: this session's plan rests on db:resource/db://schema, which "
    "changed since it was read. Read it again, re-plan once, then retry; if it changes again, "
    "stop and report."
)


def tool_results(server: ModelServer) -> list[tuple[bool, str]]:
    """(is_error, text) of every tool_result the model last received, in order."""
    out = []
    for message in server.model_requests(ANTHROPIC)[-1]["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("type") == "tool_result":
                content = block["content"]
                text = (
                    content
                    if isinstance(content, str)
                    else "".join(part.get("text", "") for part in content)
                )
                out.append((bool(block.get("is_error", False)), text))
    return out


def test_claude_code_through_the_proxy(
    claude: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    db = tmp_path / "db.json"
    db.write_text(json.dumps({"schema": {"columns": ["id", "name"]}, "rows": {}}))
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "db": {
                        "command": str(PLANFENCE),
                        "args": [
                            "mcp",
                            "proxy",
                            "--name",
                            "db",
                            "--",
                            sys.executable,
                            str(SERVER),
                            str(db),
                        ],
                    }
                }
            }
        )
    )
    migrate = (
        f"{sys.executable} -c \"import json,pathlib; p=pathlib.Path('{db}'); "
        f"d=json.loads(p.read_text()); d['schema']['columns'].append('email'); "
        f'p.write_text(json.dumps(d))"'
    )
    read = ToolCall("ReadMcpResourceTool", {"server": "db", "uri": "db://schema"})
    put: dict[str, Any] = {"key": "1", "row": {"id": 1, "name": "a", "email": "a@x"}}
    turns = [
        read,
        ToolCall("Bash", {"command": migrate}),
        ToolCall("mcp__db__put_row", put),
        read,
        ToolCall("mcp__db__put_row", put),
        Text("done"),
    ]
    model_server.script(ANTHROPIC, turns)
    project = tmp_path / "project"
    project.mkdir()
    run = run_claude(
        claude,
        model_server.url,
        project,
        tmp_path / "home",
        "Add the row.",
        extra=(
            "--mcp-config",
            str(config),
            "--strict-mcp-config",
            "--allowedTools",
            "ReadMcpResourceTool,mcp__db__put_row,Bash",
        ),
    )
    assert run.returncode == 0, run.stdout + run.stderr
    results = tool_results(model_server)
    assert [error for error, _ in results] == [False, False, True, False, False], results
    assert REASON in results[2][1]
    assert "email" in results[3][1]  # the re-read saw the migration
    assert json.loads(db.read_text())["rows"] == {"1": put["row"]}
