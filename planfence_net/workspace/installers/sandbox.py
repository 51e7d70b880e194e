"""`planfence hook install claude --sandbox`: Claude Code's sandbox as the fence's second line.

The hook decides each tool call; a command the hook lets through (a test run, a script) runs
with the user's rights and could read the workspace owner's key, talk to its hook socket, or
rewrite the fence's files. Claude Code can run every Bash command inside bubblewrap (Linux)
or Seatbelt (macOS); its settings say what those commands may read and write. We merge into
the settings file `hook install claude` writes (keys as Claude Code 2.1.332 reads them):

    sandbox.enabled                   true: every Bash command runs sandboxed
    sandbox.failIfUnavailable         true: no sandbox (bubblewrap missing) is an error at
                                      start, never a silent run without it
    sandbox.allowUnsandboxedCommands  false: the model's `dangerouslyDisableSandbox` is ignored
    sandbox.filesystem.denyRead       the cluster folder (keys, roster, data) and the hook
                                      socket directory (no file there, no connection)
    sandbox.filesystem.denyWrite      those two, the project's .claude/ and .codex/ (hook
                                      settings), the git dirs' config and hooks/, and the
                                      marker and join record PlanFence keeps there

Paths are absolute (the cluster folder by its real path). The sandbox covers the commands
Claude Code runs (Bash), not its file tools, which the hook checks (person-only paths), nor
hooks, which run outside it: the hook itself still reaches the owner.

What we changed is recorded in the user's state directory (one record per settings file), so
`hook uninstall claude` undoes exactly that: list entries we appended go, a value we set goes
or, where it replaced one of the user's, gives that back; the rest of the block stays.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ...core.errors import ConfigError
from ..place.anchor import Unanchored, find_folder
from ..place.paths import git_dirs, state_dir
from . import clients

SOCKETS = "hookd"  # hook.client.socket_dir(): state_dir() / SOCKETS (a test keeps them equal)
SCALARS = {"enabled": True, "failIfUnavailable": True, "allowUnsandboxedCommands": False}
LISTS = ("denyRead", "denyWrite")


def fence_paths(root: Path, cluster: Path) -> dict[str, list[str]]:
    """{"denyRead": [...], "denyWrite": [...]}: the fence's paths for the worktree `root`
    served by the cluster folder `cluster` (see module doc), absolute, in a fixed order."""
    secret = [os.path.realpath(cluster), str(state_dir() / SOCKETS)]
    writes = [*secret, str(root / ".claude"), str(root / ".codex")]
    dirs = git_dirs(root)
    if dirs is not None:
        own, common = dirs
        writes += [str(own / "config"), str(own / "hooks"), str(own / "planfence-worktree.json")]
        if common != own:
            writes += [str(common / "config"), str(common / "hooks")]
        writes.append(str(common / "planfence.json"))
    return {"denyRead": secret, "denyWrite": list(dict.fromkeys(writes))}


def settings(root: Path, cluster: Path) -> dict[str, Any]:
    """The `sandbox` block we want for `root` served by `cluster`."""
    return {**SCALARS, "filesystem": fence_paths(root, cluster)}


def record_path(path: Path) -> Path:
    """Where what we added to the settings file `path` is recorded."""
    real = os.path.realpath(path).encode()
    return state_dir() / "sandbox" / f"{hashlib.blake2b(real, digest_size=12).hexdigest()}.json"


def install(
    agent: str,
    project: Path,
    cluster: Path | None = None,
    *,
    user: bool = False,
    shared: bool = False,
) -> Path:
    """Merge our `sandbox` block into `agent`'s settings file (Claude Code only; not the
    shared file: it names this machine's paths); returns that file. Raises ConfigError for
    another agent, --shared, or no cluster folder serving the project."""
    if agent != "claude":
        raise ConfigError("--sandbox is for claude (Codex's sandbox: see docs/HOOKS.md)")
    if shared:
        raise ConfigError("--sandbox names this machine's paths: not with --shared")
    root = clients.project_root(project)
    try:
        found = find_folder(cluster.resolve() if cluster else None, root)
    except Unanchored as exc:
        raise ConfigError(f"--sandbox needs the cluster folder that serves {root}: {exc}") from None
    path = clients.config_path(agent, root, user=user, shared=shared)
    config, added = merged(clients.load(path), settings(root, found))
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, clients.dump(path, config))
    record_path(path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _write(record_path(path), json.dumps(_union(_record(path), added), indent=2) + "\n")
    return path


def merged(config: dict[str, Any], ours: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(`config` with `ours` merged into its `sandbox` block, what that changed: {"set":
    our scalars written, "before": the values they replaced, "filesystem": list entries
    appended}). Our scalars replace the user's; list entries are appended once. Raises
    ConfigError for a block of an unexpected shape."""
    out = copy.deepcopy(config)
    block = out.setdefault("sandbox", {})
    fs = block.setdefault("filesystem", {}) if isinstance(block, dict) else None
    if not isinstance(block, dict) or not isinstance(fs, dict):
        raise ConfigError(
            "'sandbox' / 'sandbox.filesystem' has an unexpected shape; not touching it"
        )
    added: dict[str, Any] = {"set": {}, "before": {}, "filesystem": {}}
    for key, value in ours.items():
        if key != "filesystem" and block.get(key) != value:
            if key in block:
                added["before"][key] = block[key]
            block[key] = added["set"][key] = value
    for key in LISTS:
        have = fs.setdefault(key, [])
        if not isinstance(have, list):
            raise ConfigError(f"'sandbox.filesystem.{key}' is not a list; not touching it")
        new = [p for p in ours["filesystem"][key] if p not in have]
        have += new
        added["filesystem"][key] = new
    return out, added


def unmerged(config: dict[str, Any], added: dict[str, Any]) -> dict[str, Any]:
    """`config` without what `added` (see `merged`) recorded: a scalar still holding our
    value gets back the one it replaced, or goes; containers left empty go too."""
    out = copy.deepcopy(config)
    block = out.get("sandbox")
    if not isinstance(block, dict):
        return out
    before = added.get("before", {})
    for key, value in added.get("set", {}).items():
        if block.get(key) == value:
            if key in before:
                block[key] = before[key]
            else:
                del block[key]
    fs = block.get("filesystem")
    if isinstance(fs, dict):
        for key, paths in added.get("filesystem", {}).items():
            if isinstance(fs.get(key), list):
                fs[key] = [p for p in fs[key] if p not in paths]
                if not fs[key]:
                    del fs[key]
        if not fs:
            del block["filesystem"]
    if not block:
        del out["sandbox"]
    return out


def uninstall_file(path: Path) -> bool:
    """Remove what `install` added to the settings file `path`; returns whether it had."""
    record = record_path(path)
    added = _record(path)
    if not added or not path.exists():
        record.unlink(missing_ok=True)
        return False
    before = clients.load(path)
    after = unmerged(before, added)
    if after != before:
        _write(path, clients.dump(path, after))
    record.unlink()
    return after != before


def _record(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(record_path(path).read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _union(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Both installs' changes; a value replaced first is the one given back."""
    fs = dict(old.get("filesystem", {}))
    for key, paths in new.get("filesystem", {}).items():
        fs[key] = list(dict.fromkeys([*fs.get(key, []), *paths]))
    return {
        "set": {**old.get("set", {}), **new["set"]},
        "before": {**new["before"], **old.get("before", {})},
        "filesystem": fs,
    }


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".planfence-tmp")
    tmp.write_text(text)
    tmp.replace(path)
