"""GitHub Copilot CLI (npm `@github/copilot`): its hook payloads in the normalized form.

Copilot CLI loads every `.github/hooks/*.json` of the repository and runs a `command` hook
with one JSON object on stdin. With camelCase event names (ours: preToolUse, postToolUse,
postToolUseFailure, sessionStart, sessionEnd) the fields are `sessionId`, `timestamp` (ms),
`cwd`, `toolName`, `toolArgs` (the arguments as a JSON string), after a call `toolResult`
(`resultType`: success, failure, denied; `textResultForLlm`), after a failure `error`. It
gives no id per call (`table.call_id`), and an older payload no `sessionId` (then the
folder is the session). A call is denied only by JSON on stdout with exit 0,
`{"permissionDecision": "deny", "permissionDecisionReason": REASON}`; any other exit code is
logged and skipped (Copilot CLI fails open: docs/HOOKS.md).

    create   Write   path, file_text (content)
    edit     Edit    path, old_str, new_str
    bash     Bash    command
    view     Read    path
    glob, grep, web_fetch, ask_user, task: change nothing in a worktree
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .table import BLOCK, Answer, Client, Native, call_id

_PATH = {"path": "file_path"}
TOOLS = {
    "create": Native("Write", {**_PATH, "file_text": "content"}),
    "edit": Native("Edit", {**_PATH, "old_str": "old_string", "new_str": "new_string"}),
    "bash": Native("Bash"),
    "powershell": Native("PowerShell"),
    "view": Native("Read", _PATH),
    "glob": Native("Glob"),
    "grep": Native("Grep"),
    "web_fetch": Native("WebFetch"),
    "ask_user": Native("AskUserQuestion"),
    "task": Native("Task"),
}
EVENTS = {
    "preToolUse": "PreToolUse",
    "postToolUse": "PostToolUse",
    "postToolUseFailure": "PostToolUseFailure",
    "sessionStart": "SessionStart",
    "sessionEnd": "SessionEnd",
}


def read(value: dict[str, Any]) -> dict[str, Any]:
    """A Copilot CLI payload's fields as ours. Copilot CLI names the event only by the hook
    it runs (`planfence hook copilot` reads it from `hookEventName`, else from the fields:
    a `toolResult` after a call, an `error` after a failure, else before)."""
    cwd = value.get("cwd")
    session = value.get("sessionId") or value.get("session_id")
    if not isinstance(session, str) or not session:
        where = str(cwd).encode()
        session = f"copilot-{hashlib.blake2b(where, digest_size=8).hexdigest()}"
    out: dict[str, Any] = {"session_id": session, "cwd": cwd}
    out["hook_event_name"] = _event(value)
    tool = value.get("toolName")
    if not isinstance(tool, str):
        return out
    args = value.get("toolArgs")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            args = None
    out.update(tool_name=tool, tool_input=args if isinstance(args, dict) else {})
    out["tool_use_id"] = call_id("copilot", out["tool_input"], session, tool)
    result = value.get("toolResult")
    if isinstance(result, dict):
        text = result.get("textResultForLlm")
        out["tool_response"] = text if isinstance(text, str) else ""
        if result.get("resultType") not in (None, "success"):
            out.update(hook_event_name="postToolUseFailure", error=str(text or ""))
    if "error" in value:
        out["error"] = str(value["error"])
    return out


def _event(value: dict[str, Any]) -> str:
    named = value.get("hookEventName") or value.get("hook_event_name")
    if isinstance(named, str) and named:
        return named[0].lower() + named[1:]
    if "toolName" not in value:
        return "sessionEnd" if "reason" in value else "sessionStart"
    if "toolResult" in value:
        return "postToolUse"
    return "postToolUseFailure" if "error" in value else "preToolUse"


def answer(event: str, given: Answer) -> Answer:
    """Ours as Copilot CLI reads it: a block before a call as a `deny` decision on stdout
    with exit 0 (it skips any other exit code); after a call nothing it reads."""
    code, err, _ = given
    if event == "PreToolUse" and code == BLOCK:
        decision = {"permissionDecision": "deny", "permissionDecisionReason": err}
        return 0, "", json.dumps(decision)
    if event == "PreToolUse":
        return 0, "", ""
    return 0, err, ""


ROW = Client("copilot", "GitHub Copilot CLI", EVENTS, TOOLS, read, answer)
