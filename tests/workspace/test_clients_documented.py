"""Copilot CLI, Cursor and Windsurf, which do not run here: their payloads, taken from their
documentation (each named below), map into the normalized form, the hook's answer maps into
what each reads, and `hook install` writes each one's file in its documented shape."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from planfence_net.workspace.clients.table import Mapped, answered, normalized
from planfence_net.workspace.installers import hookfiles
from planfence_net.workspace.model.payload import READ, SHELL, WRITE, ToolCall, parse_payload


def parsed(name: str, value: dict[str, Any]) -> ToolCall:
    data = normalized(name, json.dumps(value).encode()).data
    assert isinstance(data, bytes)
    return parse_payload(name, data)


# GitHub Docs, "Hooks configuration" (copilot/reference/hooks-configuration): the pre-tool use
# hook's input JSON, verbatim; and the post-tool use hook's.
COPILOT_PRE = {
    "timestamp": 1704614600000,
    "cwd": "/path/to/project",
    "toolName": "bash",
    "toolArgs": '{"command":"rm -rf dist","description":"Clean build directory"}',
}
COPILOT_POST = {
    "timestamp": 1704614700000,
    "cwd": "/path/to/project",
    "toolName": "bash",
    "toolArgs": '{"command":"npm test"}',
    "toolResult": {"resultType": "success", "textResultForLlm": "All tests passed (15/15)"},
}
# Its CLI hooks reference: the camelCase input carries `sessionId`; `edit` names `path`.
COPILOT_EDIT = {
    "sessionId": "s-1", "timestamp": 1704614600000, "cwd": "/path/to/project", "toolName": "edit",
    "toolArgs": json.dumps({"path": "src/app.ts", "old_str": "a", "new_str": "b"}),
}  # fmt: skip


def test_copilot_documented_payloads() -> None:
    pre = parsed("copilot", COPILOT_PRE)
    assert (pre.event, pre.tool, pre.kind, pre.command) == (
        "PreToolUse",
        "Bash",
        SHELL,
        "rm -rf dist",
    )
    assert pre.session.startswith("copilot-") and pre.cwd == "/path/to/project"  # no sessionId
    post = parsed("copilot", COPILOT_POST)
    assert (post.event, post.exit) == ("PostToolUse", None)
    edit = parsed("copilot", COPILOT_EDIT)
    assert (edit.tool, edit.kind, edit.files, edit.session) == (
        "Edit",
        WRITE,
        ("src/app.ts",),
        "s-1",
    )
    assert edit.describe() == "edit of src/app.ts"
    failed = parsed(
        "copilot",
        {**COPILOT_EDIT, "toolResult": {"resultType": "failure", "textResultForLlm": "no match"}},
    )
    assert (failed.event, failed.files) == ("PostToolUseFailure", ())


def test_copilot_answers_deny_on_stdout_with_exit_0() -> None:
    code, err, out = answered(
        "copilot", Mapped(b"", "PreToolUse"), (2, "PlanFence blocked edit", "")
    )
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "permissionDecision": "deny",
        "permissionDecisionReason": "PlanFence blocked edit",
    }
    assert answered(
        "copilot", Mapped(b"", "PreToolUse"), (0, "", '{"hookSpecificOutput": {}}')
    ) == (0, "", "")


# Cursor docs, "Hooks" (cursor.com/docs/agent/hooks): the common input fields and the
# beforeShellExecution and beforeReadFile inputs; preToolUse's tool_name/tool_input.
CURSOR_BASE = {
    "conversation_id": "conv-123", "generation_id": "gen-456", "workspace_roots": ["/path/to/project"],
}  # fmt: skip
CURSOR_SHELL = {
    **CURSOR_BASE,
    "hook_event_name": "beforeShellExecution",
    "command": "npm install express",
    "cwd": "/path/to/project",
}
CURSOR_READ = {
    **CURSOR_BASE,
    "hook_event_name": "beforeReadFile",
    "file_path": "/path/to/project/secrets.env",
    "content": "API_KEY=...",
}
CURSOR_EDIT = {
    **CURSOR_BASE, "hook_event_name": "preToolUse", "tool_name": "StrReplace",
    "tool_input": {"file_path": "/path/to/project/main.ts", "old_string": "const foo = 1", "new_string": "const foo = 2"},
}  # fmt: skip


def test_cursor_documented_payloads() -> None:
    shell = parsed("cursor", CURSOR_SHELL)
    assert (shell.event, shell.tool, shell.command, shell.session) == (
        "PreToolUse",
        "Bash",
        "npm install express",
        "conv-123",
    )
    read = parsed("cursor", CURSOR_READ)
    assert (read.event, read.kind, read.reads) == (
        "PostToolUse",
        READ,
        ("/path/to/project/secrets.env",),
    )
    edit = parsed("cursor", CURSOR_EDIT)
    assert (edit.event, edit.tool, edit.files, edit.cwd) == (
        "PreToolUse",
        "Edit",
        ("/path/to/project/main.ts",),
        "/path/to/project",
    )
    assert edit.describe() == "StrReplace of /path/to/project/main.ts"
    after = parsed("cursor", {**CURSOR_EDIT, "hook_event_name": "postToolUse", "tool_output": "ok"})
    assert after.tool_use_id == edit.tool_use_id  # Pre and Post of one call


def test_cursor_answers_a_permission() -> None:
    code, err, out = answered("cursor", Mapped(b"", "PreToolUse"), (2, "stale", ""))
    assert (code, json.loads(out)) == (
        0,
        {"permission": "deny", "user_message": "stale", "agent_message": "stale"},
    )
    assert json.loads(answered("cursor", Mapped(b"", "PreToolUse"), (0, "", ""))[2]) == {
        "permission": "allow"
    }
    after = json.loads(answered("cursor", Mapped(b"", "PostToolUse"), (2, "not recorded", ""))[2])
    assert after == {
        "permission": "allow",
        "additional_context": "not recorded",
    }  # a read is never refused


# Windsurf docs, "Cascade Hooks" (docs.windsurf.com/windsurf/cascade/hooks): the common input
# (agent_action_name, trajectory_id, execution_id, timestamp, tool_info) and each action's
# tool_info.
WINDSURF_BASE = {
    "trajectory_id": "traj-1",
    "execution_id": "exec-1",
    "timestamp": "2026-01-01T00:00:00Z",
}
WINDSURF_WRITE = {
    **WINDSURF_BASE, "agent_action_name": "pre_write_code",
    "tool_info": {"file_path": "/path/to/project/src/foo.ts", "edits": [{"old_string": "a", "new_string": "b"}]},
}  # fmt: skip
WINDSURF_RUN = {
    **WINDSURF_BASE,
    "agent_action_name": "pre_run_command",
    "tool_info": {"command_line": "npm test", "cwd": "/path/to/project"},
}
WINDSURF_READ = {
    **WINDSURF_BASE,
    "agent_action_name": "post_read_code",
    "tool_info": {"file_path": "/path/to/project/src/bar.ts"},
}


def test_windsurf_documented_payloads() -> None:
    write = parsed("windsurf", WINDSURF_WRITE)
    assert (write.event, write.tool, write.kind, write.files) == (
        "PreToolUse",
        "MultiEdit",
        WRITE,
        ("/path/to/project/src/foo.ts",),
    )
    assert (write.cwd, write.session, write.tool_use_id) == (
        "/path/to/project/src",
        "traj-1",
        "windsurf-exec-1",
    )
    assert write.describe() == "write_code of /path/to/project/src/foo.ts"
    after = parsed("windsurf", {**WINDSURF_WRITE, "agent_action_name": "post_write_code"})
    assert (after.event, after.tool_use_id) == ("PostToolUse", "windsurf-exec-1")
    run = parsed("windsurf", WINDSURF_RUN)
    assert (run.tool, run.command, run.cwd) == ("Bash", "npm test", "/path/to/project")
    read = parsed("windsurf", WINDSURF_READ)
    assert (read.event, read.reads) == ("PostToolUse", ("/path/to/project/src/bar.ts",))


def test_windsurf_blocks_by_exit_2_before_and_never_after() -> None:
    assert answered("windsurf", Mapped(b"", "PreToolUse"), (2, "stale", "{}")) == (2, "stale", "")
    assert answered("windsurf", Mapped(b"", "PostToolUse"), (2, "not recorded", "")) == (
        0,
        "not recorded",
        "",
    )


@pytest.mark.parametrize(
    ("client", "path", "expected"),
    [
        (
            "copilot",
            ".github/hooks/planfence.json",
            {
                "version": 1,
                "hooks": {
                    e: [{"type": "command", "bash": "/opt/pf/planfence hook copilot", "timeoutSec": 30}]
                    for e in ("preToolUse", "postToolUse", "sessionStart", "sessionEnd")
                },
            },
        ),
        (
            "cursor",
            ".cursor/hooks.json",
            {
                "version": 1,
                "hooks": {
                    "preToolUse": [{"command": "/opt/pf/planfence hook cursor", "failClosed": True, "matcher": "Write|Edit|StrReplace|MultiEdit|Delete|Shell"}],
                    "beforeShellExecution": [{"command": "/opt/pf/planfence hook cursor", "failClosed": True}],
                    "postToolUse": [{"command": "/opt/pf/planfence hook cursor", "failClosed": True, "matcher": "Write|Edit|StrReplace|MultiEdit|Delete|Shell|Read"}],
                    "beforeReadFile": [{"command": "/opt/pf/planfence hook cursor", "failClosed": True}],
                    "sessionStart": [{"command": "/opt/pf/planfence hook cursor", "failClosed": True}],
                    "sessionEnd": [{"command": "/opt/pf/planfence hook cursor", "failClosed": True}],
                },
            },
        ),
        (
            "windsurf",
            ".windsurf/hooks.json",
            {
                "hooks": {
                    e: [{"command": "/opt/pf/planfence hook windsurf", "show_output": True}]
                    for e in ("pre_write_code", "pre_run_command", "post_write_code", "post_read_code", "post_run_command")
                }
            },
        ),
    ],
)  # fmt: skip
def test_install_writes_each_documented_file_once_and_uninstall_removes_it(
    tmp_path: Path, client: str, path: str, expected: dict[str, Any]
) -> None:
    for _ in range(2):
        written = hookfiles.install(client, tmp_path, command=f"/opt/pf/planfence hook {client}")
    assert written == tmp_path / path
    assert json.loads(written.read_text()) == expected
    assert hookfiles.uninstall(client, tmp_path) == (written, True)
    assert not written.exists()  # nothing but ours was in it


@pytest.mark.parametrize("client", ["copilot", "cursor", "windsurf"])
def test_status_needs_our_handlers_a_command_that_answers_and_an_owner(
    tmp_path: Path, client: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from planfence_net.workspace.installers.clientstatus import client_status

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    root = tmp_path / "proj"
    root.mkdir()
    missing = client_status(client, root)
    assert (missing.state, missing.step) == (
        "missing",
        f"planfence hook install {client} --project {root}",
    )
    hookfiles.install(client, root, command=f"false planfence hook {client}")
    broken = client_status(client, root)
    assert broken.state == "broken" and f"false planfence hook {client} exited 1" in broken.detail
    hookfiles.install(client, root, command=f"true planfence hook {client}")
    assert client_status(client, root).state == "not served"  # the command answers; no owner


# -- Through the lean client (`hook/lean.py`, what `hook install` writes where an owner
# serves the project): the owner maps each client's payload and answers in its form, the
# same bytes as the ordinary `planfence hook CLIENT` --------------------------------------

DOCUMENTED: dict[str, list[dict[str, Any]]] = {
    "copilot": [COPILOT_PRE, COPILOT_POST, COPILOT_EDIT],
    "cursor": [CURSOR_SHELL, CURSOR_READ, CURSOR_EDIT],
    "windsurf": [WINDSURF_WRITE, WINDSURF_RUN, WINDSURF_READ],
    "gemini": [],
    "opencode": [],
}
SESSION_EVENTS: dict[str, list[dict[str, Any]]] = {  # a session's start and end, as each sends
    "gemini": [{"session_id": "s-lean", "cwd": "/path/to/project", "hook_event_name": event}
               for event in ("SessionStart", "SessionEnd")],
    "copilot": [{"sessionId": "s-lean", "timestamp": 0, "cwd": "/path/to/project", **more}
                for more in ({"source": "new"}, {"reason": "complete"})],
    "cursor": [{**CURSOR_BASE, "conversation_id": "s-lean", "hook_event_name": event}
               for event in ("sessionStart", "sessionEnd")],
}  # fmt: skip
LEAN_FILES = {"a.txt": "old\n", "notes.txt": "read\n", "src/foo.ts": "a\n", "main.ts": "x\n"}


def client_payloads(client: str, repo: Path) -> list[bytes]:
    """`client`'s documented payloads in `repo`, and its own calls (`support.native_calls`):
    a session's start, a read, a write of a.txt (the plan's target), a shell command, a write
    of the fence's own file, each before and after, and the session's end."""
    from support.native_calls import calls

    made = calls(client, "s-lean", str(repo))
    pairs = [
        made.read(str(repo / "notes.txt")),
        made.write(str(repo / "a.txt"), "new\n"),
        made.shell("cat notes.txt"),
        made.write(str(repo / ".github" / "hooks" / "x.json"), "{}"),
    ]
    own = [json.dumps(p) for pair in pairs for p in pair if p is not None]
    sessions = [rooted(p, repo) for p in SESSION_EVENTS.get(client, [])]
    documented = [rooted(p, repo) for p in DOCUMENTED[client]]
    return [text.encode() for text in (*sessions[:1], *documented, *own, *sessions[1:])]


def untimed(text: bytes) -> bytes:
    """`text` with its instants (an intent's end, `... UTC`) as TIME: the two runs' differ."""
    return re.sub(rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", b"TIME", text)


def rooted(value: dict[str, Any], repo: Path) -> str:
    """`value` as JSON, its documentation's project folder replaced by `repo`."""
    return json.dumps(value).replace("/path/to/project", str(repo))


def hook_answers(
    client: str, path: Path, payloads: list[bytes], lean: bool
) -> list[tuple[int, bytes, bytes]]:
    """(exit code, stdout, stderr) of each of `client`'s `payloads`, without and with `--plan
    p`, and in automatic mode, in a fresh served repository at `path` with plan `p` (a.txt) trusted: through the
    lean client (each answered by the owner) or the ordinary hook."""
    from planfence_net.workspace.installers.leanhook import lean_argv
    from support.cluster import PLANFENCE
    from support.workspace import hook_calls, make_repo, run_cli, served

    repo = make_repo(path, LEAN_FILES)
    got = []
    with served(repo):
        assert run_cli("workspace", "trust", "p", "--target", "a.txt", cwd=repo)[0] == 0
        for options in ((), ("--plan", "p"), ("--mode", "auto")):
            ordinary = [str(PLANFENCE), "hook", client, *options]
            argv = lean_argv(ordinary, repo) if lean else ordinary
            assert (argv[1:3] == ["-I", "-S"]) is lean and argv[-len(ordinary) :] == ordinary
            for data in payloads:
                before = hook_calls(repo)
                proc = subprocess.run(argv, input=data, capture_output=True, timeout=60)
                assert hook_calls(repo) == before + lean, data  # lean: the owner answered it
                got.append((proc.returncode, untimed(proc.stdout), untimed(proc.stderr)))
    shutil.rmtree(path)
    return got


@pytest.mark.parametrize("client", ["gemini", "opencode", "copilot", "cursor", "windsurf"])
def test_the_lean_client_answers_every_payload_as_the_ordinary_hook(
    tmp_path: Path, client: str
) -> None:
    """The same calls, in the same order, in the same place (a repository made anew, as
    every call changes what the next one sees): the same bytes either way."""
    payloads = client_payloads(client, tmp_path / "repo")
    lean = hook_answers(client, tmp_path / "repo", payloads, lean=True)
    assert lean == hook_answers(client, tmp_path / "repo", payloads, lean=False)
    assert {code for code, _, _ in lean} >= {0}
    blocked = [a for a in lean if a[0] == 2 or b"deny" in a[1] or b"additionalContext" in a[1]]
    assert blocked and len(blocked) < len(lean)  # both allowed and blocked calls among them
