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
A shell command that runs a formatter on named files (FORMATTERS: `black main.py`) names
them as its files: the session's own write, checked and recorded like an Edit.
Anything malformed raises PayloadError: the hook blocks.

This is the one normalized form every client's payload is mapped into (`workspace.clients`:
a row per client turns Gemini CLI's, OpenCode's, Copilot CLI's, Cursor's and Windsurf's
payloads into this shape and the hook's answer back into theirs), so the fence's rules read
one vocabulary: the canonical tools of TOOLS, each of one KIND (read, write, shell, other).
A mapped payload names its `client` (`ToolCall.agent`), the client's own tool name
(`client_tool`, which the reason shown to the model uses) and, after a shell command, its
`exit_code` where the client says it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

AGENTS = ("claude", "codex", "gemini", "opencode", "copilot", "cursor", "windsurf")
READ, WRITE, SHELL, OTHER = "read", "write", "shell", "other"
KINDS = (READ, WRITE, SHELL, OTHER)  # what a tool call does, as every rule below reads it


@dataclass(frozen=True, slots=True)
class Tool:
    """One canonical tool: its KIND and the `tool_input` field naming its file (`path`) or
    its command (`command`). A READ tool without a path changes nothing and names nothing."""

    kind: str
    path: str | None = None
    command: str | None = None


_FREE = Tool(READ)
# The canonical tools: one row each. Claude Code's names; Codex's apply_patch; every other
# client's tools are mapped onto these (`workspace.clients`). Tools that change nothing in a
# worktree (READ) pass unchecked; every other tool the hook does not know (an MCP tool,
# Codex's `shell`, ...) is decided by the cluster's policy (`config.HookPolicy`): blocked
# unless the user allowed or asked to check it.
TOOLS: dict[str, Tool] = {
    "Write": Tool(WRITE, path="file_path"),
    "Edit": Tool(WRITE, path="file_path"),
    "MultiEdit": Tool(WRITE, path="file_path"),
    "NotebookEdit": Tool(WRITE, path="notebook_path"),
    "apply_patch": Tool(WRITE, command="command"),
    "Bash": Tool(SHELL, command="command"),
    "PowerShell": Tool(SHELL, command="command"),
    "Read": Tool(READ, path="file_path"),
    "NotebookRead": Tool(READ, path="notebook_path"),
    **dict.fromkeys(
        (
            "Grep", "Glob", "LS", "WebFetch", "WebSearch", "TodoWrite", "TodoRead", "Task",
            "Agent", "ExitPlanMode", "EnterPlanMode", "BashOutput", "KillShell", "KillBash",
            "AskUserQuestion", "Skill", "SlashCommand", "ListMcpResourcesTool",
            "ReadMcpResourceTool", "view_image", "update_plan",
        ),
        _FREE,
    ),
}  # fmt: skip
FILE_TOOLS = {n: t.path for n, t in TOOLS.items() if t.kind == WRITE and t.path}
COMMAND_TOOLS = tuple(n for n, t in TOOLS.items() if t.command)
SHELLS = tuple(n for n, t in TOOLS.items() if t.kind == SHELL)
READ_ONLY = frozenset(n for n, t in TOOLS.items() if t.kind == READ)
READ_TOOLS = {n: t.path for n, t in TOOLS.items() if t.kind == READ and t.path}
MCP_PREFIX = "mcp__"
EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure", "SessionStart", "SessionEnd")
SESSION_EVENTS = ("SessionStart", "SessionEnd")  # no tool: the session begins or ends
AFTER = ("PostToolUse", "PostToolUseFailure")  # Claude Code: a call that failed (exit != 0)
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
    client_tool: str | None = None  # the client's own name of the tool, where it differs

    @property
    def kind(self) -> str:
        """What the call does (READ, WRITE, SHELL or OTHER: a tool the hook does not know)."""
        known = TOOLS.get(self.tool)
        return known.kind if known is not None else OTHER

    def subagent(self) -> str:
        """` (subagent ID, TYPE)` for a subagent's call, else ""."""
        if not self.agent_id:
            return ""
        return f" (subagent {self.agent_id}" + (f", {self.agent_type})" if self.agent_type else ")")

    def describe(self) -> str:
        """`Edit of src/auth.ts`, `Bash \\`npm test\\``, for the reason shown to the model."""
        tool = self.client_tool or self.tool
        if self.command is not None and self.tool in SHELLS:
            short = self.command if len(self.command) <= 60 else self.command[:57] + "..."
            return f"{tool} `{short}`"
        if self.files:
            return f"{tool} of {', '.join(self.files)}"
        return tool


def parse_payload(
    agent: str, data: bytes, git_facts: Callable[[str], frozenset[str]] | None = None
) -> ToolCall:
    """Read a PreToolUse or PostToolUse payload of `agent` (a client of AGENTS, its payload
    in the normalized form: `workspace.clients.normalized`); raises
    PayloadError. `git_facts(cwd)`: what the repository's git configuration can make a
    reading git command start (`place.gitsetup.git_setup`); without it, anything (a git
    command is then checked as a write)."""
    value, event = _payload_object(agent, data)
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
    files, command = _targets(tool, tool_input)
    if tool in SHELLS and command is not None:
        files = formatter_files(command, cwd)  # a formatter's files: its own write, as an Edit
    unknown = tool not in FILE_TOOLS and tool not in COMMAND_TOOLS and tool not in READ_ONLY
    gated = tool not in READ_ONLY
    if tool in SHELLS and command is not None and is_exempt(command, cwd):
        gated = False  # how the agent re-reads its plan and re-trusts after a block
    elif gated and event == "PreToolUse" and _unchecked_shell(tool, command, cwd, git_facts):
        gated = False
    reads = _reads(tool_input.get(READ_TOOLS.get(tool, "")))
    exit = None
    named = value.get("client_tool")
    client_tool = named if isinstance(named, str) and named and named != tool else None
    shown: tuple[str, ...] = ()
    if event == "PostToolUse":
        gated, unknown = bool(files), False  # only edits with named files are recorded
        said = value.get("exit_code")
        if type(said) is int and tool in SHELLS:
            exit = said  # a mapped client's shell result, where it says
        else:
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
        agent, event, session, cwd, tool, files, command, gated, **ids,
        unknown=unknown, reads=reads, exit=exit, shown=shown, client_tool=client_tool,
    )  # fmt: skip


def _reads(value: Any) -> tuple[str, ...]:
    """The files a reading tool names: one path, or a list of them (a client's multi-file
    read, mapped onto Read); anything else names none."""
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, list):
        return tuple(v for v in value if isinstance(v, str) and v)
    return ()


def _payload_object(agent: str, data: bytes) -> tuple[dict[str, Any], str]:
    """The payload as a JSON object and its hook event; raises PayloadError."""
    if agent not in AGENTS:
        raise PayloadError(f"unknown agent {agent!r} (expected one of {', '.join(AGENTS)})")
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PayloadError(f"stdin is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise PayloadError("stdin is not a JSON object")
    event = value.get("hook_event_name")
    if event not in EVENTS:
        raise PayloadError(f"hook_event_name is {event!r}, not 'PreToolUse' or 'PostToolUse'")
    return value, event


def _targets(tool: str, tool_input: dict[str, Any]) -> tuple[tuple[str, ...], str | None]:
    """The files a file tool (or apply_patch) names and the command a shell tool runs;
    raises PayloadError when the tool's own field is missing."""
    if tool in FILE_TOOLS:
        path = tool_input.get(FILE_TOOLS[tool])
        if not isinstance(path, str) or not path:
            raise PayloadError(f"{tool} call without tool_input.{FILE_TOOLS[tool]}")
        return (path,), None
    if tool not in COMMAND_TOOLS:
        return (), None
    command = tool_input.get("command")
    if isinstance(command, list) and all(isinstance(c, str) for c in command):
        command = shlex.join(command)  # Codex may send argv
    if not isinstance(command, str) or not command:
        raise PayloadError(f"{tool} call without tool_input.command")
    if tool != "apply_patch":
        return (), command
    files = tuple(dict.fromkeys(_PATCH_HEADER.findall(command)))
    if not files:
        raise PayloadError("apply_patch call whose patch names no file")
    return files, command


# Formatters that rewrite the files they name in place: a shell command that is one of them
# (one simple command, no expansion) writes its file operands, so it is checked before and
# recorded after as the session's own write of them, like an Edit: the next write of a
# formatted file is not refused as if a sibling had changed it. Program -> the word that
# makes it rewrite in place (a subcommand, or a flag anywhere), or "" for its default.
FORMATTERS = {
    "black": "", "isort": "", "rustfmt": "", "autopep8": "--in-place", "ruff": "format",
    "gofmt": "-w", "goimports": "-w", "prettier": "--write", "clang-format": "-i",
    "shfmt": "-w", "yapf": "-i",
}  # fmt: skip


def formatter_files(command: str, cwd: str) -> tuple[str, ...]:
    """The files a formatter `command` rewrites (see FORMATTERS): its operands that name a
    file with a suffix, relative inside `cwd` or absolute under it; () for anything else."""
    from .shellwords import NotRead, simple_commands

    try:
        commands = simple_commands(command)
    except NotRead:
        return ()
    if len(commands) != 1 or any(w.glob for w in commands[0]):
        return ()
    program, *args = [w.text for w in commands[0]]
    needed = FORMATTERS.get(os.path.basename(program))
    if needed is None or (
        needed and needed not in (args[:1] if not needed.startswith("-") else args)
    ):
        return ()
    inside = cwd.rstrip("/") + "/"
    return tuple(
        dict.fromkeys(
            a
            for a in args
            if a != needed
            and not a.startswith("-")
            and os.path.splitext(os.path.basename(a))[1]
            and ".." not in a.split("/")
            and (not os.path.isabs(a) or a.startswith(inside))
        )
    )


def _unchecked_shell(
    tool: str,
    command: str | None,
    cwd: str,
    git_facts: Callable[[str], frozenset[str]] | None,
) -> bool:
    """True for a shell command the read-only screen proves changes nothing (`cat lib.py`;
    `git diff` too, where git's configuration starts nothing)."""
    if tool not in SHELLS or command is None:
        return False
    from .readonly import TRIGGERS, is_read_only

    return is_read_only(command, (lambda: git_facts(cwd)) if git_facts is not None else TRIGGERS)


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
