"""The paths of a cluster folder (see `planfence_net.cluster.processes` for the layout and the processes).

Kept apart from `cluster` so that reading a roster or a key file (the agents' hook does it
before every tool call) does not import what starting processes needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.identity import Identity, load_identity
from ..core.roster import Roster, load_roster


@dataclass(frozen=True, slots=True)
class ClusterDir:
    """Paths inside a cluster folder."""

    root: Path

    @property
    def roster_path(self) -> Path:
        return self.root / "cluster.toml"

    def key(self, agent: str) -> Path:
        return self.root / "keys" / f"{agent}.key"

    def db(self, agent: str) -> Path:
        return self.root / "data" / f"{agent}.sqlite"

    def log(self, agent: str) -> Path:
        return self.root / "logs" / f"{agent}.jsonl"

    def pid_file(self, name: str) -> Path:
        return self.root / "run" / f"{name}.pid"

    def out(self, name: str) -> Path:
        return self.root / "run" / f"{name}.out"

    def roster(self) -> Roster:
        return load_roster(self.roster_path)

    def identity(self, agent: str) -> Identity:
        return load_identity(agent, self.key(agent))
