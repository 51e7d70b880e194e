"""Intents inside the real Claude Code and Codex (pinned by scripts/install-agents): before the
session's first write to a file another plan intends, the hook's PreToolUse JSON (exit 0,
`hookSpecificOutput.additionalContext`) reaches the model, and the write runs; Claude Code's
SessionEnd hook ends the session's intents. Nothing leaves 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .clients import skip_without_clients
from .model_server import ANTHROPIC, OPENAI, ModelServer
from .turns import (
    SESSION,
    claude_write_turns,
    install_claude,
    run_claude_turns,
    run_codex_patch,
    trust_plan,
)
from .workspaces import PLANFENCE, Workspace

pytestmark = pytest.mark.agents
skip_without_clients()

OTHER = "cccccccc-3333-4333-8333-333333333333"


def test_claude_sees_another_plans_intent_before_its_first_write(
    claude: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    install_claude(workspace, tmp_path / "home", PLANFENCE)
    trust_plan(workspace, SESSION)  # p1: the plan of the Claude Code session
    other = workspace.planfence(
        "workspace", "trust", "other", "--session", OTHER, "--target", "a.txt"
    )
    assert "intent published: ws:a.txt until " in other.stdout, other.stdout
    target = workspace.path / "a.txt"

    results = run_claude_turns(
        claude, model_server, workspace, tmp_path / "home", claude_write_turns(target), SESSION
    )

    assert [r.get("is_error", False) for r in results] == [False, False]
    assert target.read_text() == "new\n"  # a notice decides nothing: the write ran
    notice = (
        f"PlanFence: plan 'other' (session cccccccc) in {workspace.path} also intends to "
        f"change {target} (intent until "
    )
    after_write = json.dumps(model_server.model_requests(ANTHROPIC)[-1])
    before_write = json.dumps(model_server.model_requests(ANTHROPIC)[1])
    assert notice in after_write, after_write[-3000:]
    assert notice not in before_write  # it came with the Write, not before
    # Claude Code's SessionEnd ended the session's intents (and only those).
    log = workspace.path / ".planfence" / "logs" / "ws.jsonl"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["op"] for e in events if e.get("event") == "request"].count("unintend") == 1
    puts = [e for e in events if e.get("event") == "put" and e.get("kind") == "intent"]
    assert len(puts) == 4  # p1 and other at trust, p1 by the session's hook, ended
    assert puts[3]["parents"] == [puts[2]["id"]]  # the session's own intent, ended


def test_codex_sees_another_plans_intent_before_its_first_write(
    codex: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    trust_plan(workspace)
    workspace.planfence("workspace", "trust", "other", "--session", OTHER, "--target", "a.txt")

    (output,) = run_codex_patch(codex, model_server, workspace, tmp_path)

    assert "blocked" not in output, output
    assert (workspace.path / "a.txt").read_text() == "new\n"
    notice = (
        f"PlanFence: plan 'other' (session cccccccc) in {workspace.path} also intends to "
        f"change a.txt (intent until "
    )
    after_patch = json.dumps(model_server.model_requests(OPENAI)[-1])
    assert notice in after_patch, after_patch[-3000:]
