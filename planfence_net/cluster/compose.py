"""The cluster folder as docker-compose.yml runs it (`planfence cluster init DIR --compose`).

The stack's services are fixed: owner-NAME for the five default agents and `central` (the
bench's central store), each listening on 7401 in its container, a shaper-NAME in front of
each on 7402, and the owners' ports published on the host's 127.0.0.1 from 7411 on. The
folder's own roster gives those published ports (the host's CLI reaches the running owners);
`compose/` holds the roster and links as the containers see them, mounted over the folder's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomli_w

from ..core.errors import ConfigError

# docker-compose.yml: every owner listens on 7401 in its container, its shaper on 7402, and
# the owners' ports are published on the host's 127.0.0.1 from 7411 on.
COMPOSE_OWNER_PORT, COMPOSE_SHAPER_PORT, COMPOSE_HOST_BASE_PORT = 7401, 7402, 7411
COMPOSE_CENTRAL = "central"  # docker-compose.yml also runs the bench's central store

COMPOSE_AGENTS = 5  # docker-compose.yml runs owner-NAME for the five default agents


def check_compose_layout(
    agents: int, base_port: int | None, workspaces: tuple[tuple[str, Path], ...]
) -> None:
    """Raise ConfigError unless the cluster is the one docker-compose.yml runs: its five
    services owner-NAME, publishing 7411-7416 (a roster with other members or ports would
    point the host's CLI and the containers at services that do not exist)."""
    if agents != COMPOSE_AGENTS or workspaces or base_port not in (None, COMPOSE_HOST_BASE_PORT):
        raise ConfigError(
            f"--compose makes the cluster docker-compose.yml runs ({COMPOSE_AGENTS} agents, "
            f"ports {COMPOSE_HOST_BASE_PORT}-{COMPOSE_HOST_BASE_PORT + COMPOSE_AGENTS}); "
            "leave out --agents, --base-port and --workspace"
        )


def write_compose_view(root: Path, data: dict[str, Any]) -> None:
    """The roster and links as the containers of docker-compose.yml see them."""
    folder = root / "compose"
    folder.mkdir(exist_ok=True)
    agents = [row["name"] for row in data["agents"]]
    inside = {
        **data,
        "agents": [
            {**row, "address": f"owner-{row['name']}:{COMPOSE_OWNER_PORT}"}
            for row in data["agents"]
        ],
    }
    (folder / "cluster.toml").write_text(tomli_w.dumps(inside))
    (folder / "links.toml").write_text(
        tomli_w.dumps(
            {"links": {agent: f"shaper-{agent}:{COMPOSE_SHAPER_PORT}" for agent in agents}}
        )
    )
