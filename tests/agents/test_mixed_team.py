"""A mixed team: a real Claude Code session and a real Gemini CLI session, each in its own
worktree of one repository (the second joined to the cluster), both in automatic mode.

Claude Code (worktree `main`) reads api.py of Gemini's worktree to write client.py; Gemini CLI
(worktree `tree`) reads client.py of Claude's worktree to write api.py. Gemini's write of
api.py stales Claude's read: Claude's write is blocked naming the other worktree's api.py;
Claude re-reads and writes. Claude's write of client.py stales Gemini's read: Gemini's next
write is blocked naming client.py; it re-reads and writes. The two clients run at once; the
scripted model turns order them (each `Reply` waits for the other's step, never by sleeping).
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from .clients import run_claude, skip_without_clients
from .model_server import ANTHROPIC, GEMINI, ModelServer, Reply, Text, ToolCall, Turn
from .newclients import run_gemini, skip_without
from .turns import claude_tool_results, content_text
from .workspaces import Workspace

pytestmark = pytest.mark.agents
skip_without_clients()
skip_without("gemini")

STEP = 120.0  # seconds one client waits for the other's step (both runs are bounded too)


def responses(body: dict[str, Any]) -> list[str]:
    """The Gemini `functionResponse` parts of a request, as text."""
    return [
        json.dumps(part["functionResponse"])
        for content in body["contents"]
        for part in content.get("parts", [])
        if "functionResponse" in part
    ]


def waiting(event: threading.Event, then: Turn, before: threading.Event | None = None) -> Reply:
    """A turn that first signals `before` (this side's step is done), then waits for `event`
    (the other side's), then asks for `then`."""

    def make(body: dict[str, Any]) -> Any:
        if before is not None:
            before.set()
        assert event.wait(STEP), "the other client never reached its step"
        return then

    return Reply(make)


def test_claude_and_gemini_in_two_worktrees_stale_each_other(
    claude: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    main = workspace
    (main.path / "api.py").write_text("def get():\n    return 1\n")
    (main.path / "client.py").write_text("import api\n")
    main.git("add", "api.py", "client.py")
    main.git("commit", "-q", "-m", "sources")
    tree = Workspace(tmp_path / "tree")
    main.git("worktree", "add", "-q", "-b", "tree", str(tree.path))
    try:
        tree.planfence("workspace", "join")
        main.planfence("hook", "install", "claude", "--project", main.path, "--command")
        tree.planfence("hook", "install", "gemini", "--project", tree.path)
        run_team(claude, model_server, main.path, tree.path, tmp_path)
    finally:
        main.planfence("cluster", "down", ".planfence", check=False)


def run_team(claude: Path, server: ModelServer, a: Path, b: Path, tmp_path: Path) -> None:
    theirs_api, theirs_client = b / "api.py", a / "client.py"
    gemini_wrote, claude_done = threading.Event(), threading.Event()
    claude_write = ToolCall(
        "Write", {"file_path": str(theirs_client), "content": "import api\napi.get()\n"}
    )
    claude_turns: list[Turn] = [
        ToolCall("Read", {"file_path": str(theirs_api)}),
        waiting(gemini_wrote, claude_write),
        ToolCall("Read", {"file_path": str(theirs_api)}),
        claude_write,
        Reply(lambda body: (claude_done.set(), Text("done"))[1]),
    ]
    gemini_write = ToolCall(
        "write_file", {"file_path": str(theirs_api), "content": "def get():\n    return 2\n"}
    )
    gemini_again = ToolCall(
        "write_file", {"file_path": str(theirs_api), "content": "def get():\n    return 3\n"}
    )
    gemini_turns: list[Turn] = [
        ToolCall("read_file", {"file_path": str(theirs_client)}),
        gemini_write,
        waiting(claude_done, gemini_again, before=gemini_wrote),
        ToolCall("read_file", {"file_path": str(theirs_client)}),
        gemini_again,
        Text("done"),
    ]
    server.script(ANTHROPIC, claude_turns)
    server.script(GEMINI, gemini_turns)

    with ThreadPoolExecutor(2) as pool:
        claude_run = pool.submit(
            run_claude, claude, server.url, a, tmp_path / "claude-home", "Use the api.",
            extra=("--add-dir", str(b)),
        )  # fmt: skip
        gemini_run = pool.submit(
            run_gemini, server.url, b, tmp_path / "gemini-home", "Change the api.",
            ("--include-directories", str(a)),
        )  # fmt: skip
        ran = [claude_run.result(), gemini_run.result()]

    for run in ran:
        assert run.returncode == 0, run.stdout + run.stderr
    assert (server.taken(ANTHROPIC), server.overruns(ANTHROPIC)) == (len(claude_turns), 0)
    assert (server.taken(GEMINI), server.overruns(GEMINI)) == (len(gemini_turns), 0)
    results = claude_tool_results(server)
    assert [r.get("is_error", False) for r in results] == [False, True, False, False]
    claude_reason = content_text(results[1]["content"])
    assert f"PlanFence blocked Write of {theirs_client}" in claude_reason, claude_reason
    assert "previously inspected file changed: " in claude_reason, claude_reason
    assert ":api.py" in claude_reason, claude_reason  # named with the other worktree's owner
    requests = server.model_requests(GEMINI)
    gemini_reason = responses(requests[3])[-1]  # the request after Gemini's second write
    assert f"PlanFence blocked write_file of {theirs_api}" in gemini_reason, gemini_reason
    assert ":client.py" in gemini_reason, gemini_reason
    assert "blocked" not in responses(requests[5])[-1]
    assert theirs_client.read_text() == "import api\napi.get()\n"
    assert theirs_api.read_text() == "def get():\n    return 3\n"
