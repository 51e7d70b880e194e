"""One row per client (pure): how its hook payload maps into the normalized form
(`model.payload`: Claude Code's field names, the canonical tools of `payload.TOOLS`) and how
the hook's answer (exit code, the reason on stderr, Claude Code's JSON on stdout) maps back.

    claude, codex   the normalized form is theirs: nothing to map
    gemini          Gemini CLI: BeforeTool/AfterTool, write_file, replace, run_shell_command, ...
    opencode        our own plugin's payload (`clients.opencode`): OpenCode's tool names
    copilot         GitHub Copilot CLI: preToolUse/postToolUse, toolName, toolArgs (a string)
    cursor          Cursor: preToolUse, beforeShellExecution, beforeReadFile, postToolUse
    windsurf        Windsurf Cascade: pre_write_code, pre_run_command, post_read_code, ...

A row is data plus two small functions; `normalized` and `answered` are the only doors, so
adding a client is a row here, an installer and a status check. Mapping never raises: what
cannot be mapped is passed on as it came, and the payload parser refuses it (the hook blocks).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Answer = tuple[int, str, str]  # exit code, stderr, stdout: what the hook prints and returns
ALLOW, BLOCK = 0, 2


@dataclass(frozen=True, slots=True)
class Native:
    """A client's tool as a canonical one: the canonical name and the client's input fields
    renamed (`fields`: its field -> ours; fields not named are kept as they are)."""

    tool: str
    fields: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Client:
    """One client. `events`: its hook event names -> ours; `tools`: its tool names -> ours;
    `read(value)`: its payload's own fields -> ours (`session_id`, `cwd`, `hook_event_name`,
    `tool_name`, `tool_input`, ...: still its event and tool names, renamed after);
    `answer(event, answer)`: ours -> what it reads, `event` being ours. A row with no
    `read` takes the normalized form as it is (Claude Code, Codex)."""

    name: str
    title: str
    events: Mapping[str, str] = field(default_factory=dict)
    tools: Mapping[str, Native] = field(default_factory=dict)
    read: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    answer: Callable[[str, Answer], Answer] | None = None


@dataclass(frozen=True, slots=True)
class Mapped:
    """A payload in the normalized form (`data`) and its event (ours; "" when unknown)."""

    data: bytes | BaseException
    event: str = ""


_IDENTITY = {"claude": Client("claude", "Claude Code"), "codex": Client("codex", "Codex")}
MODULES = ("gemini", "opencode", "copilot", "cursor", "windsurf")  # rows in their own modules


def client(name: str) -> Client | None:
    """The row of client `name`, or None for a name no row has."""
    if name in _IDENTITY:
        return _IDENTITY[name]
    if name not in MODULES:
        return None
    row: Client = importlib.import_module(f"{__package__}.{name}").ROW
    return row


def normalized(name: str, data: bytes | BaseException) -> Mapped:
    """`data` (client `name`'s payload, or the error reading it) in the normalized form.
    Never raises: a payload that is not a JSON object, or of an unknown client, is passed on
    as it came (the parser refuses it with its reason)."""
    row = client(name)
    if row is None or row.read is None or isinstance(data, BaseException):
        return Mapped(data)
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return Mapped(data)
    if not isinstance(value, dict):
        return Mapped(data)
    try:
        ours = canonical(row, row.read(value))
        return Mapped(json.dumps(ours).encode(), str(ours.get("hook_event_name", "")))
    except Exception:  # a payload of an unexpected shape: the parser refuses it (blocks)
        return Mapped(data)


def canonical(row: Client, value: dict[str, Any]) -> dict[str, Any]:
    """`value` (a row's `read` of a payload) with its event and tool renamed to ours."""
    out = dict(value)
    event = out.get("hook_event_name")
    if isinstance(event, str):
        out["hook_event_name"] = row.events.get(event, event)
    tool, tool_input = out.get("tool_name"), out.get("tool_input")
    native = row.tools.get(tool) if isinstance(tool, str) else None
    if isinstance(tool, str):
        out["client_tool"] = tool
    if native is not None:
        out["tool_name"] = native.tool
        if isinstance(tool_input, dict):
            out["tool_input"] = {native.fields.get(k, k): v for k, v in tool_input.items()}
    return out


def answered(name: str, mapped: Mapped, answer: Answer) -> Answer:
    """The hook's `answer` as client `name` reads it. A payload whose event the hook could
    not read (not JSON, over the size cap, a hook that cannot start) is answered as before a
    call, the side that blocks: after a call the clients read a block as a note, and some
    skip an exit code they do not expect (Copilot CLI runs the call)."""
    row = client(name)
    if row is None or row.answer is None:
        return answer
    return row.answer(mapped.event or "PreToolUse", answer)


def call_id(name: str, value: dict[str, Any], session: str, tool: str) -> str:
    """An id for a call whose client gives none, the same before and after it ran: the
    client, the session, the tool and its input (two identical calls share it, harmlessly:
    they name the same files)."""
    text = json.dumps([session, tool, value], sort_keys=True, default=str)
    return f"{name}-{hashlib.blake2b(text.encode(), digest_size=12).hexdigest()}"


def joined(cwd: Any, folder: Any) -> Any:
    """`folder` (a tool's own working folder, relative to `cwd`) as the call's cwd."""
    if isinstance(cwd, str) and isinstance(folder, str) and folder:
        return os.path.normpath(os.path.join(cwd, folder))
    return cwd


def context(event: str, text: str) -> str:
    """Claude Code's JSON that tells the model `text` (`additionalContext`)."""
    return json.dumps({"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}})
