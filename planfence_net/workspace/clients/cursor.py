"""Cursor: its agent hook payloads in the normalized form.

Cursor runs each hook of `.cursor/hooks.json` (or `~/.cursor/hooks.json`) with one JSON
object on stdin: `hook_event_name`, `conversation_id` (the session), `generation_id`,
`workspace_roots`, and per event:

    preToolUse, postToolUse   tool_name, tool_input (postToolUse: tool_output), tool_use_id
                              where Cursor gives one (else `table.call_id`), cwd where given
    beforeShellExecution      command, cwd                 (before a shell command)
    beforeReadFile            file_path, content           (before a read: recorded as read,
                                                            never refused)

A permission hook answers with JSON on stdout, `{"permission": "allow"|"deny",
"user_message", "agent_message"}` (the agent reads `agent_message`); with `"failClosed":
true` on the handler (what `hook install cursor` writes) a hook that cannot run, times out
or prints no answer blocks. After a call the reason goes to the model as
`additional_context`.

    Write, TabWrite        Write      file_path, contents (content)
    Edit, StrReplace       Edit       file_path, old_string, new_string
    MultiEdit              MultiEdit  file_path, edits
    Delete                 Write      file_path (what it leaves cannot be said)
    Shell                  Bash       command; `cwd` the folder it runs in
    Read                   Read       file_path
    Grep, Glob, LS, WebSearch, WebFetch, Task, TodoWrite: change nothing in a worktree
"""

from __future__ import annotations

import json
from typing import Any

from .table import BLOCK, Answer, Client, Native, call_id, joined

TOOLS = {
    "Write": Native("Write", {"contents": "content"}),
    "TabWrite": Native("Write", {"contents": "content"}),
    "Edit": Native("Edit"),
    "StrReplace": Native("Edit"),
    "MultiEdit": Native("MultiEdit"),
    "Delete": Native("Write"),
    "Shell": Native("Bash"),
    "Read": Native("Read"),
    **{
        name: Native(name)
        for name in ("Grep", "Glob", "LS", "WebSearch", "WebFetch", "Task", "TodoWrite")
    },
}
EVENTS = {
    "preToolUse": "PreToolUse",
    "beforeShellExecution": "PreToolUse",
    "beforeReadFile": "PostToolUse",  # a read about to happen: recorded as read
    "postToolUse": "PostToolUse",
    "postToolUseFailure": "PostToolUseFailure",
    "sessionStart": "SessionStart",
    "sessionEnd": "SessionEnd",
}
PERMISSION = ("preToolUse", "beforeShellExecution", "beforeReadFile")  # answered with JSON


def read(value: dict[str, Any]) -> dict[str, Any]:
    """A Cursor payload's fields as ours (still its event and tool names)."""
    event = value.get("hook_event_name")
    roots = value.get("workspace_roots")
    root = roots[0] if isinstance(roots, list) and roots and isinstance(roots[0], str) else None
    session = value.get("conversation_id")
    out: dict[str, Any] = {
        "hook_event_name": event,
        "session_id": session if isinstance(session, str) else "",
        "cwd": value.get("cwd") if isinstance(value.get("cwd"), str) else root,
    }
    if event == "beforeShellExecution":
        out.update(tool_name="Shell", tool_input={"command": value.get("command")})
    elif event == "beforeReadFile":
        out.update(tool_name="Read", tool_input={"file_path": value.get("file_path")})
    else:
        tool_input = value.get("tool_input")
        if isinstance(tool_input, str):
            try:
                tool_input = json.loads(tool_input)
            except ValueError:
                tool_input = None
        out.update(tool_name=value.get("tool_name"), tool_input=tool_input)
        if isinstance(tool_input, dict) and value.get("tool_name") == "Shell":
            out["cwd"] = joined(out["cwd"], tool_input.get("cwd"))
        if "tool_output" in value:
            out["tool_response"] = value["tool_output"]
        if "error" in value:
            out["error"] = str(value["error"])
    given = value.get("tool_use_id")
    if isinstance(given, str) and given:
        out["tool_use_id"] = given
    elif isinstance(out.get("tool_name"), str) and isinstance(out.get("tool_input"), dict):
        out["tool_use_id"] = call_id(
            "cursor", out["tool_input"], out["session_id"], out["tool_name"]
        )
    return out


def answer(event: str, given: Answer) -> Answer:
    """Ours as Cursor reads it: a permission on stdout (exit 0) before a call or a read (a
    read is never refused); after a call the reason as `additional_context`."""
    code, err, _ = given
    if event == "PreToolUse" and code == BLOCK:
        deny = {"permission": "deny", "user_message": err, "agent_message": err}
        return 0, "", json.dumps(deny)
    allow: dict[str, str] = {"permission": "allow"}
    if event != "PreToolUse" and code == BLOCK and err:
        allow["additional_context"] = err  # the call ran (or the read will): only told
    return 0, "", json.dumps(allow)


ROW = Client("cursor", "Cursor", EVENTS, TOOLS, read, answer)
