"""Codex's SessionStart and SessionEnd hooks, inside the real Codex (pinned by
scripts/install-agents), as `hook install codex --trust` registers them: SessionStart tells the
model PlanFence is active (its JSON `additionalContext` reaches the model's context) and starts
the session's plan before any tool call; SessionEnd ends the session's intents when the Codex
session ends, not at their lease. Nothing leaves 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planfence_net.workspace.hook.auto import CONTEXT

from .clients import (
    codex_env,
    codex_hooks_list,
    run_codex,
    skip_without_clients,
    write_codex_config,
)
from .model_server import OPENAI, ApplyPatch, ModelServer, Reply, Text, Turn
from .turns import PATCH, assert_scripted_and_offline, trust_codex_hooks
from .workspaces import Workspace

pytestmark = pytest.mark.agents
skip_without_clients()

OTHER = "dddddddd-4444-4444-8444-444444444444"


def run_session(
    codex: Path, server: ModelServer, ws: Workspace, tmp_path: Path, turns: list[Turn]
) -> str:
    """Install and trust our Codex hooks, run one `codex exec` of `turns`; returns the
    session (thread) id Codex reported."""
    home, codex_home = tmp_path / "home", tmp_path / "codex-home"
    trust_codex_hooks(codex, server, ws, home, codex_home)
    listed = codex_hooks_list(codex, codex_env(server.url, home, codex_home), ws.path)
    assert (listed["warnings"], listed["errors"]) == ([], [])  # SessionEnd's 3 s: no clamping
    server.script(OPENAI, turns)
    run = run_codex(codex, server.url, ws.path, home, codex_home, "Change a.txt to say new.")
    assert run.returncode == 0, run.stdout + run.stderr
    assert_scripted_and_offline(server, OPENAI, turns)
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    [thread] = [e["thread_id"] for e in events if e.get("type") == "thread.started"]
    return str(thread)


def test_codex_session_start_tells_the_model_and_starts_the_plan(
    codex: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    session = run_session(codex, model_server, workspace, tmp_path, [Text("done")])

    first = json.dumps(model_server.model_requests(OPENAI)[0])
    assert json.dumps(CONTEXT)[1:-1] in first, first[-3000:]  # SessionStart told the model
    plans = json.loads(workspace.planfence("workspace", "plans", "--json").stdout)["plans"]
    # No tool call ran: only SessionStart can have started the session's own plan.
    assert [(p["plan"].startswith("auto-"), p["session"]) for p in plans] == [(True, session)]


def test_codex_session_end_ends_the_sessions_intents(
    codex: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    exclusive = ("workspace", "trust", "other", "--session", OTHER, "--exclusive", "a.txt")
    during: list[Any] = []

    def while_running(body: dict[str, Any]) -> Text:
        """After the patch, inside the session: its intent on a.txt is live."""
        during.append(workspace.planfence(*exclusive, check=False))
        return Text("done")

    turns: list[Turn] = [ApplyPatch(PATCH), Reply(while_running)]
    session = run_session(codex, model_server, workspace, tmp_path, turns)

    assert (workspace.path / "a.txt").read_text() == "new\n"
    [refused] = during
    assert (refused.returncode, refused.stdout) == (1, ""), refused.stderr
    assert refused.stderr.startswith("error: --exclusive ws:a.txt: plan 'auto-"), refused.stderr
    assert f"(codex session {session[:8]}) in {workspace.path} already intends it" in (
        refused.stderr
    )
    after = workspace.planfence(*exclusive, check=False)  # the session ended: so did its intent
    assert after.returncode == 0, after.stdout + after.stderr
    log = workspace.path / ".planfence" / "logs" / "ws.jsonl"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["op"] for e in events if e.get("event") == "request"].count("unintend") == 1
    puts = [e for e in events if e.get("event") == "put" and e.get("kind") == "intent"]
    assert len(puts) == 3  # the session's, its end, other's
    assert puts[1]["parents"] == [puts[0]["id"]]  # the session's own intent, ended


def test_codex_trusts_the_hashes_planfence_computes_for_config_toml(
    codex: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    """`--format toml` (matcher-less SessionStart/SessionEnd tables) and `--trust` with no
    codex at hand (the hashes computed, SessionEnd's 3 s included): Codex runs all four."""
    home, codex_home = tmp_path / "home", tmp_path / "codex-home"
    env = codex_env(model_server.url, home, codex_home)
    write_codex_config(codex_home, model_server.url)
    install = ("hook", "install", "codex", "--project", workspace.path, "--format", "toml")
    done = workspace.planfence(*install, "--trust", env={**env, "PATH": "/usr/bin:/bin"})
    assert done.stdout.count("trusted_hash = ") == 4, done.stdout

    listed = codex_hooks_list(codex, env, workspace.path)

    source = workspace.path / ".codex" / "config.toml"
    labels = ("pre_tool_use", "post_tool_use", "session_start", "session_end")
    assert (listed["warnings"], listed["errors"]) == ([], [])
    assert [(h["key"], h["trustStatus"], h["enabled"]) for h in listed["hooks"]] == [
        (f"{source}:{label}:0:0", "trusted", True) for label in labels
    ]
    status = ("hook", "status", "codex", "--project", workspace.path, "--codex", codex, "--json")
    [found] = json.loads(workspace.planfence(*status, env=env).stdout)["agents"]
    assert found["state"] == "active", found
