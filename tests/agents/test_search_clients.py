"""The read set where Claude Code looks (issue 28, item 9), inside the real Claude Code 2.1.332:
it has no Grep tool and searches with `grep -rn PAT .` in Bash. The files that search showed
join the session's read set, so when one of them drifts, the session's next write is blocked
naming it. Automatic mode (no `workspace trust`); nothing leaves 127.0.0.1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .clients import skip_without_clients
from .model_server import ModelServer, Reply, Text, ToolCall, Turn
from .turns import content_text, run_claude_turns
from .workspaces import Workspace

pytestmark = pytest.mark.agents
skip_without_clients()

LIB, MAIN = "def helper_f():\n    return 1\n", "import lib\n"
CHANGED = "def helper_f():\n    return 2\n"


def test_claude_grep_shows_lib_lib_drifts_edit_is_blocked_naming_it(
    claude: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    (workspace.path / "lib.py").write_text(LIB)
    (workspace.path / "main.py").write_text(MAIN)
    workspace.git("add", "lib.py", "main.py")
    workspace.git("commit", "-q", "-m", "sources")
    workspace.planfence("hook", "install", "claude", "--project", workspace.path, "--command")
    lib, main = workspace.path / "lib.py", workspace.path / "main.py"
    edit = ToolCall(
        "Edit",
        {"file_path": str(main), "old_string": "import lib\n", "new_string": "import lib\nx = 1\n"},
    )

    def drift_then_edit(body: dict[str, Any]) -> ToolCall:
        lib.write_text(CHANGED)  # another process, after the search showed lib.py
        return edit

    turns: list[Turn] = [
        ToolCall("Read", {"file_path": str(main)}),  # Claude Code edits only a file it read
        ToolCall("Bash", {"command": "grep -rn helper_f .", "description": "Search"}),
        Reply(drift_then_edit),
        Text("done"),
    ]
    results = run_claude_turns(
        claude,
        model_server,
        workspace,
        tmp_path / "home",
        turns,
        prompt="Use helper_f in main.",
        extra=("--allowedTools", "Bash"),
    )
    assert [r.get("is_error", False) for r in results] == [False, False, True]
    assert "lib.py:1:def helper_f():" in content_text(results[1]["content"])  # what it saw
    reason = content_text(results[2]["content"])
    assert f"PlanFence blocked Edit of {main}: plan 'auto-" in reason, reason
    assert "- 1 previously inspected file changed: lib.py\nRe-read lib.py " in reason, reason
    assert main.read_text() == MAIN
