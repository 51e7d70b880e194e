"""PlanFence's hook inside the real Claude Code and Codex CLIs (pinned by scripts/install-agents).

Each test serves a git repository with `planfence workspace serve`, installs the hook with
`planfence hook install`, trusts a plan that read notes.txt and will change a.txt for the
client's session (a plan trusted without a session never captures a session that started its
own, docs/HOOKS.md), and runs one client turn against the scripted model endpoint: the model asks for a tool call, the
client runs its hooks and the tool, and sends the result back in its next request, which the
test reads. Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from .clients import (
    clone_venv,
    run_claude,
    skip_without_clients,
)
from .model_server import (
    ANTHROPIC,
    ModelServer,
    Reply,
    Text,
    ToolCall,
    Turn,
)
from .turns import (
    PLAN,
    SESSION,
    assert_scripted_and_offline,
    claude_tool_results,
    claude_write_turns,
    content_text,
    install_claude,
    run_claude_turns,
    run_codex_patch,
    trust_plan,
)
from .workspaces import PLANFENCE, Workspace

pytestmark = pytest.mark.agents
skip_without_clients()

DRIFT = "- 1 previously inspected file changed: notes.txt"


def plan_check(ws: Workspace) -> int:
    """`workspace check PLAN`: 0 once the PostToolUse hook recorded the agent's own edit of
    a.txt (without that record the changed target is critical drift: 2)."""
    return ws.planfence("workspace", "check", PLAN, check=False).returncode


# -- Claude Code --------------------------------------------------------------------------------


def test_claude_write_runs_when_nothing_drifted(
    claude: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    install_claude(workspace, tmp_path / "home", PLANFENCE)
    trust_plan(workspace, SESSION)
    target = workspace.path / "a.txt"

    results = run_claude_turns(
        claude, model_server, workspace, tmp_path / "home", claude_write_turns(target), SESSION
    )

    assert [r.get("is_error", False) for r in results] == [False, False]
    assert "PlanFence" not in content_text(results[1]["content"])
    assert target.read_text() == "new\n"
    assert plan_check(workspace) == 0


def test_claude_write_is_blocked_after_a_read_file_changed(
    claude: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    install_claude(workspace, tmp_path / "home", PLANFENCE)
    trust_plan(workspace, SESSION)
    (workspace.path / "notes.txt").write_text("another process changed this\n")
    target = workspace.path / "a.txt"

    results = run_claude_turns(
        claude, model_server, workspace, tmp_path / "home", claude_write_turns(target), SESSION
    )

    assert [r.get("is_error", False) for r in results] == [False, True]
    reason = content_text(results[1]["content"])
    assert (
        f"PlanFence blocked Write of {target}: plan '{PLAN}' is stale (relevant drift)." in reason
    ), reason
    assert DRIFT in reason
    assert target.read_text() == "old\n"


@pytest.fixture(params=["repo", "worktree"])
def place(request: pytest.FixtureRequest, workspace: Workspace, tmp_path: Path) -> Workspace:
    """Where the agent works: the served repository (hook installed for the project), or a
    worktree made by `git worktree add` (hook installed for the user, worktree joined)."""
    if request.param == "repo":
        return workspace
    tree = Workspace(tmp_path / "tree")
    workspace.git("worktree", "add", "-q", "-b", "tree", str(tree.path))
    request.addfinalizer(lambda: workspace.planfence("cluster", "down", ".planfence"))
    joined = tree.planfence("workspace", "join")
    assert joined.stdout.startswith(f"joined {tree.path} to the cluster "), joined.stdout
    return tree


def test_claude_write_is_blocked_when_the_hook_cannot_start(
    claude: Path, model_server: ModelServer, place: Workspace, tmp_path: Path
) -> None:
    venv, home = tmp_path / "venv", tmp_path / "home"
    installed = clone_venv(venv)
    install_claude(place, home, installed)
    trust_plan(place)  # nothing drifted: only the missing command can block
    venv.rename(tmp_path / "venv-moved")
    target = place.path / "a.txt"

    results = run_claude_turns(claude, model_server, place, home, claude_write_turns(target))

    assert target.read_text() == "old\n", "the Write ran although the hook could not start"
    assert results[1].get("is_error") is True
    assert f"posix_spawn '{installed}'" in content_text(results[1]["content"])


def silent_cluster(cluster: Path, folder: Path, port: int) -> Path:
    """A copy of the cluster folder `cluster` (roster, keys, plan selection) in which every
    owner is reached at 127.0.0.1:`port`, where the test listens and never answers."""
    shutil.copytree(cluster / "keys", folder / "keys")
    shutil.copy(cluster / "workspace.json", folder / "workspace.json")
    roster = tomllib.loads((cluster / "cluster.toml").read_text())
    for agent in roster["agents"]:
        agent["address"] = f"127.0.0.1:{port}"
    (folder / "cluster.toml").write_text(tomli_w.dumps(roster))
    return folder


def test_claude_write_is_blocked_when_the_hook_times_out(
    claude: Path, model_server: ModelServer, workspace: Workspace, place: Workspace, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    install_claude(place, home, PLANFENCE)
    trust_plan(place)
    settings = (
        home / ".claude" / "settings.json"
        if place is not workspace
        else place.path / ".claude" / "settings.local.json"
    )
    target = place.path / "a.txt"
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        cluster = silent_cluster(
            workspace.path / ".planfence", tmp_path / "silent", silent.getsockname()[1]
        )
        config = json.loads(settings.read_text())
        for group in config["hooks"]["PreToolUse"]:
            for handler in group["hooks"]:  # Claude Code gives up after 2 s; the hook waits 60
                handler.update(
                    timeout=2, args=[*handler["args"], "--cluster", str(cluster), "--timeout", "60"]
                )
        settings.write_text(json.dumps(config))
        results = run_claude_turns(claude, model_server, place, home, claude_write_turns(target))

    assert target.read_text() == "old\n", "the Write ran although the hook timed out"
    assert results[1].get("is_error") is True
    assert "timed out" in content_text(results[1]["content"])


def test_claude_write_in_a_joined_worktree_runs_then_blocks_on_drift(
    claude: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    tree = Workspace(tmp_path / "tree")
    workspace.git("worktree", "add", "-q", "-b", "tree", str(tree.path))
    home = tmp_path / "home"
    try:
        tree.planfence("workspace", "join")
        install_claude(tree, home, PLANFENCE)
        trust_plan(tree, SESSION)
        target = tree.path / "a.txt"
        results = run_claude_turns(
            claude, model_server, tree, home, claude_write_turns(target), SESSION
        )
        assert [r.get("is_error", False) for r in results] == [False, False]
        assert target.read_text() == "new\n"
        (tree.path / "notes.txt").write_text("another process changed this\n")
        (workspace.path / "notes.txt").write_text("the parent's copy: not this plan's\n")
        turns: list[Turn] = [
            ToolCall("Write", {"file_path": str(target), "content": "newer\n"}),
            Text("done"),
        ]
        model_server.script(ANTHROPIC, turns)  # the same server: its ids go on counting
        run = run_claude(  # the same session, resumed: it still works under p1
            claude,
            model_server.url,
            tree.path,
            home,
            "Change a.txt again.",
            extra=("--resume", SESSION),
        )
        assert run.returncode == 0, run.stdout + run.stderr
        result = claude_tool_results(model_server)[-1]
        assert result.get("is_error") is True
        assert DRIFT in content_text(result["content"])
        assert target.read_text() == "new\n"
    finally:
        workspace.planfence("cluster", "down", ".planfence")


def follow_block_message(plan: str, *args: str) -> Reply:
    """A model that reads the block message of its last tool result and runs the trust
    command it names (for its own plan `plan`, declaring `args`) in the Bash tool."""

    def make(body: dict[str, Any]) -> ToolCall:
        last = [
            block
            for message in body["messages"]
            if isinstance(message["content"], list)
            for block in message["content"]
            if block.get("type") == "tool_result"
        ][-1]
        said = content_text(last["content"])
        match = re.search(
            r"record the new state with `(\S+) workspace trust \S+ (.*?) \.\.\.`", said
        )
        assert match, said
        command = f"{match.group(1)} workspace trust {plan} {match.group(2)} {' '.join(args)}"
        return ToolCall("Bash", {"command": command, "description": "Trust my plan"})

    return Reply(make)


def test_claude_subagent_is_checked_against_its_own_plan(
    claude: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    """The parent's plan p1 is stale; a real subagent (the Agent tool) writing a.txt is blocked
    against it (no plan of its own yet, the session's applies) with its agent_id named,
    trusts its own plan with the command the block message gives, and then writes."""
    local = workspace.path / ".claude" / "settings.local.json"
    local.parent.mkdir()
    local.write_text(json.dumps({"permissions": {"allow": ["Bash"]}}))
    install_claude(workspace, tmp_path / "home", PLANFENCE)
    trust_plan(workspace, SESSION)
    (workspace.path / "notes.txt").write_text("another process changed this\n")
    target = workspace.path / "a.txt"
    write = ToolCall("Write", {"file_path": str(target), "content": "new\n"})
    agent = {
        "description": "Change a.txt",
        "prompt": "Change a.txt to say new.",
        "subagent_type": "general-purpose",
        "run_in_background": False,
    }
    turns: list[Turn] = [
        ToolCall("Agent", agent),  # the parent
        write,  # the subagent, from here
        follow_block_message("sub", "--read", "notes.txt", "--target", "a.txt"),
        write,
        Text("sub done"),
        Text("done"),  # the parent again
    ]

    model_server.script(ANTHROPIC, turns)
    run = run_claude(
        claude,
        model_server.url,
        workspace.path,
        tmp_path / "home",
        "Go.",
        extra=("--session-id", SESSION),
    )

    assert run.returncode == 0, run.stdout + run.stderr
    assert_scripted_and_offline(model_server, ANTHROPIC, turns)
    sub_requests = model_server.model_requests(ANTHROPIC)[1:5]
    history = [
        block
        for message in sub_requests[-1]["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    first, trusted, second = history[-3:]
    reason = content_text(first["content"])
    assert first.get("is_error") is True
    assert re.search(
        rf"PlanFence blocked Write of {re.escape(str(target))} \(subagent \S+, general-purpose\): "
        rf"plan '{PLAN}' is stale \(relevant drift\)\.",
        reason,
    ), reason
    assert "trusted sub (trust 1): 1 read, 1 target" in content_text(trusted["content"])
    assert second.get("is_error", False) is False
    assert target.read_text() == "new\n"
    assert workspace.planfence("workspace", "check", "sub", check=False).returncode == 0
    assert plan_check(workspace) == 2  # the parent's plan is still stale: not the one used


# -- Codex --------------------------------------------------------------------------------------


def test_codex_apply_patch_runs_when_nothing_drifted(
    codex: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    (output,) = run_codex_patch(
        codex, model_server, workspace, tmp_path, lambda session: trust_plan(workspace, session)
    )

    assert "blocked" not in output, output
    assert (workspace.path / "a.txt").read_text() == "new\n"
    assert plan_check(workspace) == 0


def test_codex_apply_patch_is_blocked_after_a_read_file_changed(
    codex: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    def trust_then_drift(session: str) -> None:
        trust_plan(workspace, session)
        (workspace.path / "notes.txt").write_text("another process changed this\n")

    (output,) = run_codex_patch(codex, model_server, workspace, tmp_path, trust_then_drift)

    assert output.startswith(
        "Command blocked by PreToolUse hook: PlanFence blocked apply_patch of a.txt: "
        f"plan '{PLAN}' is stale (relevant drift)."
    ), output
    assert DRIFT in output
    assert (workspace.path / "a.txt").read_text() == "old\n"
