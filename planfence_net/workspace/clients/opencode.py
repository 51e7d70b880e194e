"""OpenCode (npm `opencode-ai`, 1.18): the payloads of our own plugin in the normalized form.

OpenCode's hooks are JS plugins; ours (`installers.opencodeplugin`) runs `planfence hook
opencode` from `tool.execute.before` (blocks by throwing: the model reads the message as the
tool's error) and `tool.execute.after` (records; a reason is appended to the tool's output).
It sends the normalized field names with OpenCode's own tool names and arguments:
`hook_event_name` (PreToolUse, PostToolUse), `session_id` (OpenCode's sessionID; a subagent
runs in a session of its own, and OpenCode names no agent), `cwd` (the plugin's directory),
`tool_name`, `tool_input` (the tool's args), `tool_use_id` (its callID), `tool_response`
(after: the tool's output text).

    write        Write        filePath, content
    edit         Edit         filePath, oldString, newString, replaceAll
    multiedit    MultiEdit    filePath, edits [{oldString, newString, replaceAll}]
    apply_patch  apply_patch  patchText (the `*** Begin Patch` format Codex uses)
    bash         Bash         command; `workdir` is the folder it runs in
    read         Read         filePath
    glob, grep, list, webfetch, websearch, todowrite, todoread, skill, question, lsp, task:
    change nothing in a worktree (`task` starts a subagent, whose calls come on their own)
"""

from __future__ import annotations

from typing import Any

from .table import Client, Native, joined

_FILE = {"filePath": "file_path"}
_EDIT = {"oldString": "old_string", "newString": "new_string", "replaceAll": "replace_all"}
TOOLS = {
    "write": Native("Write", _FILE),
    "edit": Native("Edit", {**_FILE, **_EDIT}),
    "multiedit": Native("MultiEdit", _FILE),
    "apply_patch": Native("apply_patch", {"patchText": "command"}),
    "patch": Native("apply_patch", {"patchText": "command"}),
    "bash": Native("Bash"),
    "read": Native("Read", _FILE),
    "glob": Native("Glob"),
    "grep": Native("Grep"),
    "list": Native("LS"),
    "webfetch": Native("WebFetch"),
    "websearch": Native("WebSearch"),
    "todowrite": Native("TodoWrite"),
    "todoread": Native("TodoRead"),
    "skill": Native("Skill"),
    "question": Native("AskUserQuestion"),
    "lsp": Native("LS"),
    "task": Native("Task"),
    "plan_exit": Native("ExitPlanMode"),
}


def read(value: dict[str, Any]) -> dict[str, Any]:
    """Our plugin's payload as ours (still OpenCode's tool names): a shell command's folder,
    a multiedit's edits renamed one by one."""
    out = dict(value)
    tool, tool_input = value.get("tool_name"), value.get("tool_input")
    if not isinstance(tool_input, dict):
        return out
    if tool == "bash":
        out["cwd"] = joined(value.get("cwd"), tool_input.get("workdir"))
    if tool == "multiedit" and isinstance(tool_input.get("edits"), list):
        edits = [
            {_EDIT.get(k, k): v for k, v in e.items()} if isinstance(e, dict) else e
            for e in tool_input["edits"]
        ]
        out["tool_input"] = {**tool_input, "edits": edits}
    return out


ROW = Client("opencode", "OpenCode", {}, TOOLS, read)
