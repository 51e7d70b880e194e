"""What a hook payload asks for (pure): which tool, which files, which command.

Both agents send one JSON object on stdin: `session_id`, `cwd`, `hook_event_name`,
`tool_name`, `tool_input`, `tool_use_id`, and for a subagent's call `agent_id` and
`agent_type`. Claude Code's Write/Edit/MultiEdit carry `tool_input.file_path` (NotebookEdit
`notebook_path`); Bash, PowerShell and Codex's `apply_patch` carry `tool_input.command` (for
apply_patch, the patch text, whose `*** Add/Update/Delete File:` and `*** Move to:` headers
name the files). Tools that change nothing (READ_ONLY) pass unchecked; any other tool the hook does not
know (an MCP tool `mcp__SERVER__TOOL`, Codex's `shell`, ...) is `unknown`: the cluster's
policy blocks it, checks it like a shell command, or lets it through. A PostToolUse payload (the same
fields, after the call ran) of a file-changing tool asks the hook to record the agent's own
edit. A SessionStart payload (both agents; Codex adds `model`, `permission_mode` and
`source`) carries no tool: the hook may join the worktree and start the session's plan; nor
does a SessionEnd payload (Codex: `reason`, no `model`): the hook ends the session's intents.
Anything malformed raises PayloadError: the hook blocks.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from typing import Any

AGENTS = ("claude", "codex")
FILE_TOOLS = {
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
}
COMMAND_TOOLS = ("Bash", "PowerShell", "apply_patch")
SHELLS = ("Bash", "PowerShell")
MCP_PREFIX = "mcp__"
# Tools that change nothing in a worktree: let through without a check. Every other tool
# the hook does not know (an MCP tool, Codex's `shell`, ...) is decided by the cluster's
# policy (`config.HookPolicy`): blocked unless the user allowed or asked to check it.
READ_ONLY = frozenset(
    (
        "Read", "Grep", "Glob", "LS", "NotebookRead", "WebFetch", "WebSearch", "TodoWrite",
        "TodoRead", "Task", "Agent", "ExitPlanMode", "EnterPlanMode", "BashOutput",
        "KillShell", "KillBash", "AskUserQuestion", "Skill", "SlashCommand",
        "ListMcpResourcesTool", "ReadMcpResourceTool", "view_image", "update_plan",
    )
)  # fmt: skip
EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure", "SessionStart", "SessionEnd")
SESSION_EVENTS = ("SessionStart", "SessionEnd")  # no tool: the session begins or ends
AFTER = ("PostToolUse", "PostToolUseFailure")  # Claude Code: a call that failed (exit != 0)
READ_TOOLS = {"Read": "file_path", "NotebookRead": "notebook_path"}
_EXIT_CODE = re.compile(r"\bExit code (\d+)\b")
_PATCH_HEADER = re.compile(
    r"^\*\*\* (?:Add File|Update File|Delete File|Move to): (.+?)\s*$", re.MULTILINE
)


class PayloadError(ValueError):
    """The payload is not a PreToolUse call we can read; the message says why."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call, before (`event` PreToolUse) or after (PostToolUse) it ran. `gated` is
    False for calls the hook lets through unchecked (Read, Grep, ...)."""

    agent: str
    event: str
    session: str
    cwd: str
    tool: str
    files: tuple[str, ...]
    command: str | None
    gated: bool
    agent_id: str | None = None
    agent_type: str | None = None
    tool_use_id: str | None = None
    unknown: bool = False  # a tool the hook does not know: the cluster's policy decides
    reads: tuple[str, ...] = ()  # the file a reading tool read (Read, NotebookRead)
    exit: int | None = None  # after a shell command: its exit code, when the agent says
    shown: tuple[str, ...] = ()  # after a search or diff: the files its output showed (`shown`)

    def subagent(self) -> str:
        """` (subagent ID, TYPE)` for a subagent's call, else ""."""
        if not self.agent_id:
            return ""
        return f" (subagent {self.agent_id}" + (f", {self.agent_type})" if self.agent_type else ")")

    def describe(self) -> str:
        """`Edit of src/auth.ts`, `Bash \\`npm test\\``, for the reason shown to the model."""
        if self.files:
            return f"{self.tool} of {', '.join(self.files)}"
        if self.command is not None and self.tool in SHELLS:
            short = self.command if len(self.command) <= 60 else self.command[:57] + "..."
            return f"{self.tool} `{short}`"
        return self.tool


def parse_payload(agent: str, data: bytes) -> ToolCall:
    """Read a PreToolUse or PostToolUse payload of `agent` ("claude" or "codex"); raises
    PayloadError."""
    if agent not in AGENTS:
        raise PayloadError(f"unknown agent {agent!r} (expected claude or codex)")
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PayloadError(f"stdin is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise PayloadError("stdin is not a JSON object")
    event = value.get("hook_event_name")
    if event not in EVENTS:
        raise PayloadError(f"hook_event_name is {event!r}, not 'PreToolUse' or 'PostToolUse'")
    session, cwd = value.get("session_id", ""), value.get("cwd")
    ids: dict[str, Any] = {
        f: v if isinstance(v := value.get(f), str) and v else None
        for f in ("agent_id", "agent_type", "tool_use_id")
    }
    if event in SESSION_EVENTS:
        if not isinstance(cwd, str) or not cwd:
            raise PayloadError("cwd is missing")
        return ToolCall(agent, event, str(session), cwd, "", (), None, False, **ids)
    tool, tool_input = value.get("tool_name"), value.get("tool_input")
    if not isinstance(tool, str) or not tool:
        raise PayloadError("tool_name is missing")
    if not isinstance(tool_input, dict):
        raise PayloadError("tool_input is not an object")
    if not isinstance(cwd, str) or not cwd or not isinstance(session, str):
        raise PayloadError("cwd or session_id is missing")
    files: tuple[str, ...] = ()
    command = None
    if tool in FILE_TOOLS:
        path = tool_input.get(FILE_TOOLS[tool])
        if not isinstance(path, str) or not path:
            raise PayloadError(f"{tool} call without tool_input.{FILE_TOOLS[tool]}")
        files = (path,)
    elif tool in COMMAND_TOOLS:
        command = tool_input.get("command")
        if isinstance(command, list) and all(isinstance(c, str) for c in command):
            command = shlex.join(command)  # Codex may send argv
        if not isinstance(command, str) or not command:
            raise PayloadError(f"{tool} call without tool_input.command")
        if tool == "apply_patch":
            files = tuple(dict.fromkeys(_PATCH_HEADER.findall(command)))
            if not files:
                raise PayloadError("apply_patch call whose patch names no file")
    unknown = tool not in FILE_TOOLS and tool not in COMMAND_TOOLS and tool not in READ_ONLY
    gated = tool not in READ_ONLY
    if tool in SHELLS and command is not None and is_exempt(command, cwd):
        gated = False  # how the agent re-reads its plan and re-trusts after a block
    if tool in SHELLS and command is not None and event == "PreToolUse":
        from .reads import is_read_only

        # `cat lib.py` changes nothing; `git diff` too, where git's configuration starts nothing
        gated = gated and not is_read_only(command, lambda: git_setup(cwd))
    read = tool_input.get(READ_TOOLS.get(tool, ""))
    reads = (read,) if isinstance(read, str) and read else ()
    exit = None
    shown: tuple[str, ...] = ()
    if event == "PostToolUse":
        gated, unknown = bool(files), False  # only edits with named files are recorded
        exit = 0 if agent == "claude" and tool in SHELLS else None  # Codex does not say
        if not files:
            from .shown import shown_paths

            shown = shown_paths(tool, command, value.get("tool_response"))
    elif event == "PostToolUseFailure":
        files, gated, unknown = (), False, False  # the call failed: nothing to record
        error = value.get("error")
        found = _EXIT_CODE.search(error) if isinstance(error, str) else None
        exit = int(found.group(1)) if found else None
    return ToolCall(
        agent,
        event,
        session,
        cwd,
        tool,
        files,
        command,
        gated,
        **ids,
        unknown=unknown,
        reads=reads,
        exit=exit,
        shown=shown,
    )


# `planfence workspace SUBCOMMAND` calls that cannot run a command of the agent's choosing
# (a subcommand -> the options that make it unsafe): `check` only reads; `trust` runs its
# `--evidence`; `join --cluster DIR` would start the owners of any roster.
EXEMPT = {
    "check": (),
    "trust": ("--evidence",),
    "join": ("--cluster",),
    "plans": (),
    "show": (),
}


def is_exempt(command: str, cwd: str) -> bool:
    """True for one plain command (no pipes, `;`, `&&`, substitutions or redirections) that
    runs this installation's own `planfence`, named by a path that resolves to it (a bare
    `planfence` goes through the shell's PATH, aliases and functions, which the hook cannot
    see), with a subcommand of EXEMPT and none of its unsafe options: how a blocked agent
    re-checks, re-trusts and joins. Everything else is checked as the shell command it is."""
    if any(c in command for c in ";&|`$<>\n(){}*?[]~"):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    if len(words) < 3 or "/" not in words[0] or words[1] != "workspace":
        return False
    unsafe = EXEMPT.get(words[2])
    if unsafe is None or any(w.split("=", 1)[0] in unsafe for w in words[3:]):
        return False
    from ...cluster.command import executable

    ours = executable()
    return os.path.isabs(ours) and os.path.realpath(
        os.path.join(cwd, words[0])
    ) == os.path.realpath(ours)


def git_setup(cwd: str) -> frozenset[str]:
    """The configuration triggers (`readonly.TRIGGERS`) of the git repository at `cwd`: what
    its configuration (`git config --list -z`, every scope, includes followed) can make a
    reading git command start, plus "hook" when a post-index-change hook exists and
    "submodule" when the worktree has a .gitmodules. Every trigger when git cannot tell
    (not a repository, git missing, an error): a git command there is checked as a write."""
    from .readonly import TRIGGERS, git_triggers

    outputs = _git_outputs(
        cwd,
        ("rev-parse", "--show-toplevel", "--git-path", "hooks/post-index-change"),
        ("config", "--list", "-z"),
    )
    places, listing = outputs if outputs else (None, None)
    if places is None or listing is None or len(places.splitlines()) != 2:
        return TRIGGERS
    top, hook = places.splitlines()
    found = set(git_triggers(listing))
    if os.path.lexists(os.path.join(cwd, hook)):
        found.add("hook")
    if os.path.lexists(os.path.join(top, ".gitmodules")):
        found.add("submodule")
    return frozenset(found)


def _git_outputs(cwd: str, *commands: tuple[str, ...]) -> list[str | None] | None:
    """The stdout of each git command, run side by side in `cwd` (None for one that failed
    or took over 5 s); None when git could not be started."""
    import subprocess

    procs: list[subprocess.Popen[str]] = []
    try:
        for args in commands:
            procs.append(
                subprocess.Popen(
                    ["git", *args],
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
            )
    except (OSError, ValueError):
        for proc in procs:
            proc.kill()
            proc.communicate()
        return None
    outputs: list[str | None] = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            out = ""
        outputs.append(out if proc.returncode == 0 else None)
    return outputs
