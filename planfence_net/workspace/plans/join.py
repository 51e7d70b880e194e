"""`planfence workspace join [PATH]`: serve another worktree of a repository in the team's
cluster, so a plan can declare its files next to the others'.

The worktree gets its own workspace owner in the same roster (agent NAME owning `NAME:*`,
a fresh key, a free port of the cluster's host), started in the background like `cluster
up` starts owners; its git dir records the cluster (`paths.record_join`), which is how the
hook and every command run inside it find the cluster. The cluster comes from `--cluster`,
else from the repository's marker (`paths.marker`: the cluster `workspace serve` or a join
recorded in the common git dir). Joining a worktree that is already served changes nothing.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from ...cluster.folder import ClusterDir
from ...cluster.ports import free_port
from ...core.errors import ConfigError
from ...core.identity import generate_key_file
from ..place.config import NoCluster, find_cluster, workspaces
from ..place.paths import mark, marker, record_join, worktree_root

# Imports inside functions are deliberate: the hook joins a worktree here (SessionStart), and
# each hook call is a fresh process that loads anyio and cluster start-up only to start owners
# (measured in `workspace/hook/run.py`).

READY_TIMEOUT = 20.0


@dataclass(frozen=True, slots=True)
class Joined:
    root: Path
    cluster: Path
    agent: str
    started: bool  # False: the worktree was already served

    def text(self) -> str:
        if not self.started:
            return f"{self.root} is already served by {self.agent} (cluster {self.cluster})"
        return (
            f"joined {self.root} to the cluster {self.cluster} as {self.agent} "
            f"(owns {self.agent}:*; its owner runs in the background: "
            f"planfence cluster down {self.cluster} stops it)"
        )


def join(path: Path, cluster: Path | None = None, name: str | None = None) -> Joined:
    """Serve the git worktree holding `path` in `cluster` (see module doc). Raises
    ConfigError (not a worktree, no cluster known, a bad name) or PlanfenceError (the owner
    did not start)."""
    root = worktree_root(path.resolve())
    if root is None:
        raise ConfigError(f"{path} is not inside a git worktree")
    try:
        cdir = find_cluster(None, root)
        served = {p: n for n, p in workspaces(cdir).items()}
        if root in served and (cluster is None or cdir.root == cluster.resolve()):
            return Joined(root, cdir.root, served[root], False)
    except NoCluster:
        pass
    cdir = ClusterDir(_team_cluster(root, cluster))
    spaces = workspaces(cdir)
    agent = next((n for n, p in spaces.items() if p == root), None)
    if agent is None:
        agent = name or _free_name(root.name, {a.name for a in cdir.roster().agents})
        _add_agent(cdir, agent, root)
    _start(cdir, agent)
    record_join(root, cdir.root, agent)
    mark(root, cdir.root)
    return Joined(root, cdir.root, agent, True)


def _team_cluster(root: Path, cluster: Path | None) -> Path:
    if cluster is not None:
        if not (cluster / "cluster.toml").is_file():
            raise ConfigError(f"no roster at {cluster / 'cluster.toml'}")
        return cluster.resolve()
    known = [
        Path(c)
        for c in (marker(root) or {}).get("clusters", [])
        if (Path(c) / "cluster.toml").is_file()
    ]
    if len(known) != 1:
        raise ConfigError(
            f"cannot tell which cluster {root} should join "
            f"({'none recorded for its repository' if not known else 'several: ' + ', '.join(map(str, known))}); "
            "pass --cluster DIR"
        )
    return known[0]


def _free_name(base: str, taken: set[str]) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", base).strip("-.") or "wt"
    candidate, n = stem, 2
    while candidate in taken:
        candidate, n = f"{stem}-{n}", n + 1
    return candidate


def _add_agent(cdir: ClusterDir, agent: str, root: Path) -> None:
    """Append `agent` (a workspace owner of `root`) to the roster, with a fresh key."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", agent):
        raise ConfigError(f"--name {agent!r}: letters, digits, '_', '.', '-' only")
    data = tomllib.loads(cdir.roster_path.read_text())
    rows = data.get("agents", [])
    host = cdir.roster().agents[0].host
    key = generate_key_file(cdir.key(agent))
    rows.append(
        {
            "name": agent,
            "address": f"{host}:{free_port(host)}",
            "public_key": bytes(key.verify_key).hex(),
            "owns": [f"{agent}:*"],
            "workspace": str(root),
        }
    )
    tmp = cdir.roster_path.with_name("cluster.toml.planfence-tmp")
    tmp.write_text(tomli_w.dumps({**data, "agents": rows}))
    tmp.replace(cdir.roster_path)


def _start(cdir: ClusterDir, agent: str) -> None:
    import anyio

    from ...cluster.processes import start_owners
    from ...cluster.ready import wait_cluster_ready

    started = start_owners(cdir, only=[agent])
    if started:
        anyio.run(wait_cluster_ready, cdir, started, READY_TIMEOUT)
