"""The real Gemini CLI (pinned, `scripts/install-agents`) behind `hook install gemini`, offline.

A no-drift write passes; the model reads lib.py, another process changes lib.py, the model's
write to main.py is blocked and the reason (naming lib.py) arrives in the next model request;
the model reads lib.py again and the same write runs. The change is made while the scripted
model endpoint builds the turn that asks for the write (a `Reply`), so it lands after the
read and before the write's BeforeTool hook, every run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .model_server import GEMINI, ModelServer, Text, ToolCall, Turn
from .newclients import run_gemini, skip_without
from .turns import assert_scripted_and_offline, drift_turns
from .workspaces import Workspace, hook_calls_answered

pytestmark = pytest.mark.agents
skip_without("gemini")

LIB, MAIN = "def f():\n    return 1\n", "import lib\n"
CHANGED = "def f():\n    return 2\n"
WRITTEN = "import lib\nlib.f()\n"


def add_sources(ws: Workspace) -> None:
    (ws.path / "lib.py").write_text(LIB)
    (ws.path / "main.py").write_text(MAIN)
    ws.git("add", "lib.py", "main.py")
    ws.git("commit", "-q", "-m", "sources")


def function_responses(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The `functionResponse` parts of a Gemini API request, in order."""
    return [
        part["functionResponse"]
        for content in body["contents"]
        for part in content.get("parts", [])
        if "functionResponse" in part
    ]


def install_gemini(ws: Workspace) -> None:
    ws.planfence("hook", "install", "gemini", "--project", ws.path)
    settings = json.loads((ws.path / ".gemini" / "settings.json").read_text())
    assert [g["hooks"][0]["name"] for g in settings["hooks"]["BeforeTool"]] == ["planfence"]


def test_gemini_write_without_drift_passes(
    model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    add_sources(workspace)
    install_gemini(workspace)
    lib, main = workspace.path / "lib.py", workspace.path / "main.py"
    turns: list[Turn] = [
        ToolCall("read_file", {"file_path": str(lib)}),
        ToolCall("write_file", {"file_path": str(main), "content": WRITTEN}),
        Text("done"),
    ]
    model_server.script(GEMINI, turns)

    run = run_gemini(model_server.url, workspace.path, tmp_path / "home", "Use lib in main.")

    assert run.returncode == 0, run.stdout + run.stderr
    assert_scripted_and_offline(model_server, GEMINI, turns)
    assert main.read_text() == WRITTEN
    # the lean hook handed every call to the owner, which answered it (its log)
    assert hook_calls_answered(workspace, "gemini") >= 2
    last = function_responses(model_server.model_requests(GEMINI)[-1])
    assert "blocked" not in json.dumps(last[-1]), last[-1]
    home = {"HOME": str(tmp_path / "home")}  # the trust the run recorded, as the user's
    status = workspace.planfence("hook", "status", "gemini", "--project", workspace.path, env=home)
    assert status.stdout.startswith("gemini: active: the command runs; Gemini CLI has no "), (
        status.stdout
    )


def test_gemini_read_drift_block_reread_write(
    model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    add_sources(workspace)
    install_gemini(workspace)
    lib, main = workspace.path / "lib.py", workspace.path / "main.py"
    write = ToolCall("write_file", {"file_path": str(main), "content": WRITTEN})

    turns = drift_turns(ToolCall("read_file", {"file_path": str(lib)}), write, lib, CHANGED)
    model_server.script(GEMINI, turns)

    run = run_gemini(model_server.url, workspace.path, tmp_path / "home", "Use lib in main.")

    assert run.returncode == 0, run.stdout + run.stderr
    assert_scripted_and_offline(model_server, GEMINI, turns)
    requests = model_server.model_requests(GEMINI)
    blocked = json.dumps(function_responses(requests[2])[-1])  # the request after the write
    assert f"PlanFence blocked write_file of {main}: plan 'auto-" in blocked, blocked
    assert "1 previously inspected file changed: lib.py" in blocked, blocked
    assert "return 2" in json.dumps(function_responses(requests[3])[-1])  # the re-read
    assert "blocked" not in json.dumps(function_responses(requests[4])[-1])
    assert main.read_text() == WRITTEN
    # the lean hook handed every call to the owner, which answered it (its log)
    assert hook_calls_answered(workspace, "gemini") >= 2
