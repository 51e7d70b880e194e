"""`planfence cluster ...`: create, start, inspect and stop a cluster folder's processes.

`cluster status` asks each owner for a ping (an owner whose process exists but does not
answer, e.g. stopped with SIGSTOP, is not alive).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .group import Group
from .params import Argument, Option
from .support import DirArg, JsonOpt, cluster_dir, echo_json, print_table, run_async, user_errors

if TYPE_CHECKING:  # imported where used: `planfence --help` loads no library
    from ..cluster.folder import ClusterDir
    from ..cluster.health import OwnerHealth, Shaper

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


@cluster_app.command("add")
@user_errors
def cluster_add(
    path: Path = DirArg,
    name: str = Argument(..., help="The new member's name (e.g. db)."),
    owns: list[str] = Option(..., "--owns", help="A key pattern it owns, e.g. 'db:*' (repeat)."),
    json_out: bool = JsonOpt,
) -> None:
    """Add a member to the cluster's roster: its own key file and a free port. It owns the
    --owns patterns; a process serving as it (e.g. `planfence mcp proxy --as NAME`, or
    `planfence owner start`) can then run."""
    from ..cluster.processes import add_member

    agent = add_member(cluster_dir(path), name, owns)
    if json_out:
        echo_json(agent.to_json())
    else:
        click.echo(f"added {agent.name} at {agent.address}, owning {' '.join(agent.owns)}")


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
    links: str = Option(
        "relay",
        "--links",
        choices=["relay", "packet"],
        help="relay: a shaper process relaying each owner's TCP bytes; packet: each owner in "
        "a network namespace of its own behind a TUN link pacing its IP packets (root).",
    ),
) -> None:
    """Start every owner (and shaper) that is not running; return once each accepts sessions.

    With --links packet the roster's addresses become the owners' namespace addresses
    until `cluster down`, which removes every namespace and device. On a failure, or
    Ctrl-C, it stops the owners, shapers and links it started (and only those).
    """
    from ..cluster.lifecycle import Interrupted, bring_up
    from ..traces import require_traces

    cdir = cluster_dir(path)
    roster = cdir.roster()
    require_traces(profile)  # fail before starting anything
    try:
        up = bring_up(cdir, profile, delay_ms=delay_ms, loss=loss, timeout=timeout, links=links)
    except Interrupted as exc:
        click.echo(f"interrupted: {exc}", err=True)
        raise click.exceptions.Exit(130) from None
    started, shapers = up.started, up.links
    if json_out:
        echo_json(
            {
                "started": started,
                "running": roster.names,
                "profile": profile,
                "links": {a: f"{h}:{p}" for a, (h, p) in shapers.items()},
                **({"namespaces": up.namespaces} if up.namespaces else {}),
            }
        )
    else:
        shaped = f"; links shaped with {profile}" if shapers else ""
        if up.namespaces:
            shaped = f"; packet links with {profile}, one network namespace per owner"
        click.echo(
            f"started {len(started)} owner(s): {', '.join(started) or '-'}; "
            f"{len(roster.agents)} running" + shaped
        )


@cluster_app.command("status")
@user_errors
def cluster_status(
    path: Path = DirArg,
    json_out: bool = JsonOpt,
    timeout: float = Option(
        2.0, "--timeout", min=0.01, help="Seconds each owner has to answer a ping."
    ),
    watch: bool = Option(False, "--watch", help="Ask again every --interval seconds until Ctrl-C."),
    interval: float = Option(2.0, "--interval", min=0.05, help="Seconds between --watch rounds."),
) -> None:
    """Per agent: name, address, pid, alive (its owner answered a ping over an authenticated
    session within --timeout), owned patterns, and the shaper in front of it.

    Exit 1, naming each, when an owner is not alive (not running, or running but not
    answering: stopped with SIGSTOP, frozen) or the shaper this folder started in front of
    it is not running. With --watch the table is redrawn (with --json,
    one JSON line per round) until Ctrl-C, and the exit code is the last round's.
    """
    from ..cluster.health import wait_health

    cdir = cluster_dir(path)
    if not watch:
        rows = run_async(wait_health, cdir, timeout)
        if json_out:
            echo_json([r.to_json() for r in rows])
        else:
            print_table(*_status_table(rows))
        _exit_unless_alive(rows)
        return
    rows = _watch_status(cdir, timeout, interval, json_out)
    _exit_unless_alive(rows)


def _status_table(rows: list[OwnerHealth]) -> tuple[list[str], list[list[Any]]]:
    cells = [
        [
            r.name,
            r.address,
            r.pid or "-",
            "yes" if r.alive else "no",
            " ".join(r.owns),
            _shaper_cell(r.shaper) if r.shaper else "-",
        ]
        for r in rows
    ]
    return ["agent", "address", "pid", "alive", "owns", "shaper"], cells


def _shaper_cell(shaper: Shaper) -> str:
    down = shaper.local and not shaper.running
    kind = ", packet" if shaper.packet else ""
    return f"{shaper.address} ({shaper.profile}{kind}{', not running' if down else ''})"


def _exit_unless_alive(rows: list[OwnerHealth]) -> None:
    """One line on stderr naming every owner that is not alive (or whose shaper is down),
    and exit 1; else return."""
    down = [f"{r.name}: {r.problem}" for r in rows if r.problem]
    if down:
        what = "not alive" if any(not r.alive for r in rows) else "not reachable as shaped"
        click.echo(
            f"error: {len(down)} of {len(rows)} owner(s) {what}: {'; '.join(down)}", err=True
        )
        raise click.exceptions.Exit(1)


def _watch_status(
    cdir: ClusterDir, timeout: float, interval: float, json_out: bool
) -> list[OwnerHealth]:
    """Redraw the status every `interval` seconds until Ctrl-C; return the last round."""
    import time

    from rich.console import Console
    from rich.live import Live
    from rich.table import Table
    from rich.text import Text

    from ..cluster.health import wait_health
    from ..core.escaping import escape

    rows: list[OwnerHealth] = []
    console = Console()
    live = None if json_out else Live(console=console, auto_refresh=False)
    try:
        if live is not None:
            live.start()
        while True:
            rows = run_async(wait_health, cdir, timeout)
            if live is None:
                click.echo(json.dumps([r.to_json() for r in rows]))
            else:
                columns, cells = _status_table(rows)
                table = Table(*columns, box=None, pad_edge=False)
                for row in cells:
                    table.add_row(*[Text(escape(str(c))) for c in row])
                alive = sum(r.alive for r in rows)
                table.caption = f"{alive} of {len(rows)} alive at {time.strftime('%H:%M:%S')}"
                live.update(table, refresh=True)
            time.sleep(interval)  # the next round: a person is watching, not waiting for it
    except KeyboardInterrupt:
        pass
    finally:
        if live is not None:
            live.stop()
    return rows


@cluster_app.command("down")
@user_errors
def cluster_down(path: Path = DirArg, json_out: bool = JsonOpt) -> None:
    """Stop every process of the cluster (SIGTERM, then SIGKILL after 10 s)."""
    from ..cluster import processes as clusterlib
    from ..cluster.packetlinks import stop_packet_links

    cdir = cluster_dir(path)
    shapers = clusterlib.stop_shapers(cdir)
    stopped = clusterlib.stop_owners(cdir)
    links = stop_packet_links(cdir)  # after the owners: their namespaces go with the links
    if json_out:
        echo_json(
            {
                "stopped": stopped,
                "shapers_stopped": shapers,
                **({"packet_links_stopped": links} if links else {}),
            }
        )
    else:
        click.echo(
            f"stopped {len(stopped)} owner(s): {', '.join(stopped) or '-'}"
            + (f"; {len(shapers)} shaper(s)" if shapers else "")
            + (f"; {len(links)} packet link(s)" if links else "")
        )
