"""Automatic mode inside the real Claude Code and Codex CLIs: no `workspace trust` anywhere.

The model reads lib.py, another process changes lib.py, the model's write to main.py is
blocked naming lib.py; the model reads lib.py again and the same write runs. The change is
made while the scripted model endpoint builds the turn that asks for the write (a `Reply`),
so it lands after the read and before the write's PreToolUse, every run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planfence_net.workspace.hook.auto import CONTEXT

from .clients import run_claude, run_codex, skip_without_clients
from .model_server import ANTHROPIC, OPENAI, ApplyPatch, ModelServer, Reply, Text, ToolCall, Turn
from .turns import (
    assert_scripted_and_offline,
    claude_tool_results,
    codex_call_outputs,
    content_text,
    trust_codex_hooks,
)
from .workspaces import Workspace

pytestmark = pytest.mark.agents
skip_without_clients()

LIB, MAIN = "def f():\n    return 1\n", "import lib\n"
CHANGED = "def f():\n    return 2\n"


def add_sources(ws: Workspace) -> None:
    (ws.path / "lib.py").write_text(LIB)
    (ws.path / "main.py").write_text(MAIN)
    ws.git("add", "lib.py", "main.py")
    ws.git("commit", "-q", "-m", "sources")


def change_lib_then(ws: Workspace, turn: ToolCall | ApplyPatch) -> Reply:
    """Another process changes lib.py; then the model asks for `turn`."""

    def make(body: dict[str, Any]) -> ToolCall:
        (ws.path / "lib.py").write_text(CHANGED)
        assert isinstance(turn, ToolCall)
        return turn

    return Reply(make)


def no_trust_anywhere(ws: Workspace, server: ModelServer, api: str) -> None:
    """No plan was trusted (no session binding, no current plan) and no tool call asked for one."""
    assert not (ws.path / ".planfence" / "workspace.json").exists()
    assert "workspace trust" not in json.dumps(server.model_requests(api)[-1])


def test_claude_read_drift_block_reread_write(
    claude: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    add_sources(workspace)
    workspace.planfence("hook", "install", "claude", "--project", workspace.path, "--command")
    lib, main = workspace.path / "lib.py", workspace.path / "main.py"
    write = ToolCall("Write", {"file_path": str(main), "content": "import lib\nlib.f()\n"})
    turns: list[Turn] = [
        ToolCall("Read", {"file_path": str(lib)}),
        change_lib_then(workspace, write),
        ToolCall("Read", {"file_path": str(lib)}),
        write,
        Text("done"),
    ]
    model_server.script(ANTHROPIC, turns)

    run = run_claude(
        claude, model_server.url, workspace.path, tmp_path / "home", "Use lib in main."
    )

    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads(run.stdout)["result"] == "done"
    assert_scripted_and_offline(model_server, ANTHROPIC, turns)
    results = claude_tool_results(model_server)
    assert [r.get("is_error", False) for r in results] == [False, True, False, False]
    reason = content_text(results[1]["content"])
    assert f"PlanFence blocked Write of {main}: plan 'auto-" in reason, reason
    assert "- 1 previously inspected file changed: lib.py\nRe-read lib.py " in reason, reason
    assert CHANGED.splitlines()[1] in content_text(results[2]["content"])  # the re-read
    assert main.read_text() == "import lib\nlib.f()\n"
    first = json.dumps(model_server.model_requests(ANTHROPIC)[0])
    assert json.dumps(CONTEXT)[1:-1] in first  # SessionStart told the model
    no_trust_anywhere(workspace, model_server, ANTHROPIC)


PATCH = "*** Begin Patch\n*** Update File: main.py\n@@\n-import lib\n+import lib\n+lib.f()\n*** End Patch\n"


def test_codex_cat_drift_block_recat_patch(
    codex: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    add_sources(workspace)
    home, codex_home = tmp_path / "home", tmp_path / "codex-home"
    trust_codex_hooks(codex, model_server, workspace, home, codex_home)
    main = workspace.path / "main.py"

    def change_then_patch(body: dict[str, Any]) -> Any:
        (workspace.path / "lib.py").write_text(CHANGED)
        return ApplyPatch(PATCH)

    turns: list[Turn] = [
        ToolCall("exec_command", {"cmd": "cat lib.py"}),
        Reply(change_then_patch),  # type: ignore[arg-type]
        ToolCall("exec_command", {"cmd": "cat lib.py"}),
        ApplyPatch(PATCH),
        Text("done"),
    ]
    model_server.script(OPENAI, turns)

    run = run_codex(codex, model_server.url, workspace.path, home, codex_home, "Use lib in main.")

    assert run.returncode == 0, run.stdout + run.stderr
    assert_scripted_and_offline(model_server, OPENAI, turns)
    outputs = codex_call_outputs(model_server)
    assert len(outputs) == 4, outputs
    assert outputs[1].startswith(
        "Command blocked by PreToolUse hook: PlanFence blocked apply_patch of main.py: plan 'auto-"
    ), outputs[1]
    assert "- 1 previously inspected file changed: lib.py\nRe-read lib.py " in outputs[1]
    assert "return 2" in outputs[2]  # the re-read
    assert "blocked" not in outputs[3], outputs[3]
    assert main.read_text() == "import lib\nlib.f()\n"
    no_trust_anywhere(workspace, model_server, OPENAI)
