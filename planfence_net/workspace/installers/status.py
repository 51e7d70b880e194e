"""`planfence hook status [claude|codex]`: are our hooks active for a folder, and if not, the
exact step that activates them.

Claude Code reads ~/.claude/settings.json, ROOT/.claude/settings.json and
ROOT/.claude/settings.local.json and runs every hook it finds there. Ours is active when a
PreToolUse and a PostToolUse handler of ours are present, each with `"onFailure": "block"`,
and the command it names starts and answers (a probe: a Read payload, which is never gated,
must exit 0), or for the http form, the owner at its URL answers that payload with 200.

Codex runs a project's hooks only once the project is trusted and each handler is trusted
by its hash. When a `codex` is at hand (on PATH, or given) it is asked (`hooks/list`);
otherwise the config files are read, and the answer says trust could not be verified. Ours
is active when our PreToolUse and PostToolUse are listed and every handler of ours Codex
lists (SessionStart and SessionEnd too) is enabled and trusted.

Hooks that would start are active only where a workspace owner serves the folder and answers
(`serving`): elsewhere every write would be blocked (or, for a user-scope hook, let through
unchecked), so the state is "not served" and the step starts the owner.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import time
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ...cluster.processes import link_addresses
from ...core.errors import ConfigError, PlanfenceError
from ...net.syncclient import SyncSessions
from ..place.config import NoCluster, find_cluster, locate, workspaces
from .clients import EVENTS, codex_home, config_path, is_ours, load
from .codexapp import hooks_list

ACTIVE, MISSING, FAILS_OPEN, BROKEN = "active", "missing", "fails open", "broken"
UNSERVED = "not served"
PING_TIMEOUT = 5.0
UNTRUSTED, UNVERIFIED = "untrusted", "unverified"
PROBE_TIMEOUT = 20.0


@dataclass(frozen=True, slots=True)
class AgentStatus:
    agent: str
    state: str
    detail: str
    step: str  # what activates it ("" when active)
    files: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return self.state == ACTIVE

    def text(self) -> str:
        line = f"{self.agent}: {self.state}: {self.detail}"
        return line + (f"\n  to activate: {self.step}" if self.step else "")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "files": list(self.files), "active": self.active}


def claude_files(root: Path) -> list[Path]:
    return [
        config_path("claude", root, user=True),
        config_path("claude", root, shared=True),
        config_path("claude", root),
    ]


def ours_by_event(
    files: list[Path], events: tuple[str, ...] = EVENTS
) -> dict[str, list[tuple[Path, int, int, dict[str, Any], str]]]:
    """event -> [(file, group index, handler index, handler, matcher)] of our handlers."""
    found: dict[str, list[tuple[Path, int, int, dict[str, Any], str]]] = {e: [] for e in events}
    for path in files:
        try:
            hooks = load(path).get("hooks", {})
        except ConfigError:
            continue
        for event in events:
            groups = hooks.get(event, []) if isinstance(hooks, dict) else []
            for g, group in enumerate(groups if isinstance(groups, list) else []):
                handlers = group.get("hooks", []) if isinstance(group, dict) else []
                for h, handler in enumerate(handlers if isinstance(handlers, list) else []):
                    if is_ours(handler):
                        found[event].append((path, g, h, handler, group.get("matcher")))
    return found


def claude_status(root: Path) -> AgentStatus:
    files = claude_files(root)
    found = ours_by_event(files)
    install = f"planfence hook install claude --project {shlex.quote(str(root))}"
    where = tuple(sorted({str(f[0]) for fs in found.values() for f in fs}))
    if not all(found.values()):
        missing = [e for e in EVENTS if not found[e]]
        return AgentStatus(
            "claude",
            MISSING,
            f"no PlanFence {'/'.join(missing)} hook in {', '.join(map(str, files))}",
            install,
            where,
        )
    handlers = [f[3] for fs in found.values() for f in fs]
    if any(h.get("onFailure") != "block" for h in handlers):
        return AgentStatus(
            "claude",
            FAILS_OPEN,
            'a PlanFence handler lacks "onFailure": "block": Claude Code lets the call '
            "through when it cannot start or times out",
            install,
            where,
        )
    unserved = None
    if any(h.get("type") == "http" for h in handlers):  # owner down: its door is too
        unserved = serving(root, cluster_of(handlers))
        if unserved:
            return AgentStatus("claude", UNSERVED, unserved[0], unserved[1], where)
    for h in {json.dumps(h, sort_keys=True): h for h in handlers}.values():
        problem = probe_http(h, root, files) if h.get("type") == "http" else probe(h, root)
        if problem:
            return AgentStatus("claude", BROKEN, problem, install, where)
    unserved = serving(root, cluster_of(handlers))
    if unserved:
        return AgentStatus("claude", UNSERVED, unserved[0], unserved[1], where)
    return AgentStatus(
        "claude",
        ACTIVE,
        "PreToolUse and PostToolUse fail closed; "
        + ("the owner answers" if handlers[0].get("type") == "http" else "the command runs"),
        "",
        where,
    )


def probe_payload(root: Path) -> dict[str, Any]:
    """What `hook status` asks our handler: a Read in `root` (never gated, so it answers
    exit 0 wherever the hook works)."""
    return {
        "session_id": "planfence-hook-status",
        "cwd": str(root),
        "hook_event_name": "PreToolUse",
        "tool_name": "Read",
        "tool_input": {"file_path": str(root / "README.md")},
    }


def probe(handler: dict[str, Any], root: Path) -> str:
    """Run our handler as Claude Code would on a Read call (never gated); "" when it answered
    exit 0, else what went wrong."""
    command = str(handler.get("command", ""))
    args = handler.get("args")
    argv = [command, *map(str, args)] if isinstance(args, list) else ["/bin/sh", "-c", command]
    env = {**os.environ, "CLAUDE_PROJECT_DIR": str(root)}
    return run_probe(argv, shlex.join(argv), probe_payload(root), root, env)


def run_probe(
    argv: list[str],
    shown: str,
    payload: dict[str, Any],
    root: Path,
    env: dict[str, str] | None = None,
) -> str:
    """Run a hook command (`argv`, named `shown` in messages) on `payload` in `root`, as a
    client does; "" when it answered exit 0, else what went wrong."""
    try:
        proc = subprocess.run(
            argv,
            input=json.dumps(payload).encode(),
            capture_output=True,
            timeout=PROBE_TIMEOUT,
            env=env,
            cwd=root,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the hook command {shown} cannot run: {exc}"
    if proc.returncode != 0:
        said = proc.stderr.decode(errors="replace").strip().splitlines()
        return f"the hook command {shown} exited {proc.returncode}" + (
            f": {said[-1]}" if said else ""
        )
    return ""


def probe_http(handler: dict[str, Any], root: Path, files: list[Path]) -> str:
    """POST a Read payload (never gated) to our http handler's URL as Claude Code would, its
    key's variable read from the settings files' `env`, then from this environment; "" when
    the owner answered 200, else what went wrong."""
    import urllib.error
    import urllib.request

    from .httphook import ENV, ENV_HEADER, ENVIRONMENT, HEADER

    env = dict(os.environ)
    for path in files:
        with contextlib.suppress(ConfigError):
            given = load(path).get("env")
            env.update(given if isinstance(given, dict) else {})
    payload = probe_payload(root)
    url = str(handler.get("url", ""))
    headers = {ENV_HEADER + n: str(env.get(n, "")) for n in ENVIRONMENT}
    headers.update({"Content-Type": "application/json", HEADER: str(env.get(ENV, ""))})
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT) as answer:
            answer.read()
    except urllib.error.HTTPError as exc:
        why = "the key does not match" if exc.code == 403 else f"HTTP {exc.code}"
        return f"the hook's owner at {url} refused the probe ({why}): every call is blocked"
    except OSError as exc:
        return f"nothing answers at {url} ({exc}): every call is blocked; install again"
    return ""


def codex_files(root: Path) -> list[Path]:
    return [
        config_path("codex", root, user=True),
        config_path("codex", root, "toml", user=True),
        config_path("codex", root),
        config_path("codex", root, "toml"),
    ]


def project_trusted(root: Path) -> bool:
    """Whether $CODEX_HOME/config.toml trusts the project at `root`."""
    try:
        config = tomllib.loads((codex_home() / "config.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return False
    entry = config.get("projects", {}).get(str(root), {})
    return isinstance(entry, dict) and entry.get("trust_level") == "trusted"


def codex_status(root: Path, codex: Path | None) -> AgentStatus:
    trust = f"planfence hook install codex --project {shlex.quote(str(root))} --trust"
    install = f"planfence hook install codex --project {shlex.quote(str(root))}"
    found = ours_by_event(codex_files(root))
    where = tuple(sorted({str(f[0]) for fs in found.values() for f in fs}))
    if not all(found.values()):
        return AgentStatus(
            "codex", MISSING, "no PlanFence hook in the Codex config files", install, where
        )
    if codex is None:
        return AgentStatus(
            "codex",
            UNVERIFIED,
            "our hooks are in the config files, but trust could not be verified (no codex "
            "on PATH; pass --codex PATH)",
            trust,
            where,
        )
    listed = hooks_list(codex, root)
    ours = [h for h in listed.get("hooks", []) if is_ours({"command": h.get("command", "")})]
    by_event = {e: [h for h in ours if h.get("eventName") == e[0].lower() + e[1:]] for e in EVENTS}
    if not all(by_event.values()):
        project = found["PreToolUse"][0][0]
        if not project_trusted(root) and not str(project).startswith(str(codex_home())):
            return AgentStatus(
                "codex",
                UNTRUSTED,
                f"the project {root} is not trusted: Codex ignores its .codex/ config",
                trust,
                where,
            )
        return AgentStatus("codex", MISSING, "Codex does not list our hooks", install, where)
    bad = [h for h in ours if not _runs(h)]  # SessionStart and SessionEnd too
    if bad:
        states = ", ".join(f"{h['key']}: {h.get('trustStatus')}" for h in bad)
        state = UNTRUSTED if all(h.get("enabled") for h in bad) else "disabled"
        return AgentStatus("codex", state, f"Codex skips {states}", trust, where)
    unserved = serving(root, cluster_of([f[3] for fs in found.values() for f in fs]))
    if unserved:
        return AgentStatus("codex", UNSERVED, unserved[0], unserved[1], where)
    return AgentStatus("codex", ACTIVE, "Codex lists our hooks enabled and trusted", "", where)


def _runs(hook: dict[str, Any]) -> bool:
    return bool(hook.get("enabled")) and hook.get("trustStatus") in ("trusted", "managed")


def cluster_of(handlers: list[dict[str, Any]]) -> Path | None:
    """The `--cluster DIR` our handlers name (the first that names one), else None."""
    for h in handlers:
        args = h.get("args")
        words = [str(a) for a in args] if isinstance(args, list) else []
        try:
            words += shlex.split(str(h.get("command", "")))
        except ValueError:
            continue
        if "--cluster" in words[:-1]:
            return Path(words[words.index("--cluster") + 1])
    return None


def serving(
    root: Path, cluster: Path | None = None, blocked: str = "every write there will be blocked"
) -> tuple[str, str] | None:
    """None when a workspace owner serves the folder `root` (the cluster `cluster`, else the
    one found for `root`) and answers a ping within PING_TIMEOUT seconds; else (why not,
    ending with what that means, `blocked`; the step that fixes it)."""
    serve = f"planfence workspace serve {shlex.quote(str(root))}"
    try:
        cdir = find_cluster(cluster, root)
        spaces = workspaces(cdir)
    except NoCluster:
        return f"no workspace owner serves {root}: {blocked}", serve
    except ConfigError as exc:
        return f"no usable cluster for {root} ({exc}): {blocked}", serve
    found = locate(spaces, root / "x")
    if found is None:
        join = f"planfence workspace join {shlex.quote(str(root))}"
        return f"the cluster {cdir.root} does not serve {root}: {blocked}", join
    agent = found[0]
    try:
        sessions = SyncSessions(cdir.roster(), cdir.identity(agent), link_addresses(cdir))
        try:
            sessions.request(agent, "ping", {}, time.monotonic() + PING_TIMEOUT)
        finally:
            sessions.close()
    except (PlanfenceError, OSError) as exc:
        local = cdir.root.parent == spaces[agent]
        start = serve if local else f"planfence cluster up {shlex.quote(str(cdir.root))}"
        return f"the workspace owner {agent} of {root} does not answer ({exc}): {blocked}", start
    return None
