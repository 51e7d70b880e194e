"""Where a workspace's cluster folder lives, which worktree each agent serves, which plan a
session works under.

`planfence workspace serve PATH` keeps its cluster folder in PATH/.planfence (roster, keys,
store, logs; a .gitignore inside keeps it out of commits) and records it in the user's state
directory, keyed by PATH's real path (`paths.record_served`). Commands find the folder from
where the user put it, never by searching repository content (`anchor`, standard library
only, so the hook's fast path runs the same rules): `--cluster`, then
$PLANFENCE_CLUSTER, then the state directory's record of the working folder or a folder
above it up to the git worktree root (never above it: a worktree nested in another checkout,
like Claude Code's .claude/worktrees/NAME, is not served by its parent's folder), then the
cluster the worktree joined (`workspace join`, recorded in its git dir), and last the
.planfence at the worktree root. A folder found in the last two ways is refused with one
line when git tracks it, another user owns it, or group or others may write it. A worktree's roster
entry carries `workspace = "/abs/path"` next to the usual fields.
"""

from __future__ import annotations

import json
import os
import re
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...cluster.folder import ClusterDir
from ...core.errors import ConfigError
from ..model.facts import file_key
from ..model.reads import DEFAULT_TEST_COMMANDS
from .anchor import FOLDER, Unanchored, Unserved, find_folder, safe
from .paths import marker, record_served, served_cluster, worktree_root

# Imports inside functions are deliberate: each hook call is a fresh process that loads only
# its own path (measured in `workspace/hook/run.py`).

SELECTION = "workspace.json"
Spaces = dict[str, Path]  # workspace agent -> worktree
_EXPLICIT = re.compile(r"^([A-Za-z0-9_.-]+):(.+)$")


def find_cluster(explicit: Path | None = None, start: Path | None = None) -> ClusterDir:
    """The cluster folder to use (`anchor.find_folder`, see module docstring); raises
    NoCluster when none serves the folder, ConfigError when the one found must not be
    trusted (`paths.unsafe`)."""
    try:
        return ClusterDir(find_folder(explicit, start))
    except Unserved as exc:
        raise NoCluster(str(exc), exc.root) from None
    except Unanchored as exc:
        raise ConfigError(str(exc)) from None


def _safe(folder: Path, root: Path | None) -> ClusterDir:
    try:
        return ClusterDir(safe(folder, root))
    except Unanchored as exc:
        raise ConfigError(str(exc)) from None


class NoCluster(ConfigError):
    """No cluster folder serves the folder asked about; `root` is its git worktree root."""

    def __init__(self, message: str, root: Path | None) -> None:
        super().__init__(message)
        self.root = root


def workspaces(cdir: ClusterDir) -> dict[str, Path]:
    """Agent name -> worktree path, for the roster entries that serve a worktree."""
    try:
        data = tomllib.loads(cdir.roster_path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"no roster at {cdir.roster_path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{cdir.roster_path}: invalid TOML: {exc}") from None
    return {
        a["name"]: Path(a["workspace"])
        for a in data.get("agents", [])
        if isinstance(a, dict) and isinstance(a.get("workspace"), str)
    }


def file_key_for(spaces: dict[str, Path], text: str, cwd: Path) -> str:
    """The key of a file named on the command line: `NAME:REL`, or a path (relative to `cwd`)
    inside one of the worktrees. Raises ConfigError when it is in none of them."""
    try:
        text.encode()
    except UnicodeEncodeError:  # a name the shell passed as bytes (surrogate escapes)
        shown = text.encode(errors="surrogateescape").decode(errors="backslashreplace")
        raise ConfigError(f"'{shown}': file names must be UTF-8 (keys are UTF-8 text)") from None
    match = _EXPLICIT.match(text)
    if match and match.group(1) in spaces:
        return file_key(match.group(1), match.group(2))
    found = locate(spaces, cwd / text)
    if found is None:
        raise ConfigError(
            f"{text} is not inside a served worktree "
            f"({', '.join(f'{n}={p}' for n, p in spaces.items()) or 'none'})"
        )
    return file_key(*found)


def locate(spaces: dict[str, Path], path: Path) -> tuple[str, str] | None:
    """(agent, relative path) of the innermost worktree holding `path`, or None."""
    path = Path(os.path.normpath(path.absolute()))
    best: tuple[str, str] | None = None
    depth = -1
    for name, root in spaces.items():
        try:
            rel = path.relative_to(root)
        except ValueError:
            continue
        if len(root.parts) > depth and rel.parts:
            best, depth = (name, rel.as_posix()), len(root.parts)
    return best


def select_plan(cdir: ClusterDir, session: str | None, agent: str | None = None) -> str | None:
    """The plan bound to (`session`, `agent`) when `agent` is given, else the plan bound to
    `session`, else the folder's current plan unless it is another session's: a plan
    bound to a session (or a subagent) without ever being trusted session-free is that
    session's own, and a session without a plan of its own never borrows it. None: no plan."""
    own = (bound_plan(cdir, session, agent) if agent else None) or bound_plan(cdir, session)
    if own is not None:
        return own
    data = _selection(cdir)
    current = data.get("current")
    if not isinstance(current, str):
        return None
    shared = data.get("shared")
    if isinstance(shared, list) and current in shared:
        return current
    return None if current in _bound(data) else current


def _bound(data: dict[str, Any]) -> set[str]:
    """Every plan some session or subagent is bound to."""
    found: set[str] = set()
    sessions = data.get("sessions")
    if isinstance(sessions, dict):
        found |= {p for p in sessions.values() if isinstance(p, str)}
    agents = data.get("agents")
    if isinstance(agents, dict):
        for of in agents.values():
            if isinstance(of, dict):
                found |= {p for p in of.values() if isinstance(p, str)}
    return found


def bound_plan(cdir: ClusterDir, session: str | None, agent: str | None = None) -> str | None:
    """The plan bound to `session` (with `agent`: to that subagent of it), no fallback."""
    data = _selection(cdir)
    if agent:
        agents = data.get("agents")
        of = agents.get(session) if session and isinstance(agents, dict) else None
        plan = of.get(agent) if isinstance(of, dict) else None
    else:
        sessions = data.get("sessions")
        plan = sessions.get(session) if session and isinstance(sessions, dict) else None
    return plan if isinstance(plan, str) else None


def remember_plan(
    cdir: ClusterDir,
    plan: str,
    session: str | None,
    make_current: bool = False,
    agent: str | None = None,
) -> str:
    """Bind `session` (with `agent`: that subagent of it) to `plan`; make `plan` the folder's
    current plan when there is none yet or `make_current` (trusting another plan never
    silently moves what sessions without a plan of their own are checked against). Written
    atomically; returns the current plan."""
    path = cdir.root / SELECTION
    data = _selection(cdir)
    current = data.get("current")
    if make_current or not isinstance(current, str):
        data["current"] = current = plan
    if session and agent:
        if not isinstance(data.get("agents"), dict):
            data["agents"] = {}
        if not isinstance(data["agents"].get(session), dict):
            data["agents"][session] = {}
        data["agents"][session][agent] = plan
    elif session:
        if not isinstance(data.get("sessions"), dict):
            data["sessions"] = {}
        data["sessions"][session] = plan
    else:  # trusted session-free: every session without a plan of its own may use it
        shared = data.get("shared")
        kept = [p for p in shared if p != plan] if isinstance(shared, list) else []
        data["shared"] = [*kept, plan]
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)
    return current


def _selection(cdir: ClusterDir) -> dict[str, Any]:
    try:
        data = json.loads((cdir.root / SELECTION).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def parse_workspace_option(text: str) -> tuple[str, Path]:
    """NAME=PATH of `cluster init --workspace`; raises ConfigError when malformed."""
    name, sep, path = text.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or not path:
        raise ConfigError(
            f"--workspace {text!r}: expected NAME=PATH (NAME: letters, digits, '_', '.', '-')"
        )
    if not Path(path).is_dir():
        raise ConfigError(f"--workspace {text!r}: {path} is not a folder")
    return name, Path(path)


def served_folder(path: Path) -> Path:
    """The folder `workspace serve PATH` serves (a real path): PATH, or the root of the git
    worktree holding it when that repository is served or uses PlanFence (a subfolder joins
    the served repository above it: a cluster of a part of it would capture the sessions
    there and block their writes to the rest). Raises ConfigError when PATH does not exist
    or is not a folder: a mistyped path is never created."""
    if not path.exists():
        raise ConfigError(f"{path} does not exist: nothing to serve (check the path)")
    if not path.is_dir():
        raise ConfigError(f"{path} is not a folder: serve the folder that holds it")
    real = path.resolve()
    root = worktree_root(real)
    if root is not None and root != real and (served_cluster(root) or marker(root)):
        return root
    return real


def ensure_local_cluster(path: Path, name: str) -> tuple[ClusterDir, bool]:
    """The single-worktree cluster of the folder PATH serves (`served_folder`; in it,
    .planfence), created when missing and
    recorded in the user's state directory; returns it and whether it was created. An
    existing folder that `paths.unsafe` refuses (shipped by the repository, another user's)
    is never adopted: ConfigError."""
    from ...cluster.processes import init_cluster  # only serve creates folders

    path = served_folder(path)
    cdir = ClusterDir(path / FOLDER)
    created = not cdir.roster_path.exists()
    if created:
        init_cluster(
            cdir.root, agents=0, base_port=0, name=f"workspace-{name}", workspaces=((name, path),)
        )
        (cdir.root / ".gitignore").write_text("*\n")
        os.chmod(cdir.root, 0o700)  # only its user enters: nobody else can swap what is inside
    else:
        _safe(cdir.root, worktree_root(path))
    record_served(path, cdir.root)
    return cdir, created


@dataclass(frozen=True, slots=True)
class HookPolicy:
    """What the hook does with calls it cannot check against a plan, from the cluster's
    `cluster.toml` table `[hook]`: `allow` and `check` are regular expressions matched
    against the whole tool name of a tool the hook does not know (let through unchecked,
    or checked like a shell command against every declared key); `outside` are glob
    patterns (fnmatch) of real paths outside every served worktree that file tools may
    change; `tests` are shell globs of the commands whose runs a session's automatic plan
    records as evidence (default `reads.DEFAULT_TEST_COMMANDS`). Anything else unknown is
    blocked."""

    allow: tuple[str, ...] = ()
    check: tuple[str, ...] = ()
    outside: tuple[str, ...] = ()
    tests: tuple[str, ...] = DEFAULT_TEST_COMMANDS  # shell globs of test commands (evidence)

    def tool(self, name: str) -> str:
        """ "allow", "check" or "block" for the unknown tool `name`."""
        for verdict, patterns in (("allow", self.allow), ("check", self.check)):
            if any(re.fullmatch(p, name) for p in patterns):
                return verdict
        return "block"

    def may_write_outside(self, path: str) -> bool:
        import fnmatch

        return any(fnmatch.fnmatchcase(path, p) for p in self.outside)


def hook_policy(cdir: ClusterDir) -> HookPolicy:
    """The cluster's [hook] table; raises ConfigError (one line) when it is malformed."""
    try:
        data = tomllib.loads(cdir.roster_path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{cdir.roster_path}: {exc}") from None
    table = data.get("hook", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{cdir.roster_path}: [hook] must be a table")
    values: dict[str, tuple[str, ...]] = {}
    for field in ("allow", "check", "outside", "tests"):
        if field == "tests" and field not in table:
            continue
        items = table.get(field, [])
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ConfigError(f"{cdir.roster_path}: [hook] {field} must be a list of strings")
        if field in ("allow", "check"):
            for item in items:
                try:
                    re.compile(item)
                except re.error as exc:
                    msg = f"{cdir.roster_path}: [hook] {field}: {item!r} is not a regular expression: {exc}"
                    raise ConfigError(msg) from None
        values[field] = tuple(items)
    return HookPolicy(**values)


def outside(spaces: Spaces, cwd: str, files: tuple[str, ...]) -> list[str]:
    """The files (relative to `cwd`) whose real path is in no served worktree: symlinks are
    resolved, so a link inside a worktree that leads out of it counts as outside."""
    roots = [os.path.realpath(r) for r in spaces.values()]
    found = []
    for f in files:
        real = os.path.realpath(os.path.join(cwd, f))
        if not any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots):
            found.append(f)
    return found
