"""`planfence hook install|uninstall claude|codex`: merge our PreToolUse hook into an agent's
project config, leaving every other hook as it was.

    claude              PROJECT/.claude/settings.json   {"hooks": {"PreToolUse": [group]}}
    codex (json)        PROJECT/.codex/hooks.json       the same event -> groups -> handlers
    codex (toml)        PROJECT/.codex/config.toml      [[hooks.PreToolUse]] with
                                                        [[hooks.PreToolUse.hooks]] tables

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

from ..errors import ConfigError

MATCHERS = {"claude": "Write|Edit|MultiEdit|NotebookEdit|Bash",
            "codex": "Bash|apply_patch|Edit|Write"}
TIMEOUT = 30  # seconds: the agent's own limit; the hook's deadline is shorter
_MARK = "# PlanFence PreToolUse hook (planfence hook install|uninstall codex --format toml)"
_OUR_TOML = re.compile(r"\n?" + re.escape(_MARK) + r"\n\[\[hooks\.PreToolUse\]\]\n"
                       r"matcher = [^\n]*\n\n\[\[hooks\.PreToolUse\.hooks\]\]\n"
                       r"type = \"command\"\ncommand = [^\n]*\ntimeout = \d+\n")
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


def our_group(agent: str, command: str) -> dict[str, Any]:
    return {"matcher": MATCHERS[agent],
            "hooks": [{"type": "command", "command": command, "timeout": TIMEOUT}]}


def merged(config: dict[str, Any], agent: str, command: str) -> dict[str, Any]:
    """`config` with our group (once) appended to hooks.PreToolUse; others untouched."""
    out = removed(config)
    hooks = out.setdefault("hooks", {})
    if not isinstance(hooks, dict) or not isinstance(hooks.setdefault("PreToolUse", []), list):
        raise ConfigError("'hooks' / 'hooks.PreToolUse' has an unexpected shape; not touching it")
    hooks["PreToolUse"].append(our_group(agent, command))
    return out


def removed(config: dict[str, Any]) -> dict[str, Any]:
    """`config` without our handlers; a group left empty and empty containers go too."""
    out = copy.deepcopy(config)
    hooks = out.get("hooks")
    groups = hooks.get("PreToolUse") if isinstance(hooks, dict) else None
    if not isinstance(groups, list):
        return out
    kept = []
    for group in groups:
        handlers = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(handlers, list):
            kept.append(group)
            continue
        mine = [h for h in handlers if isinstance(h, dict)
                and _OURS.search(str(h.get("command", "")))]
        if len(mine) < len(handlers):
            kept.append({**group, "hooks": [h for h in handlers if h not in mine]})
    assert isinstance(hooks, dict)
    if kept:
        hooks["PreToolUse"] = kept
    else:
        del hooks["PreToolUse"]
        if not hooks:
            del out["hooks"]
    return out


def load(path: Path) -> dict[str, Any]:
    """The config at `path` ({} when missing); raises ConfigError when it does not parse."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    try:
        value = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path} does not parse ({exc}); fix it first, not touching it")
    if not isinstance(value, dict):
        raise ConfigError(f"{path} is not an object; not touching it")
    return value


def dump(path: Path, config: dict[str, Any]) -> str:
    """The text written for `config` at `path`."""
    if path.suffix == ".toml":
        return tomli_w.dumps(config)
    return json.dumps(config, indent=2) + "\n"


def install(agent: str, project: Path, *, fmt: str = "json", command: str | None = None,
            cluster: Path | None = None) -> Path:
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


def toml_block(group: dict[str, Any]) -> str:
    """Our group as `[[hooks.PreToolUse]]` and `[[hooks.PreToolUse.hooks]]` tables."""
    handler = group["hooks"][0]
    return (f"\n{_MARK}\n[[hooks.PreToolUse]]\nmatcher = {json.dumps(group['matcher'])}\n\n"
            f"[[hooks.PreToolUse.hooks]]\ntype = \"command\"\n"
            f"command = {json.dumps(handler['command'])}\ntimeout = {handler['timeout']}\n")


def _toml_text(path: Path, before: dict[str, Any], after: dict[str, Any]) -> str:
    """The new config.toml: the old text without our block, plus ours when `after` has it,
    so others' comments and layout stay. When the text edit would not give exactly `after`
    (an unusual layout), the whole file is rewritten from `after` instead."""
    try:
        text = _OUR_TOML.sub("", path.read_text())
    except FileNotFoundError:
        text = ""
    ours = [g for g in after.get("hooks", {}).get("PreToolUse", [])
            if g not in removed(after).get("hooks", {}).get("PreToolUse", [])]
    text = text.rstrip("\n") + "\n" if text.strip() else ""
    text += "".join(toml_block(g) for g in ours)
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
