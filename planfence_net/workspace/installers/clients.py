"""`planfence hook install|uninstall claude|codex`: merge our hooks into an agent's config,
leaving every other hook as it was.

    claude   project   ROOT/.claude/settings.local.json (default; this machine only)
                       ROOT/.claude/settings.json       (--shared: the file teams commit)
             user      ~/.claude/settings.json          (--user: every project and worktree)
    codex    project   ROOT/.codex/hooks.json, or .codex/config.toml (--format toml)
             user      $CODEX_HOME/hooks.json or config.toml ($CODEX_HOME: ~/.codex)

ROOT is the git worktree root of `--project` (found from any subfolder; the folder itself
outside git). Each file holds {"hooks": {EVENT: [group]}} (config.toml: [[hooks.EVENT]] with
[[hooks.EVENT.hooks]] tables); PreToolUse checks the plan before a call, PostToolUse records
the agent's own edit of a declared target (see `advance`), SessionStart joins a worktree the
agent made (see `join`) and in automatic mode starts the session's plan and tells the model,
and SessionEnd ends the session's intents (see `intentclient`): both agents, no matcher, no
`onFailure` (they never block; Codex's SessionEnd gets END_TIMEOUT s). In automatic mode (the
default; `--explicit` keeps the trusted plans only) the command carries `--mode auto` and
PostToolUse also sees reads and shell commands, from which a session's own plan is made (see
`autohook`).

Where a workspace owner serves ROOT and its http hook door listens (`httphook`), Claude
Code's project-local file gets `type: "http"` handlers instead (SessionStart excepted: Claude
Code runs no http handler there, so it keeps the command form): a POST of the same payload
to the owner on 127.0.0.1, no process per call, `"onFailure": "block"`, the cluster's key
(`httphook.ensure_secret`) in a header read from the environment variable
`httphook.ENV`, which the same file's `env` sets, and Claude Code's values of the
variables the answer depends on (`httphook.ENVIRONMENT`: the owner denies a call when they
are not its own). Elsewhere (not served, --shared, --user)
the command form below is written; install again once the owner runs (its port changes
with each start when that port is taken: the http handlers name it). With Claude Code's
sandbox on in that file (`--sandbox`), the command form too: under it Claude Code did not
send our key.

A group is {"matcher": REGEX, "hooks": [handler]}. Claude Code handlers carry
`"onFailure": "block"` (a hook that cannot start, times out or crashes blocks the call) and
use the exec form {"command": ABS, "args": [...]} (no shell); the shared file names
`planfence` through $CLAUDE_PROJECT_DIR when the installation lives inside the project, else
through PATH, so it holds nothing of one machine. Codex runs a command line through its
shell. Ours is recognised by its command (`... planfence ... hook claude|codex`, or the exec
form's executable named `planfence` with args `hook claude|codex`), so installing twice
leaves one copy and uninstalling removes only ours. In config.toml our tables are appended as
text, so the rest of the file stays byte for byte.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from ...cluster.command import executable
from ...core.errors import ConfigError
from ..place.paths import worktree_root
from .httphook import ENV, PATH, ensure_secret, http_handler, served_port
from .leanhook import lean_handler, lean_line

EVENTS = ("PreToolUse", "PostToolUse")  # check before a call; record the agent's own edit
SESSION = "SessionStart"  # join a worktree the agent created; automatic mode: start the plan
END = "SessionEnd"  # end the session's intents (never blocks: no onFailure)
END_TIMEOUT = 3  # Codex 0.171.0 clamps a SessionEnd handler's timeout to 1..3 s (default 1)
MATCHERS = {
    "claude": {
        "PreToolUse": "Write|Edit|MultiEdit|NotebookEdit|Bash|PowerShell",
        "PostToolUse": "Write|Edit|MultiEdit|NotebookEdit",
    },
    "codex": {"PreToolUse": "Bash|apply_patch|Edit|Write", "PostToolUse": "apply_patch|Edit|Write"},
}
# Automatic mode (the default; `--explicit` keeps MATCHERS): PostToolUse also sees the calls
# that read or search (a session's plan is made from them) and shell commands (reads,
# searches, test runs);
# Claude Code reports a shell command that exited non-zero as PostToolUseFailure.
AUTO_MATCHERS = {
    "claude": {
        "PostToolUse": "Write|Edit|MultiEdit|NotebookEdit|Read|NotebookRead|Grep|Bash|PowerShell",
        "PostToolUseFailure": "Bash|PowerShell",
    },
    "codex": {"PostToolUse": "apply_patch|Edit|Write|Bash"},
}
FAILURE = "PostToolUseFailure"
TIMEOUT = 30  # seconds: the agent's own limit; the hook's deadline is shorter
# The hook's own deadline (`--timeout`) covers its checks, not the interpreter's start and
# its imports on a loaded machine: past the handler's TIMEOUT the agent runs the call, so
# `--timeout` stays at least HEADROOM below it.
HEADROOM = 10
_MARK = "# PlanFence {event} hook (planfence hook install|uninstall codex --format toml)"
_OUR_TOML = re.compile(
    r"\n?# PlanFence (\w+) hook \(planfence hook install\|uninstall codex "
    r"--format toml\)\n\[\[hooks\.\1\]\]\n(?:matcher = [^\n]*\n)?\n"
    r"\[\[hooks\.\1\.hooks\]\]\ntype = \"command\"\ncommand = [^\n]*\n"
    r"timeout = \d+\n"
)
_OURS = re.compile(r"(^|[\s/'\"])(planfence|planfence_net)['\"]?\s+hook\s+(claude|codex)\b")
_OUR_URL = re.compile(rf"http://127\.0\.0\.1:\d+{re.escape(PATH)}(\?|$)")


def project_root(project: Path) -> Path:
    """The git worktree root holding `project` (the folder itself outside git)."""
    project = project.resolve()
    return worktree_root(project) or project


def codex_home() -> Path:
    return Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")


def config_path(
    agent: str, project: Path, fmt: str = "json", *, user: bool = False, shared: bool = False
) -> Path:
    """Where `agent` reads the hooks we write (see module doc); `project` is a root already.
    Raises ConfigError for an unknown combination."""
    if agent == "claude" and fmt == "json":
        if user:
            return Path.home() / ".claude" / "settings.json"
        return project / ".claude" / ("settings.json" if shared else "settings.local.json")
    if agent == "codex" and fmt in ("json", "toml"):
        name = "hooks.json" if fmt == "json" else "config.toml"
        return codex_home() / name if user else project / ".codex" / name
    raise ConfigError(f"no {fmt} hook config for {agent!r} (claude: json; codex: json, toml)")


def hook_args(
    agent: str,
    cluster: Path | None = None,
    user: bool = False,
    timeout: float | None = None,
    explicit: bool = False,
) -> list[str]:
    """The arguments after `planfence`: `hook AGENT [--mode auto] [--cluster DIR] [--scope
    user] [--timeout SECONDS]` (`--mode auto` unless `explicit`)."""
    words = ["hook", agent] + ([] if explicit else ["--mode", "auto"])
    if cluster is not None:
        words += ["--cluster", str(cluster.resolve())]
    if user:
        words += ["--scope", "user"]
    if timeout is not None:
        words += ["--timeout", f"{timeout:g}"]
    return words


def check_timeout(timeout: float | None) -> None:
    """Refuse a hook `--timeout` that is not comfortably below the handler's TIMEOUT."""
    if timeout is None:
        return
    if not 0 < timeout <= TIMEOUT - HEADROOM:
        raise ConfigError(
            f"--timeout {timeout:g}: the hook's deadline must be more than 0 and at most "
            f"{TIMEOUT - HEADROOM} s, {HEADROOM} s below the {TIMEOUT} s the agent waits for "
            "the handler (past that the agent runs the call)"
        )


def hook_command(
    agent: str,
    cluster: Path | None = None,
    user: bool = False,
    timeout: float | None = None,
    explicit: bool = False,
) -> str:
    """The command line a shell runs: this installation's `planfence`, by absolute path."""
    return shlex.join([executable(), *hook_args(agent, cluster, user, timeout, explicit)])


def handler(
    agent: str,
    root: Path | None = None,
    *,
    cluster: Path | None = None,
    user: bool = False,
    shared: bool = False,
    command: str | None = None,
    timeout: float | None = None,
    explicit: bool = False,
) -> dict[str, Any]:
    """Our handler for `agent` (see module doc). `command` replaces the shell command line
    (tests, docs); Claude Code's exec form then names it as the executable."""
    if agent == "codex":
        text = command or lean_line(
            hook_command(agent, cluster, user, timeout, explicit), None if user else root, cluster
        )
        return {"type": "command", "command": text, "timeout": TIMEOUT}
    args = hook_args(agent, cluster, user, timeout, explicit)
    if shared and command is None:
        exe = Path(executable())
        inside = root is not None and exe.is_absolute() and exe.is_relative_to(root)
        where = (
            f'"$CLAUDE_PROJECT_DIR"/{shlex.quote(exe.relative_to(root).as_posix())}'
            if inside and root is not None
            else "planfence"
        )
        line = " ".join([where, *map(shlex.quote, args)])
        return {"type": "command", "command": line, "timeout": TIMEOUT, "onFailure": "block"}
    return {
        "type": "command",
        "command": command or executable(),
        "args": args,
        "timeout": TIMEOUT,
        "onFailure": "block",
    }


def our_group(
    agent: str,
    ours: dict[str, Any],
    event: str = "PreToolUse",
    mcp_writes: str | None = None,
    explicit: bool = False,
) -> dict[str, Any]:
    """Our group for `event`: the matcher (with `mcp_writes` added; automatic mode's unless
    `explicit`) and handler `ours`."""
    if event in (SESSION, END):  # these never block anything: a failure must not either
        handler = {k: v for k, v in ours.items() if k != "onFailure"}
        if agent == "codex" and event == END:
            handler["timeout"] = END_TIMEOUT  # what Codex allows it (hooks/list warns else)
        return {"hooks": [handler]}
    table = {**MATCHERS[agent], **({} if explicit else AUTO_MATCHERS[agent])}
    matcher = table[event] + (f"|{mcp_writes}" if mcp_writes and event != FAILURE else "")
    return {"matcher": matcher, "hooks": [ours]}


def events(agent: str, explicit: bool = False) -> tuple[str, ...]:
    """Our events for `agent`, in the order they are written (Codex: no PostToolUseFailure)."""
    if agent != "claude" or explicit:
        return (*EVENTS, SESSION, END)
    return (*EVENTS, FAILURE, SESSION, END)


def merged(
    config: dict[str, Any],
    agent: str,
    ours: dict[str, Any],
    mcp_writes: str | None = None,
    explicit: bool = False,
) -> dict[str, Any]:
    """`config` with our group (once) appended to each of our events' lists; everything else
    untouched. Raises ConfigError for hooks of an unexpected shape."""
    out = removed(config)
    hooks = out.setdefault("hooks", {})
    for event in events(agent, explicit):
        if not isinstance(hooks, dict) or not isinstance(hooks.setdefault(event, []), list):
            raise ConfigError(f"'hooks' / 'hooks.{event}' has an unexpected shape; not touching it")
        hooks[event].append(our_group(agent, ours, event, mcp_writes, explicit))
    return out


def removed(config: dict[str, Any]) -> dict[str, Any]:
    """`config` without our handlers; a group left empty and empty containers go too."""
    out = copy.deepcopy(config)
    env = out.get("env")
    if isinstance(env, dict) and ENV in env:  # the http handlers' key (`hook install`'s)
        del env[ENV]
        if not env:
            del out["env"]
    hooks = out.get("hooks")
    if not isinstance(hooks, dict):
        return out
    for event in (*EVENTS, FAILURE, SESSION, END):
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
    others = [h for h in handlers if not is_ours(h)]
    if len(others) == len(handlers):
        return group
    return {**group, "hooks": others} if others else None


def is_ours(handler: Any) -> bool:
    """True for a handler of ours, in the shell form, the exec form or the http form."""
    if not isinstance(handler, dict):
        return False
    if handler.get("type") == "http":
        return bool(_OUR_URL.match(str(handler.get("url", ""))))
    command, args = str(handler.get("command", "")), handler.get("args")
    if isinstance(args, list) and args[:1] == ["hook"] and args[1:2] in (["claude"], ["codex"]):
        return Path(command).name == "planfence"
    return bool(_OURS.search(command))


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
    cluster: Path | None = None,
    user: bool = False,
    shared: bool = False,
    mcp_writes: str | None = None,
    timeout: float | None = None,
    explicit: bool = False,
    http: bool = True,
) -> tuple[Path, list[Path]]:
    """Merge our hooks into `agent`'s config (see module doc; the http form only where
    `http`); returns the file written and
    the files ours was moved out of (Codex: the other form of the same layer). Raises
    ConfigError when that other form holds someone else's hooks: Codex would load both."""
    check_timeout(timeout)
    root = project_root(project)
    if mcp_writes is not None:
        try:
            re.compile(mcp_writes)
        except re.error as exc:
            msg = f"--mcp-writes {mcp_writes!r} is not a regular expression: {exc}"
            raise ConfigError(msg) from None
    path = config_path(agent, root, fmt, user=user, shared=shared)
    moved = _other_forms(agent, root, fmt, user, shared)
    ours = handler(
        agent, root, cluster=cluster, user=user, shared=shared, timeout=timeout, explicit=explicit
    )
    command = ours
    before = load(path)
    door = None
    if agent == "claude" and http and not (user or shared or _sandboxed(before)):
        door = http_door(root, cluster)
    if door is not None:
        argv = hook_args(agent, cluster, user, timeout, explicit)[2:]
        ours = http_handler(door[1], argv, TIMEOUT)
    config = merged(before, agent, ours, mcp_writes, explicit)
    if door is not None:
        # Claude Code 2.1.332 skips http handlers on SessionStart ("HTTP hooks are not
        # supported for SessionStart"): that one event keeps the command form.
        config["hooks"][SESSION][-1] = our_group(
            agent, lean_handler(command, root, cluster), SESSION
        )
        env = config.setdefault("env", {})
        if not isinstance(env, dict):
            raise ConfigError(f"{path}: 'env' has an unexpected shape; not touching it")
        env[ENV] = ensure_secret(door[0])
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, _toml_text(path, before, config) if fmt == "toml" else dump(path, config))
    for other in moved:
        uninstall_file(other)
    return path, moved


def http_door(root: Path, cluster: Path | None = None) -> tuple[Path, int] | None:
    """(cluster folder, port) of the http hook door of the workspace owner serving `root`
    (of the cluster `cluster`, else the one found for `root`) when it listens, else None."""
    from ..place.config import NoCluster, find_cluster, locate, workspaces

    try:
        cdir = find_cluster(cluster, root)
        found = locate(workspaces(cdir), root / "x")
    except (NoCluster, ConfigError):
        return None
    if found is None:
        return None
    port = served_port(cdir.root, found[0])
    return None if port is None else (cdir.root, port)


def _sandboxed(config: dict[str, Any]) -> bool:
    """Whether `config` turns on Claude Code's sandbox, under which Claude Code 2.1.332 did
    not put our key into the header (measured: every call got 403): the command form then."""
    sandbox = config.get("sandbox")
    return isinstance(sandbox, dict) and sandbox.get("enabled") is True


def http_url(path: Path) -> str | None:
    """The URL of our http PreToolUse handler in the Claude Code settings at `path`, if any."""
    with contextlib.suppress(ConfigError):
        hooks = load(path).get("hooks")
        groups = hooks.get("PreToolUse") if isinstance(hooks, dict) else None
        for group in groups if isinstance(groups, list) else []:
            for h in group.get("hooks", []) if isinstance(group, dict) else []:
                if is_ours(h) and isinstance(h, dict) and h.get("type") == "http":
                    return str(h["url"])
    return None


def _other_forms(agent: str, root: Path, fmt: str, user: bool, shared: bool) -> list[Path]:
    """The other files of the same layer that hold our hooks (to move ours out of). Raises
    ConfigError when the other Codex form holds hooks of someone else."""
    if agent == "claude":
        return []  # Claude Code has one form; local and shared files are separate layers
    other = config_path(agent, root, "toml" if fmt == "json" else "json", user=user)
    config = load(other)
    if removed(config).get("hooks"):
        raise ConfigError(
            f"{other} already holds hooks: Codex would load both forms of this layer; "
            f"install with --format {'toml' if fmt == 'json' else 'json'}, or move those hooks"
        )
    return [other] if removed(config) != config else []


def uninstall_file(path: Path) -> bool:
    """Remove our hooks from the config at `path`; returns whether it held ours."""
    if not path.exists():
        return False
    before = load(path)
    after = removed(before)
    if after != before:
        _write(
            path, _toml_text(path, before, after) if path.suffix == ".toml" else dump(path, after)
        )
    return after != before


def uninstall(
    agent: str,
    project: Path,
    *,
    fmt: str = "json",
    user: bool = False,
    shared: bool = False,
) -> tuple[Path, bool]:
    """Remove our hook from `agent`'s config (and what `--sandbox` added to it); returns the
    file and whether it held ours."""
    from .sandbox import uninstall_file as uninstall_sandbox  # it imports this module

    path = config_path(agent, project_root(project), fmt, user=user, shared=shared)
    return path, uninstall_sandbox(path) | uninstall_file(path)


def toml_block(event: str, group: dict[str, Any]) -> str:
    """Our group as `[[hooks.EVENT]]` and `[[hooks.EVENT.hooks]]` tables."""
    handler = group["hooks"][0]
    matcher = f"matcher = {json.dumps(group['matcher'])}\n" if "matcher" in group else ""
    return (
        f"\n{_MARK.format(event=event)}\n[[hooks.{event}]]\n"
        f"{matcher}\n[[hooks.{event}.hooks]]\n"
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
    for event in events("codex"):  # only Codex has a config.toml form
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


def unserved_note(root: Path, cluster: Path | None = None) -> str:
    """What `hook install` adds when the hooks it wrote will not be active yet: "warning:
    WHY\n  to activate: STEP\n" when no workspace owner serves `root` (`status.serving`),
    else ""."""
    from .status import serving

    missing = serving(root, cluster)
    return f"warning: {missing[0]}\n  to activate: {missing[1]}\n" if missing else ""


def install_statusline(path: Path, cluster: Path | None = None) -> dict[str, Any]:
    """`hook install claude --statusline`: set Claude Code's `statusLine` in the settings
    file `path` to `planfence view --statusline` (`view/statusline.py`: it reads the status
    the view's collector keeps, never an owner), replacing only a status line of ours;
    returns the value written. Raises ConfigError when `path` has someone else's."""
    words = [executable(), "view", "--statusline"]
    if cluster is not None:
        words += ["--cluster", str(cluster.resolve())]
    line = {"type": "command", "command": shlex.join(words), "padding": 0}
    config = load(path)
    old = config.get("statusLine")
    if old is not None and not (
        isinstance(old, dict) and " view --statusline" in str(old.get("command", ""))
    ):
        raise ConfigError(f"{path} already has a statusLine of its own; not replacing it")
    config["statusLine"] = line
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, dump(path, config))
    return line
