"""Gemini CLI (npm `@google/gemini-cli`, 0.61): its hook payloads in the normalized form.

Gemini CLI runs a `command` hook with one JSON object on stdin: `session_id`,
`transcript_path`, `cwd`, `hook_event_name` (BeforeTool, AfterTool, SessionStart,
SessionEnd, ...), `timestamp`, and for a tool event `tool_name`, `tool_input` (the model's
arguments) and after it ran `tool_response` (`llmContent`, `returnDisplay`, `error`). It
gives no id per call: `table.call_id` makes one from the session, tool and input, the same
before and after the call. Exit 2 blocks a BeforeTool call and the model reads stderr as the
reason; after a call exit 2 would replace the tool's result, so a reason after a call goes
to the model as `hookSpecificOutput.additionalContext` (appended to the result) instead.

    write_file          Write   file_path, content
    replace             Edit    file_path, old_string, new_string, allow_multiple (replace_all)
    run_shell_command   Bash    command; `dir_path` is the folder it runs in; after it ran,
                                `Exit Code: N` in its output (absent: 0)
    read_file           Read    file_path
    read_many_files     Read    `include` (its plain paths; a glob names no file we can record)
    glob, grep_search, list_directory, web_fetch, google_web_search, write_todos, ask_user,
    activate_skill, enter_plan_mode, exit_plan_mode: change nothing in a worktree
"""

from __future__ import annotations

import re
from typing import Any

from .table import BLOCK, Answer, Client, Native, call_id, context, joined

SHELL = "run_shell_command"
GLOB = re.compile(r"[*?\[{]")
_EXIT = re.compile(r"^Exit Code: (-?\d+)\s*$", re.MULTILINE)

TOOLS = {
    "write_file": Native("Write"),
    "replace": Native("Edit", {"allow_multiple": "replace_all"}),
    SHELL: Native("Bash"),
    "read_file": Native("Read"),
    "read_many_files": Native("Read", {"include": "file_path"}),
    "glob": Native("Glob"),
    "grep_search": Native("Grep"),
    "search_file_content": Native("Grep"),  # its name before 0.20
    "list_directory": Native("LS"),
    "web_fetch": Native("WebFetch"),
    "google_web_search": Native("WebSearch"),
    "write_todos": Native("TodoWrite"),
    "ask_user": Native("AskUserQuestion"),
    "activate_skill": Native("Skill"),
    "enter_plan_mode": Native("EnterPlanMode"),
    "exit_plan_mode": Native("ExitPlanMode"),
}
EVENTS = {"BeforeTool": "PreToolUse", "AfterTool": "PostToolUse"}


def read(value: dict[str, Any]) -> dict[str, Any]:
    """A Gemini CLI payload's fields as ours (still its event and tool names)."""
    out = dict(value)
    tool, tool_input = value.get("tool_name"), value.get("tool_input")
    if not isinstance(tool, str) or not isinstance(tool_input, dict):
        return out
    out["tool_use_id"] = call_id("gemini", tool_input, str(value.get("session_id")), tool)
    if tool == SHELL:
        out["cwd"] = joined(value.get("cwd"), tool_input.get("dir_path"))
    if tool == "read_many_files":
        include = tool_input.get("include")
        given = include if isinstance(include, list) else []
        plain = [p for p in given if isinstance(p, str) and not GLOB.search(p)]
        out["tool_input"] = {**tool_input, "include": plain}
    if value.get("hook_event_name") == "AfterTool":
        out.update(_after(tool, value.get("tool_response")))
    return out


def _after(tool: str, response: Any) -> dict[str, Any]:
    """What a call's `tool_response` tells: a failed call (PostToolUseFailure: it changed
    nothing), a shell command's output and exit code."""
    response = response if isinstance(response, dict) else {}
    text = response.get("llmContent")
    text = text if isinstance(text, str) else ""
    error = response.get("error")
    if tool == SHELL:
        found = _EXIT.search(text)
        return {"tool_response": text, "exit_code": int(found.group(1)) if found else 0}
    if error:
        message = error.get("message") if isinstance(error, dict) else error
        return {"hook_event_name": "PostToolUseFailure", "error": str(message)}
    return {}


def answer(event: str, given: Answer) -> Answer:
    """Ours as Gemini CLI reads it: a block before a call as it is (exit 2, the reason on
    stderr); after a call, the reason as context appended to the tool's result."""
    code, err, out = given
    if code == BLOCK and event in ("PostToolUse", "PostToolUseFailure"):
        return 0, "", context("AfterTool", err)
    return given


ROW = Client("gemini", "Gemini CLI", EVENTS, TOOLS, read, answer)
