"""`planfence cluster ...`: create, start, inspect and stop a cluster folder's processes.

`cluster status` asks each owner for a ping (an owner whose process exists but does not
answer, e.g. stopped with SIGSTOP, is not alive).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..core.errors import PlanfenceError, StartError
from .group import Group
from .params import Option
from .support import DirArg, JsonOpt, cluster_dir, echo_json, print_table, run_async, user_errors

if TYPE_CHECKING:  # imported where used: `planfence --help` loads no library
    from ..cluster.folder import ClusterDir
    from ..core.roster import Roster

cluster_app = Group("cluster", help="Create, start, inspect and stop a cluster.")


def register(app: Group) -> None:
    """Add the `cluster` command group to `app`."""
    app.add_command(cluster_app)


@cluster_app.command("init")
@user_errors
def cluster_init(
    path: Path = DirArg,
    agents: int = Option(5, "--agents", min=1, help="Number of agents."),
    base_port: int | None = Option(None, "--base-port", help="First port (0: pick free ports)."),
    compose: bool = Option(
        False,
        "--compose",
        help="Also write the containers' view for "
        "docker-compose.yml (compose/) and add its central "
        "store as the member `central`; the roster's "
        "addresses are the owner ports it publishes on "
        "127.0.0.1, from 7411 on.",
    ),
    name: str | None = Option(
        None,
        "--name",
        help="Cluster name; sessions are bound to it, so two "
        "clusters never talk to each other (default: "
        "planfence-demo).",
    ),
    workspace: list[str] = Option(
        [],
        "--workspace",
        help="NAME=PATH: a workspace owner serving the worktree at PATH, owning NAME:* (repeat).",
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Create a cluster folder: roster, identity keys, data and log folders.

    Refuses ports another program holds (naming it); --base-port 0 picks free ones.
    """
    from ..cluster import processes as clusterlib
    from ..workspace.place.config import parse_workspace_option

    roster = clusterlib.init_cluster(
        path,
        agents=agents,
        base_port=base_port,
        compose=compose,
        name=name,
        workspaces=tuple(map(parse_workspace_option, workspace)),
    )
    if json_out:
        echo_json({"cluster": roster.cluster, "agents": [a.to_json() for a in roster.agents]})
        return
    from ..core.decision import plural

    click.echo(f"cluster {roster.cluster!r} with {plural(len(roster.agents), 'agent')} in {path}")
    print_table(
        ["agent", "address", "owns"], [[a.name, a.address, " ".join(a.owns)] for a in roster.agents]
    )
    if compose:  # docker-compose.yml reads the folder and the services' user from these
        click.echo(
            f"docker-compose.yml: PLANFENCE_CLUSTER={path.resolve()} "
            f"PLANFENCE_UID={os.getuid()} PLANFENCE_GID={os.getgid()}"
        )


@cluster_app.command("up")
@user_errors
def cluster_up(
    path: Path = DirArg,
    json_out: bool = JsonOpt,
    profile: str = Option(
        "loopback",
        "--profile",
        help="Link profile: a shaper in front of every owner (see `planfence profiles`).",
    ),
    delay_ms: int | None = Option(None, "--delay-ms", min=0, help="One-way delay override."),
    loss: float = Option(0.0, "--loss", min=0.0, max=0.99, help="Loss probability on every link."),
    timeout: float = Option(20.0, help="Seconds to wait for owners."),
) -> None:
    """Start every owner (and shaper) that is not running; return once each accepts sessions."""
    from ..cluster import processes as clusterlib
    from ..traces import require_traces

    cdir = cluster_dir(path)
    roster = cdir.roster()
    require_traces(profile)  # fail before starting anything
    started = clusterlib.start_owners(cdir)
    links = wait_up(cdir, roster, started, timeout, profile, delay_ms=delay_ms, loss=loss)
    if json_out:
        echo_json(
            {
                "started": started,
                "running": roster.names,
                "profile": profile,
                "links": {a: f"{h}:{p}" for a, (h, p) in links.items()},
            }
        )
    else:
        click.echo(
            f"started {len(started)} owner(s): {', '.join(started) or '-'}; "
            f"{len(roster.agents)} running" + (f"; links shaped with {profile}" if links else "")
        )


def wait_up(
    cdir: ClusterDir,
    roster: Roster,
    started: list[str],
    timeout: float,
    profile: str,
    *,
    delay_ms: int | None,
    loss: float,
) -> dict[str, tuple[str, int]]:
    """Wait for the `started` owners, then start a `profile` shaper in front of every owner
    (none on loopback) and wait for the owners through them; return the shapers' addresses.
    On a PlanfenceError, stop the shapers and the `started` owners and raise one naming them."""
    from ..cluster import processes as clusterlib
    from ..cluster.ready import wait_cluster_ready

    try:
        run_async(wait_cluster_ready, cdir, started, timeout)
        links = clusterlib.start_shapers(cdir, profile, delay_ms=delay_ms, loss=loss)
        if links:
            run_async(
                functools.partial(
                    wait_cluster_ready,
                    cdir,
                    roster.names,
                    timeout,
                    links,
                    watch=clusterlib.shaper_name,
                )
            )
    except PlanfenceError as exc:
        clusterlib.stop_shapers(cdir)
        failed = exc.process if isinstance(exc, StartError) else None
        stopped = [
            name
            for name in started
            if clusterlib.stop_process(cdir, name, clusterlib.owner_marker(cdir, name))
            and name != failed  # one that failed to start is never called running
        ]
        raise PlanfenceError(
            f"{exc} (stopped the owners this command started: "
            f"{', '.join(stopped) or 'none were running'})"
        ) from None
    return links


@cluster_app.command("status")
@user_errors
def cluster_status(
    path: Path = DirArg,
    json_out: bool = JsonOpt,
    timeout: float = Option(
        2.0, "--timeout", min=0.01, help="Seconds each owner has to answer a ping."
    ),
) -> None:
    """Per agent: name, address, pid, alive (its owner answered a ping over an authenticated
    session within --timeout), owned patterns, and the shaper in front of it."""
    from ..cluster import processes as clusterlib
    from ..cluster.pids import read_pid

    cdir = cluster_dir(path)
    links = clusterlib.link_addresses(cdir)
    profile = clusterlib.read_links(cdir).get("profile")
    roster = cdir.roster()
    answered = run_async(functools.partial(_answering, cdir, roster, timeout))
    rows: list[dict[str, Any]] = []
    cells: list[list[Any]] = []
    for agent in roster.agents:
        running = clusterlib.running_pid(
            cdir, agent.name, clusterlib.owner_marker(cdir, agent.name)
        )
        known_pid = running or read_pid(cdir, agent.name)
        alive = agent.name in answered  # also an owner this host did not start (compose)
        link = links.get(agent.name)
        shaper = f"{link[0]}:{link[1]}" if link else None
        rows.append(
            {
                "name": agent.name,
                "address": agent.address,
                "pid": known_pid,
                "alive": alive,
                "owns": list(agent.owns),
                "shaper": {
                    "address": shaper,
                    "profile": profile,
                    "pid": read_pid(cdir, clusterlib.shaper_name(agent.name)),
                }
                if shaper
                else None,
            }
        )
        cells.append(
            [
                agent.name,
                agent.address,
                known_pid or "-",
                "yes" if alive else "no",
                " ".join(agent.owns),
                f"{shaper} ({profile})" if shaper else "-",
            ]
        )
    if json_out:
        echo_json(rows)
        return
    print_table(["agent", "address", "pid", "alive", "owns", "shaper"], cells)


@cluster_app.command("down")
@user_errors
def cluster_down(path: Path = DirArg, json_out: bool = JsonOpt) -> None:
    """Stop every process of the cluster (SIGTERM, then SIGKILL after 10 s)."""
    from ..cluster import processes as clusterlib

    cdir = cluster_dir(path)
    shapers = clusterlib.stop_shapers(cdir)
    stopped = clusterlib.stop_owners(cdir)
    if json_out:
        echo_json({"stopped": stopped, "shapers_stopped": shapers})
    else:
        click.echo(
            f"stopped {len(stopped)} owner(s): {', '.join(stopped) or '-'}"
            + (f"; {len(shapers)} shaper(s)" if shapers else "")
        )


async def _answering(cdir: ClusterDir, roster: Roster, within: float) -> set[str]:
    """The owners that answer a ping (each asked as itself, at its roster address) within
    `within` seconds, all asked at once."""
    from ..net.api import owner_session
    from ..net.client import collapsing_task_group

    answered: set[str] = set()

    async def ping(name: str) -> None:
        try:
            async with owner_session(roster, cdir.identity(name), name, None, within) as s:
                await s.request("ping")
        except PlanfenceError:
            return
        answered.add(name)

    async with collapsing_task_group() as tg:
        for name in roster.names:
            tg.start_soon(ping, name)
    return answered
