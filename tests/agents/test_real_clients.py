"""PlanFence's hook inside the real Claude Code and Codex CLIs (pinned by scripts/install-agents).

Each test serves a git repository with `planfence workspace serve`, installs the hook with
`planfence hook install`, trusts a plan that read notes.txt and will change a.txt, and runs
one client turn against the scripted model endpoint: the model asks for a tool call, the
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
    codex_env,
    codex_hook_hash,
    codex_hooks_list,
    run_claude,
    run_codex,
    skip_without_clients,
    write_codex_config,
)
from .model_server import (
    ANTHROPIC,
    OPENAI,
    ApplyPatch,
    ModelServer,
    Reply,
    Text,
    ToolCall,
    Turn,
)
from .workspaces import PLANFENCE, Workspace

pytestmark = pytest.mark.agents
skip_without_clients()

PLAN = "p1"
DRIFT = "- 1 previously inspected file changed: notes.txt"


def trust_plan(ws: Workspace) -> None:
    ws.planfence("workspace", "trust", PLAN, "--read", "notes.txt", "--target", "a.txt")


def plan_check(ws: Workspace) -> int:
    """`workspace check PLAN`: 0 once the PostToolUse hook recorded the agent's own edit of
    a.txt (without that record the changed target is critical drift: 2)."""
    return ws.planfence("workspace", "check", PLAN, check=False).returncode


def content_text(content: Any) -> str:
    """The text of a tool result's content (a string, or a list of text blocks)."""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


def assert_scripted_and_offline(server: ModelServer, api: str, turns: list[Turn]) -> None:
    """Every turn was taken and none more; every request for another host was refused."""
    assert (server.taken(api), server.overruns(api)) == (len(turns), 0)
    assert server.unknown() == []
    assert all(r.method == "CONNECT" or r.path.startswith("http") for r in server.refused())


# -- Claude Code --------------------------------------------------------------------------------


def claude_write_turns(target: Path) -> list[Turn]:
    """Read a.txt (Read is not gated), write it (gated), finish."""
    return [
        ToolCall("Read", {"file_path": str(target)}),
        ToolCall("Write", {"file_path": str(target), "content": "new\n"}),
        Text("done"),
    ]


def claude_tool_results(server: ModelServer) -> list[dict[str, Any]]:
    """The tool_result blocks of the conversation, in order, as the model last received it."""
    messages = server.model_requests(ANTHROPIC)[-1]["messages"]
    return [
        block
        for message in messages
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


def run_claude_turns(
    claude: Path, server: ModelServer, ws: Workspace, home: Path, turns: list[Turn]
) -> list[dict[str, Any]]:
    server.script(ANTHROPIC, turns)
    run = run_claude(claude, server.url, ws.path, home, "Change a.txt to say new.")
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads(run.stdout)["result"] == "done"
    assert_scripted_and_offline(server, ANTHROPIC, turns)
    return claude_tool_results(server)


def test_claude_write_runs_when_nothing_drifted(
    claude: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    install_claude(workspace, tmp_path / "home", PLANFENCE)
    trust_plan(workspace)
    target = workspace.path / "a.txt"

    results = run_claude_turns(
        claude, model_server, workspace, tmp_path / "home", claude_write_turns(target)
    )

    assert [r.get("is_error", False) for r in results] == [False, False]
    assert "PlanFence" not in content_text(results[1]["content"])
    assert target.read_text() == "new\n"
    assert plan_check(workspace) == 0


def test_claude_write_is_blocked_after_a_read_file_changed(
    claude: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    install_claude(workspace, tmp_path / "home", PLANFENCE)
    trust_plan(workspace)
    (workspace.path / "notes.txt").write_text("another process changed this\n")
    target = workspace.path / "a.txt"

    results = run_claude_turns(
        claude, model_server, workspace, tmp_path / "home", claude_write_turns(target)
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


def install_claude(place: Workspace, home: Path, executable: Path) -> list[dict[str, Any]]:
    """Install the Claude Code hook where `place` needs it; returns our PreToolUse handlers."""
    if place.path.name == "tree":
        place.planfence(
            "hook", "install", "claude", "--user", executable=executable, env={"HOME": str(home)}
        )
        settings = home / ".claude" / "settings.json"
    else:
        place.planfence("hook", "install", "claude", "--project", place.path, executable=executable)
        settings = place.path / ".claude" / "settings.local.json"
    config = json.loads(settings.read_text())
    handlers = [h for g in config["hooks"]["PreToolUse"] for h in g["hooks"]]
    assert all(h["onFailure"] == "block" and h["command"] == str(executable) for h in handlers)
    return handlers


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
        trust_plan(tree)
        target = tree.path / "a.txt"
        results = run_claude_turns(claude, model_server, tree, home, claude_write_turns(target))
        assert [r.get("is_error", False) for r in results] == [False, False]
        assert target.read_text() == "new\n"
        (tree.path / "notes.txt").write_text("another process changed this\n")
        (workspace.path / "notes.txt").write_text("the parent's copy: not this plan's\n")
        turns = [ToolCall("Write", {"file_path": str(target), "content": "newer\n"}), Text("done")]
        server2 = ModelServer().start()
        try:
            server2.script(ANTHROPIC, turns)
            run = run_claude(claude, server2.url, tree.path, home, "Change a.txt again.")
            assert run.returncode == 0, run.stdout + run.stderr
            (result,) = claude_tool_results(server2)
        finally:
            server2.close()
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
    trust_plan(workspace)
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
    run = run_claude(claude, model_server.url, workspace.path, tmp_path / "home", "Go.")

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


def trust_codex_hooks(
    codex: Path, server: ModelServer, ws: Workspace, home: Path, codex_home: Path
) -> None:
    """What a user does to activate project hooks in Codex, through PlanFence: install, see
    `hook status codex` say untrusted, record the trust decisions (`--trust`), see it active;
    the hashes recorded are those Codex computes (checked against the documented formula)."""
    env = codex_env(server.url, home, codex_home)  # codex app-server too reaches only the server
    write_codex_config(codex_home, server.url)
    ws.planfence("hook", "install", "codex", "--project", ws.path, env=env)
    status = ("hook", "status", "codex", "--project", ws.path, "--codex", codex, "--json")
    before = ws.planfence(*status, env=env, check=False)
    [found] = json.loads(before.stdout)["agents"]
    assert (before.returncode, found["state"]) == (1, "untrusted"), before.stdout
    assert found["step"] == f"planfence hook install codex --project {ws.path} --trust"

    ws.planfence(
        "hook", "install", "codex", "--project", ws.path, "--trust", "--codex", codex, env=env
    )
    after = ws.planfence(*status, env=env, check=False)
    [found] = json.loads(after.stdout)["agents"]
    assert (after.returncode, found["state"]) == (0, "active"), after.stdout
    hooks = codex_hooks_list(codex, codex_env(server.url, home, codex_home), ws.path)["hooks"]
    source = ws.path / ".codex" / "hooks.json"
    labels = ("pre_tool_use", "post_tool_use", "session_start", "session_end")
    assert [(h["key"], h["trustStatus"]) for h in hooks] == [
        (f"{source}:{label}:0:0", "trusted") for label in labels
    ]
    for hook, label in zip(hooks, labels, strict=True):
        assert hook["currentHash"] == codex_hook_hash(
            label, hook["matcher"], hook["command"], hook["timeoutSec"]
        )


def codex_call_outputs(server: ModelServer) -> list[str]:
    """The outputs of the tool calls, in order, as the model last received them."""
    items = server.model_requests(OPENAI)[-1]["input"]
    return [
        content_text(item["output"])
        for item in items
        if item.get("type") in ("function_call_output", "custom_tool_call_output")
    ]


PATCH = "*** Begin Patch\n*** Update File: a.txt\n@@\n-old\n+new\n*** End Patch\n"


def run_codex_patch(codex: Path, server: ModelServer, ws: Workspace, tmp_path: Path) -> list[str]:
    home, codex_home = tmp_path / "home", tmp_path / "codex-home"
    trust_codex_hooks(codex, server, ws, home, codex_home)
    turns: list[Turn] = [ApplyPatch(PATCH), Text("done")]
    server.script(OPENAI, turns)
    run = run_codex(codex, server.url, ws.path, home, codex_home, "Change a.txt to say new.")
    assert run.returncode == 0, run.stdout + run.stderr
    assert_scripted_and_offline(server, OPENAI, turns)
    return codex_call_outputs(server)


def test_codex_apply_patch_runs_when_nothing_drifted(
    codex: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    trust_plan(workspace)

    (output,) = run_codex_patch(codex, model_server, workspace, tmp_path)

    assert "blocked" not in output, output
    assert (workspace.path / "a.txt").read_text() == "new\n"
    assert plan_check(workspace) == 0


def test_codex_apply_patch_is_blocked_after_a_read_file_changed(
    codex: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    trust_plan(workspace)
    (workspace.path / "notes.txt").write_text("another process changed this\n")

    (output,) = run_codex_patch(codex, model_server, workspace, tmp_path)

    assert output.startswith(
        "Command blocked by PreToolUse hook: PlanFence blocked apply_patch of a.txt: "
        f"plan '{PLAN}' is stale (relevant drift)."
    ), output
    assert DRIFT in output
    assert (workspace.path / "a.txt").read_text() == "old\n"
