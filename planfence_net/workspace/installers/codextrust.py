"""`planfence hook install codex --trust`: record, in $CODEX_HOME/config.toml, the two trust
decisions Codex asks of its user before it runs a project's hooks: the project
(`[projects."ROOT"] trust_level = "trusted"`) and each of our handlers
(`[hooks.state."FILE:EVENT:GROUP:HANDLER"] trusted_hash = "sha256:..."`, the hash Codex
reports in `hooks/list`, or computed the same way when no Codex is at hand).

Nothing else in the file changes: a missing table is appended as text (comments and layout
stay); only a value that must change is rewritten, and then the whole file is rewritten
from its parsed form.
"""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from ...core.errors import ConfigError
from .clients import codex_home, is_ours
from .codexapp import LABELS, codex_hash, hooks_list
from .status import claude_files, codex_files, ours_by_event, project_trusted


def trust(root: Path, codex: Path | None, *, user: bool = False) -> list[str]:
    """Trust the project (unless `user`) and our handlers; returns what was recorded, one
    line each."""
    path = codex_home() / "config.toml"
    done = []
    if not user:
        set_value(path, ("projects", str(root)), "trust_level", "trusted")
        done.append(f'[projects."{root}"] trust_level = "trusted"')
    for key, digest in handler_hashes(root, codex):
        set_value(path, ("hooks", "state", key), "trusted_hash", digest)
        done.append(f'[hooks.state."{key}"] trusted_hash = "{digest}"')
    if len(done) == (0 if user else 1):
        raise ConfigError("no PlanFence hook to trust: run `planfence hook install codex` first")
    return done


def handler_hashes(root: Path, codex: Path | None) -> list[tuple[str, str]]:
    """(trust key, hash) of each of our handlers: as Codex lists them, else computed."""
    if codex is not None:
        listed = hooks_list(codex, root).get("hooks", [])
        return [
            (str(h["key"]), str(h["currentHash"]))
            for h in listed
            if is_ours({"command": h.get("command", "")})
        ]
    found = ours_by_event(codex_files(root), tuple(LABELS))
    return [
        (
            f"{file}:{LABELS[event]}:{g}:{h}",
            codex_hash(LABELS[event], matcher, str(handler["command"]), handler.get("timeout")),
        )
        for event, entries in found.items()
        for file, g, h, handler, matcher in entries
    ]


def set_value(path: Path, table: tuple[str, ...], key: str, value: str) -> None:
    """Set `key = value` in `table` of the TOML file at `path` (see module doc)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        text = ""
    try:
        config = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} does not parse ({exc}); fix it first, not touching it") from None
    node: Any = config
    for part in table:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict) and node.get(key) == value:
        return
    header = ".".join(_bare(p) for p in table)
    appended = f"{text.rstrip()}\n\n[{header}]\n{key} = {json.dumps(value)}\n".lstrip("\n")
    expected = _with(config, table, key, value)
    try:
        fits = node is None and tomllib.loads(appended) == expected
    except tomllib.TOMLDecodeError:
        fits = False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".planfence-tmp")
    tmp.write_text(appended if fits else tomli_w.dumps(expected))
    tmp.replace(path)


def _bare(part: str) -> str:
    return part if part.replace("_", "").replace("-", "").isalnum() else json.dumps(part)


def _with(config: dict[str, Any], table: tuple[str, ...], key: str, value: str) -> dict[str, Any]:
    out = copy.deepcopy(config)
    node = out
    for part in table:
        node = node.setdefault(part, {})
    node[key] = value
    return out


def any_hook_active(root: Path) -> bool:
    """A quick look at the config files (no process started), for the one-line warning of
    `workspace trust|check`: True when Claude Code has both our handlers failing closed, or
    Codex has both ours with the trust its config records for them."""
    claude = ours_by_event(claude_files(root))
    if all(claude.values()) and all(
        e[3].get("onFailure") == "block" for es in claude.values() for e in es
    ):
        return True
    codex = ours_by_event(codex_files(root))
    return all(codex.values()) and not untrusted(root)


def untrusted(root: Path) -> str:
    """Why $CODEX_HOME/config.toml, read without asking Codex, does not record the trust
    Codex needs to run our hooks for `root` (the project's, when a handler of ours is in
    the project's .codex/, and each handler's hash); "" when it records all of it."""
    codex = ours_by_event(codex_files(root))
    path = codex_home() / "config.toml"
    try:
        config = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return f"{path} does not exist: Codex has recorded no trust in the project or our hooks"
    except (OSError, tomllib.TOMLDecodeError) as exc:
        return f"{path} cannot be read ({exc})"
    state = config.get("hooks", {}).get("state", {})
    user = str(codex_home())
    needs_project = any(not str(e[0]).startswith(user) for es in codex.values() for e in es)
    if needs_project and not project_trusted(root):
        return f"{path} does not trust the project {root}: Codex ignores its .codex/ config"
    stale = [
        key
        for key, digest in handler_hashes(root, None)
        if not (isinstance(state.get(key), dict) and state[key].get("trusted_hash") == digest)
    ]
    if stale:
        return f"{path} records no trust in {', '.join(stale)}: Codex skips those hooks"
    return ""
