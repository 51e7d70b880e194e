"""The real OpenCode (pinned, `scripts/install-agents`) with our plugin (`hook install
opencode`), offline: a no-drift write passes; a write after another process changed a file
the model read is blocked and the reason (naming it) arrives in the next model request; a
re-read lets the same write through. The plugin fails closed: with a hook that cannot start,
the write is blocked and the model reads why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planfence_net.workspace.installers.opencodeplugin import plugin_path

from .model_server import CHAT, ModelServer, Text, ToolCall, Turn
from .newclients import run_opencode, skip_without
from .turns import assert_scripted_and_offline, drift_turns
from .workspaces import Workspace, hook_calls_answered

pytestmark = pytest.mark.agents
skip_without("opencode")

LIB, MAIN = "def f():\n    return 1\n", "import lib\n"
CHANGED = "def f():\n    return 2\n"
WRITTEN = "import lib\nlib.f()\n"


def add_sources(ws: Workspace) -> None:
    (ws.path / "lib.py").write_text(LIB)
    (ws.path / "main.py").write_text(MAIN)
    ws.git("add", "lib.py", "main.py")
    ws.git("commit", "-q", "-m", "sources")


def tool_messages(body: dict[str, Any]) -> list[str]:
    """The tool results of a Chat Completions request, in order, as text."""
    return [json.dumps(m.get("content")) for m in body["messages"] if m.get("role") == "tool"]


def test_opencode_write_without_drift_passes(
    model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    add_sources(workspace)
    workspace.planfence("hook", "install", "opencode", "--project", workspace.path)
    lib, main = workspace.path / "lib.py", workspace.path / "main.py"
    turns: list[Turn] = [
        ToolCall("read", {"filePath": str(lib)}),
        ToolCall("write", {"filePath": str(main), "content": WRITTEN}),
        Text("done"),
    ]
    model_server.script(CHAT, turns)

    run = run_opencode(model_server.url, workspace.path, tmp_path / "home", "Use lib in main.")

    assert run.returncode == 0, run.stdout + run.stderr
    assert_scripted_and_offline(model_server, CHAT, turns)
    assert main.read_text() == WRITTEN
    # the lean hook handed every call to the owner, which answered it (its log)
    assert hook_calls_answered(workspace, "opencode") >= 2
    results = tool_messages(model_server.model_requests(CHAT)[-1])
    assert len(results) == 2 and "PlanFence" not in results[-1], results
    status = workspace.planfence("hook", "status", "opencode", "--project", workspace.path)
    assert status.stdout.startswith("opencode: active: the plugin runs the hook"), status.stdout


def test_opencode_read_drift_block_reread_write(
    model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    add_sources(workspace)
    workspace.planfence("hook", "install", "opencode", "--project", workspace.path)
    lib, main = workspace.path / "lib.py", workspace.path / "main.py"
    write = ToolCall("write", {"filePath": str(main), "content": WRITTEN})

    turns = drift_turns(ToolCall("read", {"filePath": str(lib)}), write, lib, CHANGED)
    model_server.script(CHAT, turns)

    run = run_opencode(model_server.url, workspace.path, tmp_path / "home", "Use lib in main.")

    assert run.returncode == 0, run.stdout + run.stderr
    assert_scripted_and_offline(model_server, CHAT, turns)
    requests = model_server.model_requests(CHAT)
    blocked = tool_messages(requests[2])[-1]  # the request after the write
    assert f"PlanFence blocked write of {main}: plan 'auto-" in blocked, blocked
    assert "1 previously inspected file changed: lib.py" in blocked, blocked
    assert "return 2" in tool_messages(requests[3])[-1]  # the re-read
    assert "PlanFence" not in tool_messages(requests[4])[-1]
    assert main.read_text() == WRITTEN
    # the lean hook handed every call to the owner, which answered it (its log)
    assert hook_calls_answered(workspace, "opencode") >= 2


def test_opencode_plugin_fails_closed_when_the_hook_cannot_start(
    model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    add_sources(workspace)
    workspace.planfence("hook", "install", "opencode", "--project", workspace.path)
    plugin = plugin_path(workspace.path)
    missing = str(tmp_path / "no-such-planfence")
    text = plugin.read_text()
    plugin.write_text(
        text.replace(json.loads(text.split("const COMMAND = ")[1].split("\n")[0])[0], missing)
    )
    main = workspace.path / "main.py"
    turns: list[Turn] = [
        ToolCall("write", {"filePath": str(main), "content": WRITTEN}),
        Text("done"),
    ]
    model_server.script(CHAT, turns)

    run = run_opencode(model_server.url, workspace.path, tmp_path / "home", "Write main.")

    assert run.returncode == 0, run.stdout + run.stderr
    blocked = tool_messages(model_server.model_requests(CHAT)[-1])[-1]
    assert "PlanFence blocked this call: the hook failed (exit -1" in blocked, blocked
    assert "it fails closed" in blocked
    assert main.read_text() == MAIN
