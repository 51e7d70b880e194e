"""The bench's cluster: eight owners plus the central store, on free loopback ports.

    with bench_cluster(root) as cdir:                 # 8 owners + the central store
        ...

The central store is a roster member (`central`) owning no keys, run by bench/policies/central.py.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import tomli_w

from ...cluster import processes as clusterlib
from ...cluster.folder import ClusterDir
from ...cluster.pids import spawn
from ...cluster.ports import free_port
from ...cluster.ready import wait_cluster_ready
from ...core.identity import generate_key_file
from ..policies.writers import CENTRAL
from .workload import CLUSTER_AGENTS


def central_argv(cdir: ClusterDir) -> list[str]:
    # "--agent central" doubles as the marker `cluster.stop_owners` looks for.
    return [
        sys.executable,
        "-m",
        "planfence_net.bench.policies.central",
        str(cdir.root.resolve()),
        "--agent",
        CENTRAL,
    ]


def init_bench_cluster(
    root: Path, agents: int = CLUSTER_AGENTS, name: str = "planfence-bench"
) -> ClusterDir:
    """A cluster of `agents` owners on free loopback ports plus a `central` member owning no
    keys (the central store of the centralized-lineage baseline)."""
    clusterlib.init_cluster(root, agents=agents, base_port=0, name=name)
    cdir = ClusterDir(root)
    key = generate_key_file(cdir.key(CENTRAL))
    data = tomllib.loads(cdir.roster_path.read_text())
    taken = {int(agent["address"].rsplit(":", 1)[1]) for agent in data["agents"]}
    port = free_port()
    while port in taken:  # a random draw may meet an owner's: it would not start
        port = free_port()
    data["agents"].append(
        {
            "name": CENTRAL,
            "address": f"127.0.0.1:{port}",
            "public_key": bytes(key.verify_key).hex(),
            "owns": [],
        }
    )
    cdir.roster_path.write_text(tomli_w.dumps(data))
    cdir.roster()  # validate
    return cdir


def start_processes(cdir: ClusterDir) -> list[str]:
    """Spawn every owner and the central store; returns the names started."""
    names = []
    for agent in cdir.roster().agents:
        argv = (
            central_argv(cdir) if agent.name == CENTRAL else clusterlib.owner_argv(cdir, agent.name)
        )
        spawn(cdir, agent.name, argv)
        names.append(agent.name)
    return names


@contextmanager
def bench_cluster(
    root: Path, agents: int = CLUSTER_AGENTS, name: str = "planfence-bench"
) -> Iterator[ClusterDir]:
    """Create, start and (always, also on Ctrl-C) stop the bench cluster at `root`."""
    cdir = init_bench_cluster(root, agents, name)
    try:
        names = start_processes(cdir)
        anyio.run(wait_cluster_ready, cdir, names, backend="asyncio")
        yield cdir
    finally:
        clusterlib.stop_owners(cdir)
