"""PlanFence's http hooks inside the real Claude Code: `hook install claude` on a served
worktree writes `type: "http"` handlers to the workspace owner, and Claude Code POSTs each
call there (no process per call). A Write with nothing drifted runs; after a read file
changed it is blocked with the hook's reason; with the owner stopped (nothing listens) and
with a wrong key (403), Claude Code blocks the Write itself (`onFailure: "block"`).
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.workspace import make_repo, served

from .clients import skip_without_clients
from .model_server import ModelServer
from .turns import PLAN, claude_write_turns, content_text, run_claude_turns, trust_plan
from .workspaces import FILES, Workspace

pytestmark = pytest.mark.agents
skip_without_clients()


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Workspace]:
    """A served worktree whose owner runs with the environment Claude Code gets here
    (`clients.base_env`: HOME is TMP/home), so that the owner's answers are the ones
    Claude Code's own hook would give (the door denies calls from another environment)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("PLANFENCE_CLUSTER", "CODEX_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    ws = Workspace(make_repo(tmp_path / "repo", FILES))
    with contextlib.ExitStack() as owner:
        owner.enter_context(served(ws.path))
        OWNERS[ws.path] = owner
        yield ws
    OWNERS.pop(ws.path)


OWNERS: dict[Path, contextlib.ExitStack] = {}  # each test's owner, to stop it early


def install_http(ws: Workspace) -> dict[str, Any]:
    """Install the hooks on the served worktree; returns our PreToolUse handler (http)."""
    ws.planfence("hook", "install", "claude", "--project", ws.path, "--explicit")  # plan PLAN
    config = json.loads((ws.path / ".claude" / "settings.local.json").read_text())
    [handler] = [h for g in config["hooks"]["PreToolUse"] for h in g["hooks"]]
    assert handler["type"] == "http" and handler["onFailure"] == "block", handler
    assert handler["url"].startswith("http://127.0.0.1:")
    return dict(handler)


def test_claude_http_hook_allows_then_blocks_drift(
    claude: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    install_http(workspace)
    trust_plan(workspace)
    target = workspace.path / "a.txt"
    home = tmp_path / "home"
    calls = hook_calls(workspace)

    results = run_claude_turns(claude, model_server, workspace, home, claude_write_turns(target))

    assert [r.get("is_error", False) for r in results] == [False, False]
    assert target.read_text() == "new\n"
    assert hook_calls(workspace) > calls  # the owner's door answered them
    target.write_text("old\n")
    (workspace.path / "notes.txt").write_text("another process changed this\n")

    results = run_claude_turns(claude, model_server, workspace, home, claude_write_turns(target))

    assert [r.get("is_error", False) for r in results] == [False, True]
    reason = content_text(results[1]["content"])
    assert f"PlanFence blocked Write of {target}: plan '{PLAN}' is stale" in reason, reason
    assert target.read_text() == "old\n"


def test_claude_http_hook_blocks_with_a_wrong_key(
    claude: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    install_http(workspace)
    trust_plan(workspace)  # nothing drifted: only the key can block
    local = workspace.path / ".claude" / "settings.local.json"
    config = json.loads(local.read_text())
    config["env"]["PLANFENCE_HOOK_KEY"] = "0" * 64
    local.write_text(json.dumps(config))
    target = workspace.path / "a.txt"

    results = run_claude_turns(
        claude, model_server, workspace, tmp_path / "home", claude_write_turns(target)
    )

    assert results[1].get("is_error") is True, results
    assert "HTTP 403" in content_text(results[1]["content"]), results[1]
    assert target.read_text() == "old\n"


def test_claude_http_hook_blocks_when_the_owner_is_down(
    claude: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    install_http(workspace)
    trust_plan(workspace)
    OWNERS[workspace.path].close()  # the owner and its door stop; the handlers stay
    target = workspace.path / "a.txt"

    results = run_claude_turns(
        claude, model_server, workspace, tmp_path / "home", claude_write_turns(target)
    )

    assert results[1].get("is_error") is True, results
    assert "onFailure" in content_text(results[1]["content"]), results[1]
    assert target.read_text() == "old\n"


def test_claude_http_hook_blocks_when_the_owner_is_slow(
    claude: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    install_http(workspace)
    trust_plan(workspace)
    local = workspace.path / ".claude" / "settings.local.json"
    target = workspace.path / "a.txt"
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        config = json.loads(local.read_text())
        for group in config["hooks"]["PreToolUse"]:
            for handler in group["hooks"]:  # Claude Code gives up after 2 s
                port = silent.getsockname()[1]
                handler.update(timeout=2, url=f"http://127.0.0.1:{port}/hook/claude")
        local.write_text(json.dumps(config))
        results = run_claude_turns(
            claude, model_server, workspace, tmp_path / "home", claude_write_turns(target)
        )

    assert results[1].get("is_error") is True, results
    assert "timed out" in content_text(results[1]["content"]), results[1]
    assert target.read_text() == "old\n"


def hook_calls(ws: Workspace) -> int:
    """Calls the owner's http door answered (its log's `hook` events with door http)."""
    log = ws.path / ".planfence" / "logs" / "ws.jsonl"
    return sum(1 for line in log.read_text().splitlines() if '"door":"http"' in line)
