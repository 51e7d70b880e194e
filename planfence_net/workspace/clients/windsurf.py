"""Windsurf Cascade: its hook payloads in the normalized form.

Cascade runs each hook of `.windsurf/hooks.json` (user: `~/.codeium/windsurf/hooks.json`)
with one JSON object on stdin: `agent_action_name` (the event), `trajectory_id` (the
session), `execution_id` (one action, the same before and after it), `timestamp`, and
`tool_info`:

    pre_write_code, post_write_code   file_path, edits [{old_string, new_string}]
    pre_run_command, post_run_command command_line, cwd
    pre_read_code, post_read_code     file_path (post_read_code: and the content read)

Exit 2 blocks a pre_ hook's action and Cascade shows stderr (with `show_output`); a hook
that cannot start or fails otherwise lets the action run (docs/HOOKS.md). Edits have no
folder: the written file's own is the call's cwd.
"""

from __future__ import annotations

import os
from typing import Any

from .table import Answer, Client, Native, call_id

EVENTS = {
    "pre_write_code": "PreToolUse",
    "pre_run_command": "PreToolUse",
    "post_write_code": "PostToolUse",
    "post_run_command": "PostToolUse",
    "post_read_code": "PostToolUse",
}
TOOLS = {
    "write_code": Native("MultiEdit"),
    "run_command": Native("Bash"),
    "read_code": Native("Read"),
}


def read(value: dict[str, Any]) -> dict[str, Any]:
    """A Cascade payload's fields as ours (its action, e.g. `pre_write_code`, names both the
    event and the tool, `write_code`)."""
    action = value.get("agent_action_name")
    info = value.get("tool_info")
    info = info if isinstance(info, dict) else {}
    session = value.get("trajectory_id")
    out: dict[str, Any] = {
        "hook_event_name": action,
        "session_id": session if isinstance(session, str) else "",
    }
    tool = action.split("_", 1)[1] if isinstance(action, str) and "_" in action else None
    path = info.get("file_path")
    if tool == "run_command":
        out.update(cwd=info.get("cwd"), tool_input={"command": info.get("command_line")})
    elif tool in ("write_code", "read_code"):
        out["cwd"] = (
            os.path.dirname(path) if isinstance(path, str) and os.path.isabs(path) else None
        )
        out["tool_input"] = {
            "file_path": path,
            **({"edits": info["edits"]} if "edits" in info else {}),
        }
    if tool is None:
        return out
    out["tool_name"] = tool
    execution = value.get("execution_id")
    if isinstance(execution, str) and execution:
        out["tool_use_id"] = f"windsurf-{execution}"
    elif isinstance(out.get("tool_input"), dict):
        out["tool_use_id"] = call_id("windsurf", out["tool_input"], out["session_id"], tool)
    return out


def answer(event: str, given: Answer) -> Answer:
    """Ours as Cascade reads it: exit 2 with the reason on stderr before an action; after
    one, nothing blocks (exit 0), the reason shown."""
    code, err, _ = given
    if event == "PreToolUse":
        return code, err, ""
    return 0, err, ""


ROW = Client("windsurf", "Windsurf Cascade", EVENTS, TOOLS, read, answer)
