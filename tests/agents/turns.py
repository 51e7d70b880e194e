"""One scripted turn of a real client, shared by the agents tests: trust a plan, install the
hook (Claude Code) or record Codex's hook trust, run the client through scripted model turns
and read back what the model received.

trust_plan        `workspace trust p1 --read notes.txt --target a.txt` (`--session S` too)
install_claude    the Claude Code hook where a workspace needs it; our PreToolUse handlers
run_claude_turns  one `claude -p` run through `turns`; the tool_result blocks the model got
trust_codex_hooks install the Codex hook and record its trust as a user does, checked
run_codex_patch   one `codex exec` run applying PATCH; the tool outputs the model got
codex_session     the session (thread) id of a Codex model request

A plan trusted without a session never captures a session that started its own (SessionStart
starts it, docs/HOOKS.md), so a test whose client works under p1 binds p1 to the session: a
Claude Code run is given its id (`--session-id`); a Codex run's id is read from the model
request that asks for the patch and p1 is trusted for it there, before the patch is sent.
assert_scripted_and_offline  every scripted turn taken, none more, nothing left the machine
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .clients import (
    codex_env,
    codex_hook_hash,
    codex_hooks_list,
    run_claude,
    run_codex,
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
from .workspaces import Workspace

PLAN = "p1"
SESSION = "eeeeeeee-5555-4555-8555-555555555555"  # the Claude Code session the tests name

PATCH = "*** Begin Patch\n*** Update File: a.txt\n@@\n-old\n+new\n*** End Patch\n"


def trust_plan(ws: Workspace, session: str | None = None) -> None:
    """Trust p1 (notes.txt read, a.txt to change), for `session` when given (as a person)."""
    bound = ("--session", session) if session else ()
    ws.planfence("workspace", "trust", PLAN, *bound, "--read", "notes.txt", "--target", "a.txt")


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


def claude_write_turns(target: Path) -> list[Turn]:
    """Read a.txt (Read is not gated), write it (gated), finish."""
    return [
        ToolCall("Read", {"file_path": str(target)}),
        ToolCall("Write", {"file_path": str(target), "content": "new\n"}),
        Text("done"),
    ]


def drift_turns(read: ToolCall, write: ToolCall, changed: Path, text: str) -> list[Turn]:
    """A read, then `changed` rewritten with `text` while the model builds the turn that asks
    for `write` (so the change lands after the read and before the write's hook, every
    run), a re-read, the same write, done: the drift scenario in any client's tool names."""

    def change_then_write(body: dict[str, Any]) -> ToolCall:
        changed.write_text(text)
        return write

    return [read, Reply(change_then_write), read, write, Text("done")]


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
    claude: Path,
    server: ModelServer,
    ws: Workspace,
    home: Path,
    turns: list[Turn],
    session: str | None = None,
    prompt: str = "Change a.txt to say new.",
    extra: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """Run `turns` in one `claude -p` (its session id `session` when given, `extra` arguments
    after the usual ones), asserting it ran them all offline and ended with "done"; returns
    the tool_result blocks the model last received."""
    server.script(ANTHROPIC, turns)
    extra = (*extra, "--session-id", session) if session else extra
    run = run_claude(claude, server.url, ws.path, home, prompt, extra=extra)
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads(run.stdout)["result"] == "done"
    assert_scripted_and_offline(server, ANTHROPIC, turns)
    return claude_tool_results(server)


def install_claude(place: Workspace, home: Path, executable: Path) -> list[dict[str, Any]]:
    """Install the Claude Code hook where `place` needs it; returns our PreToolUse handlers."""
    if place.path.name == "tree":
        place.planfence(
            "hook", "install", "claude", "--user", executable=executable, env={"HOME": str(home)}
        )
        settings = home / ".claude" / "settings.json"
    else:
        place.planfence(  # the command form: these tests are about its process
            "hook", "install", "claude", "--project", place.path, "--command", executable=executable
        )
        settings = place.path / ".claude" / "settings.local.json"
    config = json.loads(settings.read_text())
    handlers = [h for g in config["hooks"]["PreToolUse"] for h in g["hooks"]]
    assert all(h["onFailure"] == "block" and h["command"] == str(executable) for h in handlers)
    return handlers


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


def codex_session(body: dict[str, Any]) -> str:
    """The session (thread) id of a Codex Responses request: its `prompt_cache_key`."""
    key = body.get("prompt_cache_key")
    assert isinstance(key, str) and key, sorted(body)
    return key


def run_codex_patch(
    codex: Path,
    server: ModelServer,
    ws: Workspace,
    tmp_path: Path,
    before_patch: Callable[[str], None] | None = None,
) -> list[str]:
    """Run one `codex exec` that applies PATCH; returns the tool outputs the model got. With
    `before_patch`, it is called with the session id while the patch turn is made."""
    home, codex_home = tmp_path / "home", tmp_path / "codex-home"
    trust_codex_hooks(codex, server, ws, home, codex_home)

    def patch(body: dict[str, Any]) -> ApplyPatch:
        if before_patch is not None:
            before_patch(codex_session(body))
        return ApplyPatch(PATCH)

    turns: list[Turn] = [Reply(patch), Text("done")]
    server.script(OPENAI, turns)
    run = run_codex(codex, server.url, ws.path, home, codex_home, "Change a.txt to say new.")
    assert run.returncode == 0, run.stdout + run.stderr
    assert_scripted_and_offline(server, OPENAI, turns)
    return codex_call_outputs(server)
