"""Tool calls in each client's own hook payloads, for the stale-write benchmark
(scripts/bench-stale-writes) and its test: a read, a write and a shell command, before and
after they run, shaped as each client sends them (`workspace.clients` maps them), and how
each client's answer says "refused".

    calls(client, session, cwd)   a Calls: .read(path), .write(path, content),
                                  .shell(command): each (before, after) payloads, or None
                                  where the client records the call only after it ran
    refused(client, code, stdout) whether the hook's answer refuses the call, as the client
                                  reads it (exit 2, or a deny on stdout)
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CLIENTS = ("claude", "codex", "gemini", "opencode", "copilot", "cursor", "windsurf")
Payload = dict[str, Any]
Pair = tuple[Payload | None, Payload]  # (before the call, after it)
_ids = itertools.count(1)


@dataclass(frozen=True)
class Calls:
    """One session's calls in one client's payloads."""

    read: Callable[[str], Pair]
    write: Callable[[str, str], Pair]
    shell: Callable[[str], Pair]


def _claude(session: str, cwd: str, shell_tool: str = "Bash") -> Calls:
    def pair(tool: str, tool_input: Payload) -> Pair:
        base = {"session_id": session, "cwd": cwd, "tool_name": tool, "tool_input": tool_input}
        base["tool_use_id"] = f"toolu_{next(_ids):06d}"
        return {**base, "hook_event_name": "PreToolUse"}, {
            **base, "hook_event_name": "PostToolUse", "tool_response": {}
        }  # fmt: skip

    return Calls(
        read=lambda p: pair("Read", {"file_path": p}),
        write=lambda p, c: pair("Write", {"file_path": p, "content": c}),
        shell=lambda c: pair(shell_tool, {"command": c}),
    )


def _codex(session: str, cwd: str) -> Calls:
    claude = _claude(session, cwd)

    def write(path: str, content: str) -> Pair:
        patch = (
            f"*** Begin Patch\n*** Add File: {path}\n"
            + "".join(f"+{line}\n" for line in content.splitlines())
            + "*** End Patch\n"
        )
        before, after = claude.shell(patch)
        for p in (before, after):
            assert p is not None
            p["tool_name"] = "apply_patch"
        return before, after

    return Calls(read=lambda p: claude.shell(f"cat {p}"), write=write, shell=claude.shell)


def _gemini(session: str, cwd: str) -> Calls:
    def pair(tool: str, tool_input: Payload) -> Pair:
        base = {"session_id": session, "transcript_path": "/t", "cwd": cwd, "timestamp": "0",
                "tool_name": tool, "tool_input": tool_input}  # fmt: skip
        response = {"llmContent": "ok", "returnDisplay": "ok"}
        return {**base, "hook_event_name": "BeforeTool"}, {
            **base, "hook_event_name": "AfterTool", "tool_response": response
        }  # fmt: skip

    return Calls(
        read=lambda p: pair("read_file", {"file_path": p}),
        write=lambda p, c: pair("write_file", {"file_path": p, "content": c}),
        shell=lambda c: pair("run_shell_command", {"command": c}),
    )


def _opencode(session: str, cwd: str) -> Calls:
    def pair(tool: str, tool_input: Payload) -> Pair:
        base = {"session_id": session, "cwd": cwd, "tool_name": tool, "tool_input": tool_input,
                "tool_use_id": f"call_{next(_ids):06d}"}  # fmt: skip
        return {**base, "hook_event_name": "PreToolUse"}, {
            **base, "hook_event_name": "PostToolUse", "tool_response": "ok"
        }  # fmt: skip

    return Calls(
        read=lambda p: pair("read", {"filePath": p}),
        write=lambda p, c: pair("write", {"filePath": p, "content": c}),
        shell=lambda c: pair("bash", {"command": c}),
    )


def _copilot(session: str, cwd: str) -> Calls:
    def pair(tool: str, args: Payload) -> Pair:
        base = {"sessionId": session, "timestamp": 0, "cwd": cwd, "toolName": tool,
                "toolArgs": json.dumps(args)}  # fmt: skip
        result = {"resultType": "success", "textResultForLlm": "ok"}
        return base, {**base, "toolResult": result}

    return Calls(
        read=lambda p: pair("view", {"path": p}),
        write=lambda p, c: pair("create", {"path": p, "file_text": c}),
        shell=lambda c: pair("bash", {"command": c}),
    )


def _cursor(session: str, cwd: str) -> Calls:
    common = {"conversation_id": session, "generation_id": "g", "workspace_roots": [cwd]}

    def pair(tool: str, tool_input: Payload) -> Pair:
        base = {**common, "tool_name": tool, "tool_input": tool_input, "cwd": cwd}
        return {**base, "hook_event_name": "preToolUse"}, {
            **base, "hook_event_name": "postToolUse", "tool_output": "ok"
        }  # fmt: skip

    def read(path: str) -> Pair:  # Cursor says so before the read: recorded then
        return None, {
            **common,
            "hook_event_name": "beforeReadFile",
            "file_path": path,
            "content": "",
        }

    return Calls(
        read=read,
        write=lambda p, c: pair("Write", {"file_path": p, "contents": c}),
        shell=lambda c: pair("Shell", {"command": c}),
    )


def _windsurf(session: str, cwd: str) -> Calls:
    def pair(action: str, info: Payload) -> Pair:
        base = {"trajectory_id": session, "execution_id": f"exec-{next(_ids):06d}",
                "timestamp": "0", "tool_info": info}  # fmt: skip
        return {**base, "agent_action_name": f"pre_{action}"}, {
            **base, "agent_action_name": f"post_{action}"
        }  # fmt: skip

    def read(path: str) -> Pair:
        return None, pair("read_code", {"file_path": path})[1]

    return Calls(
        read=read,
        write=lambda p, c: pair(
            "write_code", {"file_path": p, "edits": [{"old_string": "", "new_string": c}]}
        ),
        shell=lambda c: pair("run_command", {"command_line": c, "cwd": cwd}),
    )


BUILDERS: dict[str, Callable[[str, str], Calls]] = {
    "claude": _claude, "codex": _codex, "gemini": _gemini, "opencode": _opencode,
    "copilot": _copilot, "cursor": _cursor, "windsurf": _windsurf,
}  # fmt: skip


def calls(client: str, session: str, cwd: str) -> Calls:
    """`client`'s calls for `session` working in `cwd` (absolute file paths in the calls)."""
    return BUILDERS[client](session, cwd)


def refused(client: str, code: int, stdout: str) -> bool:
    """Whether the hook's answer (exit `code`, `stdout`) refuses the call for `client`."""
    if client in ("copilot", "cursor"):
        try:
            said = json.loads(stdout) if stdout.strip() else {}
        except ValueError:
            return True  # an answer the client cannot read: Cursor fails closed on it
        return said.get("permissionDecision") == "deny" or said.get("permission") == "deny"
    return code == 2
