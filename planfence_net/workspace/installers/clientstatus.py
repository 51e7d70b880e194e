"""`planfence hook status gemini|opencode|copilot|cursor|windsurf`: are our hooks active for a
folder, and if not, the step that activates them (the same `AgentStatus` as Claude Code's
and Codex's, `status`).

Every client: our handlers are present for the events that check and record (`REQUIRED`),
our command starts and answers a probe in the client's own payload form (a read, never
gated: exit 0), and a workspace owner serves the folder (`status.serving`); an active
client's detail says when its command runs the lean client (`leanhook.is_lean`). Gemini CLI adds
its own ways to switch a hook off, each found and named with the file that does it:

    - a folder Gemini CLI does not trust runs no hooks from any settings file (folder trust
      is on unless `security.folderTrust.enabled` is false; $GEMINI_CLI_TRUST_WORKSPACE and
      $GEMINI_RESTRICTED_MODE decide first; else the longest rule of
      ~/.gemini/trustedFolders.json covering the folder);
    - `hooksConfig.enabled: false` in any settings file turns every hook off;
    - `hooksConfig.disabled` naming our hook (`planfence`, or its command) turns ours off,
      from any settings file, the project's own included: a project can switch the fence
      off for itself, and only this check sees it.

Gemini CLI has no fail-closed option: a hook that cannot start or times out lets the call
run (docs/HOOKS.md); status says so in its detail.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

from ...core.errors import ConfigError
from .clients import load
from .hookfiles import NAME, config_path, is_ours, row
from .leanhook import is_lean
from .status import (
    ACTIVE,
    BROKEN,
    MISSING,
    UNSERVED,
    UNTRUSTED,
    AgentStatus,
    cluster_of,
    run_probe,
    serving,
)

DISABLED = "disabled"
LEAN = "the lean client hands each call to the workspace owner, which answers it"
REQUIRED = {
    "gemini": ("BeforeTool", "AfterTool"),
    "copilot": ("preToolUse", "postToolUse"),
    "cursor": ("preToolUse", "beforeShellExecution", "postToolUse"),
    "windsurf": ("pre_write_code", "pre_run_command", "post_write_code"),
}
# A read in the client's own form: never gated, so a working hook answers exit 0.
PROBES: dict[str, Any] = {
    "gemini": lambda root: {
        "session_id": "planfence-hook-status", "cwd": str(root), "hook_event_name": "BeforeTool",
        "tool_name": "read_file", "tool_input": {"file_path": str(root / "README.md")},
    },
    "copilot": lambda root: {
        "timestamp": 0, "cwd": str(root), "toolName": "view",
        "toolArgs": json.dumps({"path": str(root / "README.md")}),
    },
    "cursor": lambda root: {
        "conversation_id": "planfence-hook-status", "generation_id": "probe",
        "hook_event_name": "beforeReadFile", "workspace_roots": [str(root)],
        "file_path": str(root / "README.md"), "content": "",
    },
    "windsurf": lambda root: {
        "agent_action_name": "post_read_code", "trajectory_id": "planfence-hook-status",
        "execution_id": "probe", "tool_info": {"file_path": str(root / "README.md")},
    },
}  # fmt: skip
LIMITS = {
    "gemini": "Gemini CLI has no fail-closed option: a hook that cannot start or times out "
    "lets the call run",
    "copilot": "Copilot CLI: a hook that fails lets the call run",
    "cursor": "preToolUse and beforeShellExecution fail closed (failClosed)",
    "windsurf": "Windsurf: a hook that fails lets the call run",
}


def found(client: str, files: list[Path]) -> dict[str, list[tuple[Path, dict[str, Any]]]]:
    """event -> [(file, handler)] of our handlers in `files`."""
    spec = row(client)
    out: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for path in files:
        try:
            hooks = load(path).get("hooks")
        except ConfigError:
            continue
        for event, entries in (hooks if isinstance(hooks, dict) else {}).items():
            for entry in entries if isinstance(entries, list) else []:
                handlers = (
                    entry.get("hooks") if spec.grouped and isinstance(entry, dict) else [entry]
                )
                for h in handlers if isinstance(handlers, list) else []:
                    if is_ours(h, client):
                        out.setdefault(event, []).append((path, h))
    return out


def client_status(client: str, root: Path) -> AgentStatus:
    """Whether our hooks are active for `client` in the project `root` (see module doc)."""
    spec = row(client)
    files = [config_path(client, root)] + ([spec.user()] if spec.user else [])
    ours = found(client, files)
    where = tuple(sorted({str(p) for hs in ours.values() for p, _ in hs}))
    install = f"planfence hook install {client} --project {shlex.quote(str(root))}"
    missing = [e for e in REQUIRED[client] if e not in ours]
    if missing:
        listed = ", ".join(map(str, files))
        return AgentStatus(
            client, MISSING, f"no PlanFence {'/'.join(missing)} hook in {listed}", install, where
        )
    if client == "gemini":
        off = gemini_off(root, [h for hs in ours.values() for _, h in hs])
        if off is not None:
            return AgentStatus(client, off[0], off[1], off[2], where)
    handlers = [h for hs in ours.values() for _, h in hs]
    command = str(handlers[0].get("command") or handlers[0].get("bash") or "")
    problem = probe(command, PROBES[client](root), root)
    if problem:
        return AgentStatus(client, BROKEN, problem, install, where)
    unserved = serving(root, cluster_of(handlers))
    if unserved:
        return AgentStatus(client, UNSERVED, unserved[0], unserved[1], where)
    lean = f"; {LEAN}" if is_lean(command) else ""
    return AgentStatus(client, ACTIVE, f"the command runs; {LIMITS[client]}{lean}", "", where)


def probe(command: str, payload: dict[str, Any], root: Path) -> str:
    """Run our `command` through the shell on `payload` as the client would; "" when it
    answered exit 0, else what went wrong."""
    return run_probe(["/bin/sh", "-c", command], command, payload, root)


def gemini_settings(root: Path) -> list[Path]:
    """Gemini CLI's settings files, lowest layer first: system, user, project."""
    system = os.environ.get("GEMINI_CLI_SYSTEM_SETTINGS_PATH") or "/etc/gemini-cli/settings.json"
    return [
        Path(system),
        Path.home() / ".gemini" / "settings.json",
        root / ".gemini" / "settings.json",
    ]


def gemini_off(root: Path, handlers: list[dict[str, Any]]) -> tuple[str, str, str] | None:
    """(state, why, step) when Gemini CLI will not run our hooks for `root`, else None."""
    names = {NAME} | {str(h.get("command")) for h in handlers}
    for path in gemini_settings(root):
        try:
            config = load(path).get("hooksConfig")
        except ConfigError:
            continue
        if not isinstance(config, dict):
            continue
        if config.get("enabled") is False:
            why = f"{path} sets hooksConfig.enabled to false: Gemini CLI runs no hooks"
            return DISABLED, why, f"remove hooksConfig.enabled from {path}"
        listed = config.get("disabled")
        named = sorted(names & set(listed)) if isinstance(listed, list) else []
        if named:
            why = f"{path} lists our hook ({', '.join(named)}) in hooksConfig.disabled: Gemini CLI skips it"
            return DISABLED, why, f"remove {', '.join(named)} from hooksConfig.disabled in {path}"
    if not gemini_trusted(root):
        why = (
            f"Gemini CLI does not trust {root}: it runs no hooks there (nor the project's settings)"
        )
        step = "trust the folder in Gemini CLI (its trust dialog, /permissions) or set GEMINI_CLI_TRUST_WORKSPACE=true"
        return UNTRUSTED, why, step
    return None


def gemini_trusted(root: Path) -> bool:
    """Whether Gemini CLI trusts the folder `root` (see module doc)."""
    if os.environ.get("GEMINI_RESTRICTED_MODE") == "true":
        return False
    said = os.environ.get("GEMINI_CLI_TRUST_WORKSPACE")
    if said in ("true", "false"):
        return said == "true"
    enabled = True
    for path in gemini_settings(root)[:2]:  # a project cannot turn trust off for itself
        try:
            security = load(path).get("security")
        except ConfigError:
            continue
        trust = security.get("folderTrust") if isinstance(security, dict) else None
        if isinstance(trust, dict) and isinstance(trust.get("enabled"), bool):
            enabled = trust["enabled"]
    if not enabled:
        return True
    rules_path = (
        os.environ.get("GEMINI_CLI_TRUSTED_FOLDERS_PATH")
        or Path.home() / ".gemini" / "trustedFolders.json"
    )
    try:
        rules = load(Path(rules_path))
    except ConfigError:
        return False
    where = os.path.realpath(root)
    best, level = -1, None
    for rule, trust_level in rules.items():
        folder = os.path.dirname(rule) if trust_level == "TRUST_PARENT" else rule
        real = os.path.realpath(folder)
        if (where == real or where.startswith(real.rstrip("/") + "/")) and len(rule) > best:
            best, level = len(rule), trust_level
    return level in ("TRUST_FOLDER", "TRUST_PARENT")


def status_of(client: str, root: Path) -> AgentStatus:
    """`hook status CLIENT` for a client of `hookfiles.FILES` or OpenCode."""
    if client == "opencode":
        from .opencodeplugin import status as opencode_status

        return opencode_status(root)
    return client_status(client, root)


def install_warning(client: str, root: Path) -> str:
    """What `hook install` adds when the client will not run the hooks it wrote at `root`
    for a reason of its own (Gemini CLI: an untrusted folder, hooks switched off), else ""."""
    if client != "gemini":
        return ""
    off = gemini_off(root, [{"command": ""}])
    return f"warning: {off[1]}\n  to activate: {off[2]}\n" if off else ""
