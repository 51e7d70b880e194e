"""An ordinary day with commits, inside the real Claude Code 2.1.332 (issue 28, item 11): the
agent edits, commits its edit through Bash, edits again; the person commits the agent's work
in between and at the end. A commit that records what the plan holds moves HEAD inside the
plan: no call is blocked and the commit gate (`hook install git`) refuses no commit. A
commit that brings in another agent's change is drift: the next write is blocked, naming it.
Automatic mode; nothing leaves 127.0.0.1."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from .clients import run_claude, skip_without_clients
from .model_server import ANTHROPIC, ModelServer, Reply, Text, ToolCall, Turn
from .turns import (
    assert_scripted_and_offline,
    claude_tool_results,
    content_text,
    run_claude_turns,
)
from .workspaces import Workspace

pytestmark = pytest.mark.agents
skip_without_clients()

LIB, MAIN = "def f():\n    return 1\n", "import lib\n"


def person_commits(ws: Workspace) -> subprocess.CompletedProcess[str]:
    """`git commit -qam ...` as the person runs it (the pre-commit gate runs)."""
    return subprocess.run(
        ["git", "commit", "-qam", "the person's commit"],
        cwd=ws.path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def edit(path: Path, old: str, new: str) -> ToolCall:
    return ToolCall("Edit", {"file_path": str(path), "old_string": old, "new_string": new})


def test_claude_edit_commit_edit_is_never_stopped_nor_refused(
    claude: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    (workspace.path / "lib.py").write_text(LIB)
    (workspace.path / "main.py").write_text(MAIN)
    workspace.git("add", "lib.py", "main.py")
    workspace.git("commit", "-q", "-m", "sources")
    workspace.planfence("hook", "install", "claude", "--project", workspace.path, "--command")
    workspace.planfence("hook", "install", "git", "--project", workspace.path)
    assert (workspace.path / ".git" / "hooks" / "pre-commit").exists()
    lib, main = workspace.path / "lib.py", workspace.path / "main.py"
    committed: list[subprocess.CompletedProcess[str]] = []

    def person_commits_then(body: dict[str, Any]) -> ToolCall:
        committed.append(person_commits(workspace))
        return edit(main, "print(lib.f())\n", "print(lib.f() + 1)\n")

    turns: list[Turn] = [
        ToolCall("Read", {"file_path": str(lib)}),
        ToolCall("Read", {"file_path": str(main)}),
        edit(main, "import lib\n", "import lib\nlib.f()\n"),
        ToolCall("Bash", {"command": "git commit -qam 'use lib'", "description": "Commit"}),
        edit(main, "lib.f()\n", "print(lib.f())\n"),
        Reply(person_commits_then),
        Text("done"),
    ]
    results = run_claude_turns(
        claude,
        model_server,
        workspace,
        tmp_path / "home",
        turns,
        prompt="Use lib in main, committing as you go.",
        extra=("--allowedTools", "Bash"),
    )
    assert [r.get("is_error", False) for r in results] == [False] * 6, results
    assert main.read_text() == "import lib\nprint(lib.f() + 1)\n"
    [during] = committed
    assert (during.returncode, during.stderr) == (0, "")
    after = person_commits(workspace)  # the person's next commit: not refused by the gate
    assert (after.returncode, after.stderr) == (0, "")
    subjects = workspace.git("log", "--format=%s", "-4").splitlines()
    assert subjects == ["the person's commit", "the person's commit", "use lib", "sources"]


def test_claude_a_commit_bringing_in_another_agents_change_blocks_naming_it(
    claude: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    (workspace.path / "main.py").write_text(MAIN)
    workspace.git("add", "main.py")
    workspace.git("commit", "-q", "-m", "sources")
    workspace.planfence("hook", "install", "claude", "--project", workspace.path, "--command")
    main = workspace.path / "main.py"

    def another_agent_commits_then(body: dict[str, Any]) -> ToolCall:
        (workspace.path / "other.py").write_text("x = 1\n")
        workspace.git("add", "other.py")
        workspace.git("commit", "-q", "-m", "another agent")
        return edit(main, "lib.f()\n", "print(lib.f())\n")

    turns: list[Turn] = [
        ToolCall("Read", {"file_path": str(main)}),
        edit(main, "import lib\n", "import lib\nlib.f()\n"),
        Reply(another_agent_commits_then),
        Text("done"),
    ]
    model_server.script(ANTHROPIC, turns)

    run = run_claude(claude, model_server.url, workspace.path, tmp_path / "home", "Use lib.")

    assert run.returncode == 0, run.stdout + run.stderr
    assert_scripted_and_offline(model_server, ANTHROPIC, turns)
    results = claude_tool_results(model_server)
    assert [r.get("is_error", False) for r in results] == [False, False, True], results
    reason = content_text(results[2]["content"])
    assert f"PlanFence blocked Edit of {main}: plan 'auto-" in reason, reason
    assert "\n- The new HEAD brings in content this plan does not hold: other.py\n" in reason
    assert "The branch or HEAD changed: stop and tell the user." in reason, reason
    assert main.read_text() == "import lib\nlib.f()\n"
