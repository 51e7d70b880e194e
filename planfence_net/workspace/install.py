"""`planfence hook install|uninstall claude|codex`: merge our hooks into an agent's project
config, leaving every other hook as it was.

    claude              PROJECT/.claude/settings.json   {"hooks": {"PreToolUse": [group],
                                                                   "PostToolUse": [group]}}
    codex (json)        PROJECT/.codex/hooks.json       the same event -> groups -> handlers
    codex (toml)        PROJECT/.codex/config.toml      [[hooks.PreToolUse]] with
                                                        [[hooks.PreToolUse.hooks]] tables

PreToolUse checks the plan before a call; PostToolUse records the agent's own edit of a
declared target in its trusted state (see `advance`).

A group is {"matcher": REGEX, "hooks": [{"type": "command", "command": ..., "timeout": S}]}.
Ours is recognised by its command (`... planfence ... hook claude|codex`), so installing twice
leaves one copy and uninstalling removes only ours. In config.toml our tables are appended
as text, so the rest of the file stays byte for byte.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import sys
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from ..core.errors import ConfigError

EVENTS = ("PreToolUse", "PostToolUse")  # check before a call; record the agent's own edit
MATCHERS = {
    "claude": {
        "PreToolUse": "Write|Edit|MultiEdit|NotebookEdit|Bash",
        "PostToolUse": "Write|Edit|MultiEdit|NotebookEdit",
    },
    "codex": {"PreToolUse": "Bash|apply_patch|Edit|Write", "PostToolUse": "apply_patch|Edit|Write"},
}
TIMEOUT = 30  # seconds: the agent's own limit; the hook's deadline is shorter
_MARK = "# PlanFence {event} hook (planfence hook install|uninstall codex --format toml)"
_OUR_TOML = re.compile(
    r"\n?# PlanFence (\w+) hook \(planfence hook install\|uninstall codex "
    r"--format toml\)\n\[\[hooks\.\1\]\]\nmatcher = [^\n]*\n\n"
    r"\[\[hooks\.\1\.hooks\]\]\ntype = \"command\"\ncommand = [^\n]*\n"
    r"timeout = \d+\n"
)
_OURS = re.compile(r"(^|[\s/'\"])(planfence|planfence_net)['\"]?\s+hook\s+(claude|codex)\b")


def config_path(agent: str, project: Path, fmt: str = "json") -> Path:
    """Where `agent` reads project hooks from; raises ConfigError for an unknown combination."""
    if agent == "claude" and fmt == "json":
        return project / ".claude" / "settings.json"
    if agent == "codex" and fmt in ("json", "toml"):
        return project / ".codex" / ("hooks.json" if fmt == "json" else "config.toml")
    raise ConfigError(f"no {fmt} hook config for {agent!r} (claude: json; codex: json, toml)")


def hook_command(agent: str, cluster: Path | None = None) -> str:
    """The command line the agent runs: this installation's `planfence`, by absolute path."""
    exe = Path(sys.executable).parent / "planfence"
    words = [str(exe) if exe.exists() else "planfence", "hook", agent]
    if cluster is not None:
        words += ["--cluster", str(cluster.resolve())]
    return shlex.join(words)


def our_group(agent: str, command: str, event: str = "PreToolUse") -> dict[str, Any]:
    return {
        "matcher": MATCHERS[agent][event],
        "hooks": [{"type": "command", "command": command, "timeout": TIMEOUT}],
    }


def merged(config: dict[str, Any], agent: str, command: str) -> dict[str, Any]:
    """`config` with our group (once) appended to hooks.PreToolUse and hooks.PostToolUse;
    everything else untouched. Raises ConfigError for hooks of an unexpected shape."""
    out = removed(config)
    hooks = out.setdefault("hooks", {})
    for event in EVENTS:
        if not isinstance(hooks, dict) or not isinstance(hooks.setdefault(event, []), list):
            raise ConfigError(f"'hooks' / 'hooks.{event}' has an unexpected shape; not touching it")
        hooks[event].append(our_group(agent, command, event))
    return out


def removed(config: dict[str, Any]) -> dict[str, Any]:
    """`config` without our handlers; a group left empty and empty containers go too."""
    out = copy.deepcopy(config)
    hooks = out.get("hooks")
    if not isinstance(hooks, dict):
        return out
    for event in EVENTS:
        groups = hooks.get(event)
        if not isinstance(groups, list):
            continue
        kept = [g for g in map(_without_ours, groups) if g is not None]
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    if not hooks:
        del out["hooks"]
    return out


def _without_ours(group: Any) -> Any:
    """`group` without our handlers, or None when nothing else was in it."""
    handlers = group.get("hooks") if isinstance(group, dict) else None
    if not isinstance(handlers, list):
        return group
    others = [
        h for h in handlers if not (isinstance(h, dict) and _OURS.search(str(h.get("command", ""))))
    ]
    if len(others) == len(handlers):
        return group
    return {**group, "hooks": others} if others else None


def load(path: Path) -> dict[str, Any]:
    """The config at `path` ({} when missing); raises ConfigError when it does not parse."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    try:
        value = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path} does not parse ({exc}); fix it first, not touching it") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{path} is not an object; not touching it")
    return value


def dump(path: Path, config: dict[str, Any]) -> str:
    """The text written for `config` at `path`."""
    if path.suffix == ".toml":
        return tomli_w.dumps(config)
    return json.dumps(config, indent=2) + "\n"


def install(
    agent: str,
    project: Path,
    *,
    fmt: str = "json",
    command: str | None = None,
    cluster: Path | None = None,
) -> Path:
    """Merge our hook into `agent`'s config under `project`; returns the file written."""
    path = config_path(agent, project, fmt)
    before = load(path)
    config = merged(before, agent, command or hook_command(agent, cluster))
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, _toml_text(path, before, config) if fmt == "toml" else dump(path, config))
    return path


def uninstall(agent: str, project: Path, *, fmt: str = "json") -> tuple[Path, bool]:
    """Remove our hook from `agent`'s config; returns the file and whether it held ours."""
    path = config_path(agent, project, fmt)
    if not path.exists():
        return path, False
    before = load(path)
    after = removed(before)
    if after != before:
        _write(path, _toml_text(path, before, after) if fmt == "toml" else dump(path, after))
    return path, after != before


def toml_block(event: str, group: dict[str, Any]) -> str:
    """Our group as `[[hooks.EVENT]]` and `[[hooks.EVENT.hooks]]` tables."""
    handler = group["hooks"][0]
    return (
        f"\n{_MARK.format(event=event)}\n[[hooks.{event}]]\n"
        f"matcher = {json.dumps(group['matcher'])}\n\n[[hooks.{event}.hooks]]\n"
        f'type = "command"\ncommand = {json.dumps(handler["command"])}\n'
        f"timeout = {handler['timeout']}\n"
    )


def _toml_text(path: Path, before: dict[str, Any], after: dict[str, Any]) -> str:
    """The new config.toml: the old text without our tables, plus ours when `after` has
    them, so others' comments and layout stay. When the text edit would not give exactly
    `after` (an unusual layout), the whole file is rewritten from `after` instead."""
    try:
        text = _OUR_TOML.sub("", path.read_text())
    except FileNotFoundError:
        text = ""
    text = text.rstrip("\n") + "\n" if text.strip() else ""
    others = removed(after).get("hooks", {})
    for event in EVENTS:
        for group in after.get("hooks", {}).get(event, []):
            if group not in others.get(event, []):
                text += toml_block(event, group)
    try:
        if tomllib.loads(text) == after:
            return text.lstrip("\n")
    except tomllib.TOMLDecodeError:
        pass
    return tomli_w.dumps(after)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".planfence-tmp")
    tmp.write_text(text)
    tmp.replace(path)
