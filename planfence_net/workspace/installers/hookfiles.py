"""`planfence hook install|uninstall gemini|copilot|cursor|windsurf`: merge our command hook
into a client's JSON hook file, leaving every other hook as it was. One row per client
(`FILES`): where the file is, its events with their matchers, and the handler's shape.

    gemini    project  ROOT/.gemini/settings.json       user  ~/.gemini/settings.json
              {"hooks": {EVENT: [{"matcher": REGEX, "hooks": [{"name": "planfence",
              "type": "command", "command": ..., "timeout": MS}]}]}}: BeforeTool (the
              writes and the shell), AfterTool (records them; automatic mode: the reads
              too), SessionStart, SessionEnd
    copilot   project  ROOT/.github/hooks/planfence.json (a file of ours: Copilot CLI loads
              every .github/hooks/*.json)
              {"version": 1, "hooks": {EVENT: [{"type": "command", "bash": ...,
              "timeoutSec": S}]}}: preToolUse, postToolUse, sessionStart, sessionEnd
    cursor    project  ROOT/.cursor/hooks.json          user  ~/.cursor/hooks.json
              {"version": 1, "hooks": {EVENT: [{"command": ..., "matcher": ...,
              "failClosed": true}]}}: preToolUse, beforeShellExecution, postToolUse,
              beforeReadFile (automatic mode: the reads), sessionStart, sessionEnd
    windsurf  project  ROOT/.windsurf/hooks.json        user  ~/.codeium/windsurf/hooks.json
              {"hooks": {EVENT: [{"command": ..., "show_output": true}]}}: pre_write_code,
              pre_run_command, post_write_code, post_read_code, post_run_command

Where a workspace owner serves the project, the command is the lean client's line in front
of the ordinary one (`leanhook.lean_line`, as for Codex): the owner answers each call over
its hook socket in the client's own form, and the ordinary command runs where it does not
(`hook/lean.py`). A user-wide install names no one cluster: the ordinary command.

Ours is recognised by its command (`... planfence hook CLIENT ...`) or, in Gemini's file, its
name `planfence`, so installing twice leaves one copy and uninstalling removes only ours.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.errors import ConfigError
from .clients import (
    TIMEOUT,
    check_timeout,
    dump,
    hook_command,
    load,
    project_root,
)
from .leanhook import lean_line

NAME = "planfence"  # our Gemini hook's name: what `hooksConfig.disabled` would list
_OURS = re.compile(r"(^|[\s/'\"])(planfence|planfence_net)['\"]?\s+hook\s+(\w+)\b")


@dataclass(frozen=True, slots=True)
class HookFile:
    """One client's JSON hook file. `events(explicit)`: (event, matcher or None) in the order
    written; `handler(command)`: our handler; `grouped`: events hold groups
    {"matcher", "hooks": [handler]} (Gemini) rather than handlers; `top`: fields the file
    must carry (its `version`)."""

    client: str
    project: Callable[[Path], Path]
    user: Callable[[], Path] | None
    events: Callable[[bool], tuple[tuple[str, str | None], ...]]
    handler: Callable[[str], dict[str, Any]]
    grouped: bool = False
    top: tuple[tuple[str, Any], ...] = ()


def _gemini_events(explicit: bool) -> tuple[tuple[str, str | None], ...]:
    writes = "write_file|replace|run_shell_command"
    after = writes if not explicit else "write_file|replace"
    reads = "" if explicit else "|read_file|read_many_files"
    return (
        ("BeforeTool", f"^({writes})$"),
        ("AfterTool", f"^({after}{reads})$"),
        ("SessionStart", None),
        ("SessionEnd", None),
    )


def _gemini_handler(command: str) -> dict[str, Any]:
    return {"name": NAME, "type": "command", "command": command, "timeout": TIMEOUT * 1000}


def _copilot_events(explicit: bool) -> tuple[tuple[str, str | None], ...]:
    return (
        ("preToolUse", None),
        ("postToolUse", None),
        ("sessionStart", None),
        ("sessionEnd", None),
    )


def _copilot_handler(command: str) -> dict[str, Any]:
    return {"type": "command", "bash": command, "timeoutSec": TIMEOUT}


def _cursor_events(explicit: bool) -> tuple[tuple[str, str | None], ...]:
    return (
        ("preToolUse", "Write|Edit|StrReplace|MultiEdit|Delete|Shell"),
        ("beforeShellExecution", None),
        ("postToolUse", "Write|Edit|StrReplace|MultiEdit|Delete|Shell|Read"),
        *(() if explicit else (("beforeReadFile", None),)),
        ("sessionStart", None),
        ("sessionEnd", None),
    )


def _cursor_handler(command: str) -> dict[str, Any]:
    return {"command": command, "failClosed": True}


def _windsurf_events(explicit: bool) -> tuple[tuple[str, str | None], ...]:
    reads = () if explicit else (("post_read_code", None),)
    return (
        ("pre_write_code", None),
        ("pre_run_command", None),
        ("post_write_code", None),
        *reads,
        ("post_run_command", None),
    )


def _windsurf_handler(command: str) -> dict[str, Any]:
    return {"command": command, "show_output": True}


FILES = {
    "gemini": HookFile(
        "gemini",
        lambda root: root / ".gemini" / "settings.json",
        lambda: Path.home() / ".gemini" / "settings.json",
        _gemini_events,
        _gemini_handler,
        grouped=True,
    ),
    "copilot": HookFile(
        "copilot",
        lambda root: root / ".github" / "hooks" / "planfence.json",
        None,
        _copilot_events,
        _copilot_handler,
        top=(("version", 1),),
    ),
    "cursor": HookFile(
        "cursor",
        lambda root: root / ".cursor" / "hooks.json",
        lambda: Path.home() / ".cursor" / "hooks.json",
        _cursor_events,
        _cursor_handler,
        top=(("version", 1),),
    ),
    "windsurf": HookFile(
        "windsurf",
        lambda root: root / ".windsurf" / "hooks.json",
        lambda: Path.home() / ".codeium" / "windsurf" / "hooks.json",
        _windsurf_events,
        _windsurf_handler,
    ),
}


def row(client: str) -> HookFile:
    """The row of `client`; raises ConfigError for a client without a hook file."""
    found = FILES.get(client)
    if found is None:
        raise ConfigError(f"no hook file for {client!r} (expected one of {', '.join(FILES)})")
    return found


def config_path(client: str, root: Path, *, user: bool = False) -> Path:
    """Where `client` reads the hooks we write; raises ConfigError when it has no user file."""
    spec = row(client)
    if not user:
        return spec.project(root)
    if spec.user is None:
        raise ConfigError(f"{client} has no user-scope hook file: install it per project")
    return spec.user()


def is_ours(handler: Any, client: str) -> bool:
    """True for a handler of ours in `client`'s file."""
    if not isinstance(handler, dict):
        return False
    if client == "gemini" and handler.get("name") == NAME:
        return True
    command = str(handler.get("command") or handler.get("bash") or "")
    found = _OURS.search(command)
    return found is not None and found.group(3) == client


def removed(config: dict[str, Any], client: str) -> dict[str, Any]:
    """`config` without our handlers; a group or event left empty goes too."""
    spec = row(client)
    out = copy.deepcopy(config)
    hooks = out.get("hooks")
    if not isinstance(hooks, dict):
        return out
    for event in list(hooks):
        entries = hooks[event]
        if not isinstance(entries, list):
            continue
        kept = []
        for entry in entries:
            if spec.grouped and isinstance(entry, dict) and isinstance(entry.get("hooks"), list):
                others = [h for h in entry["hooks"] if not is_ours(h, client)]
                if others:
                    kept.append(
                        {**entry, "hooks": others} if len(others) < len(entry["hooks"]) else entry
                    )
            elif not is_ours(entry, client):
                kept.append(entry)
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    if not hooks:
        del out["hooks"]
    return out


def merged(config: dict[str, Any], client: str, command: str, explicit: bool) -> dict[str, Any]:
    """`config` with our handler (once) on each of our events; everything else untouched.
    Raises ConfigError for hooks of an unexpected shape."""
    spec = row(client)
    out = removed(config, client)
    for key, value in spec.top:
        out.setdefault(key, value)
    hooks = out.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise ConfigError("'hooks' has an unexpected shape; not touching it")
    ours = spec.handler(command)
    for event, matcher in spec.events(explicit):
        entries = hooks.setdefault(event, [])
        if not isinstance(entries, list):
            raise ConfigError(f"'hooks.{event}' has an unexpected shape; not touching it")
        if spec.grouped:
            entries.append({**({"matcher": matcher} if matcher else {}), "hooks": [ours]})
        else:
            entries.append({**ours, **({"matcher": matcher} if matcher else {})})
    return out


def install(
    client: str,
    project: Path,
    *,
    cluster: Path | None = None,
    user: bool = False,
    timeout: float | None = None,
    explicit: bool = False,
    command: str | None = None,
) -> Path:
    """Merge our hooks into `client`'s file (see module doc); returns the file written.
    `command` replaces our command line (tests, docs). Raises ConfigError."""
    check_timeout(timeout)
    root = project_root(project)
    path = config_path(client, root, user=user)
    ordinary = hook_command(client, cluster, user, timeout, explicit)
    line = command or lean_line(ordinary, None if user else root, cluster)
    config = merged(load(path), client, line, explicit)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, dump(path, config))
    return path


def uninstall(client: str, project: Path, *, user: bool = False) -> tuple[Path, bool]:
    """Remove our hooks from `client`'s file; returns the file and whether it held ours (a
    file of ours left with no hooks is removed)."""
    path = config_path(client, project_root(project), user=user)
    if not path.exists():
        return path, False
    before = load(path)
    after = removed(before, client)
    if after == before:
        return path, False
    if not after.get("hooks") and set(after) <= {k for k, _ in row(client).top}:
        path.unlink()
    else:
        _write(path, dump(path, after))
    return path, True


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".planfence-tmp")
    tmp.write_text(text)
    tmp.replace(path)


def install_client(
    client: str,
    project: Path,
    *,
    cluster: Path | None = None,
    user: bool = False,
    timeout: float | None = None,
    explicit: bool = False,
) -> Path:
    """`hook install CLIENT` for a client of FILES or OpenCode (our plugin,
    `opencodeplugin`); returns the file written. Raises ConfigError."""
    if client == "opencode":
        from .opencodeplugin import install as install_plugin

        return install_plugin(
            project, cluster=cluster, user=user, timeout=timeout, explicit=explicit
        )
    return install(client, project, cluster=cluster, user=user, timeout=timeout, explicit=explicit)


def uninstall_client(client: str, project: Path, *, user: bool = False) -> tuple[Path, bool]:
    """`hook uninstall CLIENT` for a client of FILES or OpenCode; returns the file and whether
    ours was there."""
    if client == "opencode":
        from .opencodeplugin import uninstall as uninstall_plugin

        return uninstall_plugin(project, user=user)
    return uninstall(client, project, user=user)
