"""The paths of a cluster folder (see `planfence_net.cluster.processes` for the layout and the processes).

Kept apart from `cluster` so that reading a roster or a key file (the agents' hook does it
before every tool call) does not import what starting processes needs.

Every per-agent path is built from a checked agent name (`core.roster.check_name`), and key
and store paths, with symlinks resolved, must lie inside the cluster folder: a roster or a
`--as NAME` can never make PlanFence read or write a key or a store elsewhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import ConfigError
from ..core.identity import Identity, load_identity
from ..core.roster import Roster, check_name, load_roster


@dataclass(frozen=True, slots=True)
class ClusterDir:
    """Paths inside a cluster folder; `root` may be given as a str."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))  # frozen: set once, here

    @property
    def roster_path(self) -> Path:
        return self.root / "cluster.toml"

    def key(self, agent: str) -> Path:
        return self.inside("keys", f"{check_name(agent)}.key")

    def db(self, agent: str) -> Path:
        return self.inside("data", f"{check_name(agent)}.sqlite")

    def log(self, agent: str) -> Path:
        # not resolved: a log may be sent elsewhere on purpose (a symlink to another disk)
        return self.root / "logs" / f"{check_name(agent)}.jsonl"

    def pid_file(self, name: str) -> Path:
        return self.root / "run" / f"{name}.pid"

    def out(self, name: str) -> Path:
        return self.root / "run" / f"{name}.out"

    def roster(self) -> Roster:
        return load_roster(self.roster_path)

    def identity(self, agent: str) -> Identity:
        return load_identity(agent, self.key(agent))

    def inside(self, *parts: str) -> Path:
        """ROOT/PARTS; raises ConfigError when, symlinks resolved, it lies outside the folder
        (a `keys` or `data` symlink pointing elsewhere)."""
        path = self.root.joinpath(*parts)
        real, base = os.path.realpath(path), os.path.realpath(self.root)
        if os.path.commonpath([real, base]) != base:
            raise ConfigError(
                f"{path} resolves to {real}, outside the cluster folder {base}; refusing it"
            )
        return path
