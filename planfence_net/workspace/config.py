"""Where a workspace's cluster folder lives, which worktree each agent serves, which plan a
session works under.

`planfence workspace serve PATH` keeps its cluster folder in PATH/.planfence (roster, keys,
store, logs; a .gitignore inside keeps it out of commits). Commands find the folder from
`--cluster`, then $PLANFENCE_CLUSTER, then the nearest .planfence above the working folder
up to the git worktree root (never above it: a worktree nested in another checkout, like
Claude Code's .claude/worktrees/NAME, is not served by its parent's folder), then the
cluster the worktree joined (`workspace join`, recorded in its git dir). A worktree's roster
entry carries `workspace = "/abs/path"` next to the usual fields.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any

from ..cluster.folder import ClusterDir
from ..core.errors import ConfigError
from .facts import file_key
from .paths import joined, worktree_root

FOLDER = ".planfence"
ENV = "PLANFENCE_CLUSTER"
SELECTION = "workspace.json"
Spaces = dict[str, Path]  # workspace agent -> worktree
_EXPLICIT = re.compile(r"^([A-Za-z0-9_.-]+):(.+)$")


def find_cluster(explicit: Path | None = None, start: Path | None = None) -> ClusterDir:
    """The cluster folder to use (see module docstring); raises ConfigError when none."""
    given = explicit or (Path(os.environ[ENV]) if os.environ.get(ENV) else None)
    if given is not None:
        if not (given / "cluster.toml").is_file():
            raise ConfigError(f"no roster at {given / 'cluster.toml'}")
        return ClusterDir(given)
    here = (start or Path.cwd()).resolve()
    root = worktree_root(here)
    for folder in (here, *here.parents):
        if (folder / FOLDER / "cluster.toml").is_file():
            return ClusterDir(folder / FOLDER)
        if folder == root:
            break
    record = joined(root) if root is not None else None
    if record is not None and (Path(record["cluster"]) / "cluster.toml").is_file():
        return ClusterDir(Path(record["cluster"]))
    raise NoCluster(
        f"no workspace cluster found: no {FOLDER}/ in {here} or above"
        + (f" up to its worktree root {root}" if root is not None else "")
        + "; run `planfence workspace serve PATH`, `planfence workspace join`, or pass "
        "--cluster DIR",
        root,
    )


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
        raise ConfigError(f"{shown!r}: file names must be UTF-8 (keys are UTF-8 text)") from None
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
    `session`, else the folder's current plan, else None."""
    plan = (
        (bound_plan(cdir, session, agent) if agent else None)
        or bound_plan(cdir, session)
        or _selection(cdir).get("current")
    )
    return plan if isinstance(plan, str) else None


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
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
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


def ensure_local_cluster(path: Path, name: str) -> tuple[ClusterDir, bool]:
    """The single-worktree cluster of PATH (PATH/.planfence), created when missing; returns
    it and whether it was created."""
    from ..cluster.processes import init_cluster  # only serve creates folders

    cdir = ClusterDir(path.resolve() / FOLDER)
    if cdir.roster_path.exists():
        return cdir, False
    init_cluster(
        cdir.root, agents=0, base_port=0, name=f"workspace-{name}", workspaces=((name, path),)
    )
    (cdir.root / ".gitignore").write_text("*\n")
    return cdir, True
