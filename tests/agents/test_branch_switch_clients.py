"""The seed scenario, "resume after a branch switch", inside the real Claude Code 2.1.332 and
Codex 0.171.0 (issue 28, acceptance): on feature/auth the session reads auth.ts and
package.json and runs `npm test`; then another process checks out main, where auth.ts and
package-lock.json differ. The session's write to auth.ts is blocked; the block lists the
branch, HEAD, the inspected file, the lockfile beside the manifest it read and the stale test
result, and says only "stop and tell the user" (no re-read: a re-read fixes no branch switch),
and the plan's replan count is untouched, also when the model re-reads anyway. Automatic mode; nothing leaves 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planfence_net.workspace.plans.session import auto_plan

from .clients import run_claude, run_codex, skip_without_clients
from .model_server import ANTHROPIC, OPENAI, ApplyPatch, ModelServer, Reply, Text, ToolCall, Turn
from .turns import (
    assert_scripted_and_offline,
    claude_tool_results,
    codex_call_outputs,
    content_text,
    trust_codex_hooks,
)
from .workspaces import PLANFENCE, Workspace

pytestmark = pytest.mark.agents
skip_without_clients()

SESSION = "ffffffff-6666-4666-8666-666666666666"
PACKAGE = json.dumps({"name": "app", "version": "1.0.0", "scripts": {"test": "node --version"}})
ON_MAIN = {"auth.ts": "export const timeout = 30;\n", "package-lock.json": '{"v": 1}\n'}
ON_FEATURE = {"auth.ts": "export const timeout = 60;\n", "package-lock.json": '{"v": 2}\n'}
PATCH = (
    "*** Begin Patch\n*** Update File: auth.ts\n@@\n-export const timeout = 60;\n"
    "+export const timeout = 90;\n*** End Patch\n"
)


def on_feature_branch(ws: Workspace) -> tuple[str, str]:
    """main with auth.ts, package.json and its lockfile; feature/auth, checked out, changes
    auth.ts and the lockfile. Returns the short HEADs (feature/auth's, main's)."""
    for rel, text in {**ON_MAIN, "package.json": PACKAGE + "\n"}.items():
        (ws.path / rel).write_text(text)
    ws.git("add", ".")
    ws.git("commit", "-q", "-m", "app")
    ws.git("checkout", "-q", "-b", "feature/auth")
    for rel, text in ON_FEATURE.items():
        (ws.path / rel).write_text(text)
    ws.git("commit", "-q", "-am", "auth: a longer timeout")
    heads = (ws.git("rev-parse", "HEAD"), ws.git("rev-parse", "main"))
    return heads[0].strip()[:7], heads[1].strip()[:7]


def switch_then(ws: Workspace, turn: ToolCall | ApplyPatch) -> Reply:
    """Another process checks out main; then the model asks for `turn`."""

    def make(body: dict[str, Any]) -> ToolCall | ApplyPatch:
        ws.git("checkout", "-q", "main")
        return turn

    return Reply(make)


def assert_says_only_stop(reason: str, heads: tuple[str, str], plan: str) -> None:
    """The block lists every drift of the seed scenario and tells the model only to stop.
    `reason` is what the model got: the clients wrap PlanFence's text (Claude Code puts
    "PreToolUse:Edit hook error: [command]: " before it, Codex ". Command: PATCH" after)."""
    end = "(never run it yourself)."
    start = reason.index("PlanFence blocked ")
    block = reason[start : reason.index(end, start) + len(end)]
    assert (
        f"plan '{plan}' (what this session read and wrote) is stale (critical drift)."
        in (block.splitlines()[0])
    ), reason
    assert block.splitlines()[1:] == [
        "Workspace drift detected since the previous trusted state:",
        "- Branch changed: feature/auth -> main",
        f"- HEAD changed: {heads[0]} -> {heads[1]}",
        "- 1 previously inspected file changed: auth.ts",
        "- package-lock.json changed",
        "- Previous test result is now stale: `npm test` ran against auth.ts",
        "The branch or HEAD changed: stop and tell the user. Only the user can re-base this "
        f"plan on it, with `{PLANFENCE} workspace refresh {plan}` {end}",
    ], reason
    assert "re-read" not in block.lower() and "retry" not in block, reason


def replans(ws: Workspace, plan: str) -> tuple[int, int]:
    """(exit code of `workspace check PLAN`, its trust count: 1 until a re-read spends the
    one replan; a re-read fixes no branch switch, so it must not)."""
    proc = ws.planfence("workspace", "check", plan, "--json", check=False)
    return proc.returncode, json.loads(proc.stdout)["trust"]


def test_claude_branch_switch_says_only_stop(
    claude: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    heads = on_feature_branch(workspace)
    workspace.planfence("hook", "install", "claude", "--project", workspace.path, "--command")
    auth, package = workspace.path / "auth.ts", workspace.path / "package.json"
    # Claude Code itself refuses an Edit of a file changed since its Read, before PreToolUse:
    # the model edits package.json, which the checkout left as it was.
    edit = ToolCall(
        "Edit",
        {"file_path": str(package), "old_string": '"1.0.0"', "new_string": '"1.0.1"'},
    )
    turns: list[Turn] = [
        ToolCall("Read", {"file_path": str(auth)}),
        ToolCall("Read", {"file_path": str(package)}),
        ToolCall("Bash", {"command": "npm test", "description": "Run the tests"}),
        switch_then(workspace, edit),
        ToolCall("Read", {"file_path": str(auth)}),  # a model that re-reads anyway
        Text("done"),
    ]
    model_server.script(ANTHROPIC, turns)

    run = run_claude(
        claude,
        model_server.url,
        workspace.path,
        tmp_path / "home",
        "Resume the auth fix.",
        extra=("--allowedTools", "Bash", "--session-id", SESSION),
    )

    assert run.returncode == 0, run.stdout + run.stderr
    assert_scripted_and_offline(model_server, ANTHROPIC, turns)
    results = claude_tool_results(model_server)
    assert [r.get("is_error", False) for r in results] == [False, False, False, True, False]
    reason = content_text(results[3]["content"])
    assert f"PlanFence blocked Edit of {package}: " in reason, reason
    assert_says_only_stop(reason, heads, auto_plan(SESSION))
    assert (auth.read_text(), package.read_text()) == (ON_MAIN["auth.ts"], PACKAGE + "\n")
    assert replans(workspace, auto_plan(SESSION)) == (2, 1)


def test_codex_branch_switch_says_only_stop(
    codex: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    heads = on_feature_branch(workspace)
    home, codex_home = tmp_path / "home", tmp_path / "codex-home"
    trust_codex_hooks(codex, model_server, workspace, home, codex_home)
    turns: list[Turn] = [
        ToolCall("exec_command", {"cmd": "cat auth.ts"}),
        ToolCall("exec_command", {"cmd": "cat package.json"}),
        ToolCall("exec_command", {"cmd": "npm test"}),
        switch_then(workspace, ApplyPatch(PATCH)),
        ToolCall("exec_command", {"cmd": "cat auth.ts"}),  # a model that re-reads anyway
        Text("done"),
    ]
    model_server.script(OPENAI, turns)

    run = run_codex(
        codex, model_server.url, workspace.path, home, codex_home, "Resume the auth fix."
    )

    assert run.returncode == 0, run.stdout + run.stderr
    assert_scripted_and_offline(model_server, OPENAI, turns)
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    [session] = [e["thread_id"] for e in events if e.get("type") == "thread.started"]
    outputs = codex_call_outputs(model_server)
    assert len(outputs) == 5, outputs
    blocked = "Command blocked by PreToolUse hook: PlanFence blocked apply_patch of auth.ts: "
    assert outputs[3].startswith(blocked), outputs[3]
    assert_says_only_stop(outputs[3], heads, auto_plan(session))
    assert (workspace.path / "auth.ts").read_text() == ON_MAIN["auth.ts"]
    assert replans(workspace, auto_plan(session)) == (2, 1)
