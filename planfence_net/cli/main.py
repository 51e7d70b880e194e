"""The `planfence` command: a thin shell over the library (the composition root)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import typer

from . import bench as cli_bench
from . import executor as cli_executor
from . import hook as cli_hook
from . import inspect as cli_inspect
from . import mcp as cli_mcp
from . import ping as cli_ping
from . import shape as cli_shape
from . import traces as cli_traces
from . import workspace as cli_workspace
from .group import EXIT_CODES_HELP, PlanfenceGroup
from .support import (
    AsOpt,
    DeadlineOpt,
    DirArg,
    JsonOpt,
    cluster_dir,
    echo_json,
    identity_for,
    print_table,
    resolve_ids,
    run_async,
    to_jsonable,
    user_errors,
    write_record,
)

# Every command imports the library it uses in its body: `planfence --help` and one-shot
# commands start without the owner daemon, the bench harness or plotting (see
# tests/test_cli_imports.py).

# rich_markup_mode=None: plain help, so `planfence --help` does not load rich (~60 ms)
app = typer.Typer(
    cls=PlanfenceGroup,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    help="planfence-net: dependency-scoped plan validation for agent teams.",
    epilog=EXIT_CODES_HELP,
)
cluster_app = typer.Typer(no_args_is_help=True, help="Create, start, inspect and stop a cluster.")
owner_app = typer.Typer(no_args_is_help=True, help="Run or restart an owner daemon.")
app.add_typer(cluster_app, name="cluster")
app.add_typer(owner_app, name="owner")


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"planfence-net {version('planfence-net')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=_print_version,
        help="Print the version and exit.",
    ),
) -> None:
    """planfence-net: dependency-scoped plan validation for agent teams."""


# ---- cluster -------------------------------------------------------------------------------


@cluster_app.command("init")
@user_errors
def cluster_init(
    path: Path = DirArg,
    agents: int = typer.Option(5, "--agents", min=1, help="Number of agents."),
    base_port: int | None = typer.Option(
        None, "--base-port", help="First port (0: pick free ports)."
    ),
    compose: bool = typer.Option(
        False,
        "--compose",
        help="Also write the containers' view for "
        "docker-compose.yml (compose/); the roster's "
        "addresses are the owner ports it publishes on "
        "127.0.0.1, from 7411 on.",
    ),
    name: str | None = typer.Option(
        None,
        "--name",
        help="Cluster name; sessions are bound to it, so two "
        "clusters never talk to each other (default: "
        "planfence-demo).",
    ),
    workspace: list[str] = typer.Option(
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
    from ..workspace.config import parse_workspace_option

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
    from ..core.gate import plural

    typer.echo(f"cluster {roster.cluster!r} with {plural(len(roster.agents), 'agent')} in {path}")
    print_table(
        ["agent", "address", "owns"], [[a.name, a.address, " ".join(a.owns)] for a in roster.agents]
    )


@cluster_app.command("up")
@user_errors
def cluster_up(
    path: Path = DirArg,
    json_out: bool = JsonOpt,
    profile: str = typer.Option(
        "loopback",
        "--profile",
        help="Link profile: a shaper in front of every owner (see `planfence profiles`).",
    ),
    delay_ms: int | None = typer.Option(None, "--delay-ms", min=0, help="One-way delay override."),
    loss: float = typer.Option(
        0.0, "--loss", min=0.0, max=0.99, help="Loss probability on every link."
    ),
    timeout: float = typer.Option(20.0, help="Seconds to wait for owners."),
) -> None:
    """Start every owner (and shaper) that is not running; return once each accepts sessions."""
    from ..cluster import processes as clusterlib
    from ..cluster.ready import wait_cluster_ready
    from ..core.errors import PlanfenceError
    from ..traces import require_traces

    cdir = cluster_dir(path)
    roster = cdir.roster()
    require_traces(profile)  # fail before starting anything
    started = clusterlib.start_owners(cdir)
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
        stopped = [
            name
            for name in started
            if clusterlib.stop_process(cdir, name, clusterlib.owner_marker(cdir, name))
        ]
        raise PlanfenceError(
            f"{exc} (stopped the owners this command started: "
            f"{', '.join(stopped) or 'none were running'})"
        ) from None
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
        typer.echo(
            f"started {len(started)} owner(s): {', '.join(started) or '-'}; "
            f"{len(roster.agents)} running" + (f"; links shaped with {profile}" if links else "")
        )


@cluster_app.command("status")
@user_errors
def cluster_status(path: Path = DirArg, json_out: bool = JsonOpt) -> None:
    """Per agent: name, address, pid, alive, owned patterns, and the shaper in front of it."""
    from ..cluster import processes as clusterlib

    cdir = cluster_dir(path)
    links = clusterlib.link_addresses(cdir)
    profile = clusterlib.read_links(cdir).get("profile")
    rows: list[dict[str, Any]] = []
    cells: list[list[Any]] = []
    for agent in cdir.roster().agents:
        pid = clusterlib.running_pid(cdir, agent.name, clusterlib.owner_marker(cdir, agent.name))
        known_pid = pid or clusterlib.read_pid(cdir, agent.name)
        link = links.get(agent.name)
        shaper = f"{link[0]}:{link[1]}" if link else None
        rows.append(
            {
                "name": agent.name,
                "address": agent.address,
                "pid": known_pid,
                "alive": pid is not None,
                "owns": list(agent.owns),
                "shaper": {
                    "address": shaper,
                    "profile": profile,
                    "pid": clusterlib.read_pid(cdir, clusterlib.shaper_name(agent.name)),
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
                "yes" if pid is not None else "no",
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
        typer.echo(
            f"stopped {len(stopped)} owner(s): {', '.join(stopped) or '-'}"
            + (f"; {len(shapers)} shaper(s)" if shapers else "")
        )


# ---- owner ---------------------------------------------------------------------------------


@owner_app.command("serve")
@user_errors
def owner_serve(
    path: Path = DirArg,
    agent: str = typer.Option(..., "--agent", help="Which agent to serve as."),
    listen: str | None = typer.Option(
        None,
        "--listen",
        help="HOST:PORT to bind instead of the roster address (e.g. 0.0.0.0:7401 in a container).",
    ),
    limit: list[str] = typer.Option(
        [],
        "--limit",
        help="NAME=VALUE: change one resource limit, e.g. "
        "max_connections=200 (repeat; docs/FAULTS.md).",
    ),
    accept_loss: bool = typer.Option(
        False,
        "--accept-loss",
        help="Start even though the store lost "
        "acknowledged records; sign above the highest "
        "seq ever acknowledged (docs/FAULTS.md).",
    ),
) -> None:
    """Run one owner daemon in the foreground until SIGTERM or Ctrl-C."""

    from ..cluster import processes as clusterlib
    from ..core.errors import ConfigError
    from ..core.roster import parse_address
    from ..net.client import collapsing_task_group
    from ..owners.limits import Limits
    from ..workspace.owner import owner_runner

    cdir = cluster_dir(path)
    roster = cdir.roster()
    identity = cdir.identity(agent)
    roster.agent(agent)
    bind = parse_address(listen) if listen else None
    limits = Limits.parse(limit)
    host, port = bind or (roster.agent(agent).host, roster.agent(agent).port)
    remedy = "serve on another address with --listen HOST:PORT"
    if port:
        clusterlib.check_port(agent, host, port, remedy)

    async def serve() -> None:
        async with collapsing_task_group() as tg:  # a refused store: one line, no traceback
            bound = await tg.start(
                functools.partial(
                    owner_runner(cdir, agent),
                    roster,
                    identity,
                    cdir.db(agent),
                    cdir.log(agent),
                    listen=bind,
                    limits=limits,
                    accept_loss=accept_loss,
                )
            )
            typer.echo(f"owner {agent} listening on {host}:{bound}")

    try:
        run_async(serve)
    except (OSError, BaseExceptionGroup) as exc:  # the port was taken after the check
        if not clusterlib.address_in_use(exc):
            raise
        raise ConfigError(
            f"port {port} of {agent} ({host}:{port}) is already in use; {remedy}"
        ) from None


# ---- records -------------------------------------------------------------------------------


@app.command("put")
@user_errors
def put(
    path: Path = DirArg,
    key: str = typer.Argument(..., help="Semantic key."),
    body: str = typer.Option(..., "--body", help="Record body as JSON."),
    parent: list[str] = typer.Option([], "--parent", help="Parent record id (repeat)."),
    kind: str = typer.Option("fact", "--kind", help="fact, plan, action, ..."),
    json_out: bool = JsonOpt,
    as_agent: str | None = typer.Option(
        None,
        "--as",
        help="Write as this agent (default: the key's owner; owners "
        "refuse writes from anyone else).",
    ),
    deadline: float = DeadlineOpt,
) -> None:
    """Write a record as the agent that owns KEY; prints its id and seq."""
    write_record(path, key, body, parent, kind, json_out, as_agent, deadline)


@app.command("heads")
@user_errors
def heads(
    path: Path = DirArg,
    keys: list[str] = typer.Argument(..., help="Keys."),
    as_agent: str | None = AsOpt,
    json_out: bool = JsonOpt,
    deadline: float = DeadlineOpt,
) -> None:
    """Current head of each KEY, asked from its owner."""
    from ..cluster.processes import link_addresses
    from ..net.api import query_heads

    cdir = cluster_dir(path)
    rows = run_async(
        query_heads,
        cdir.roster(),
        identity_for(cdir, as_agent),
        keys,
        link_addresses(cdir),
        deadline,
    )
    if json_out:
        echo_json(rows)
        return
    print_table(
        ["key", "owner", "seq", "id"],
        [[r["key"], r["owner"], r["seq"], r["id"].hex() if r["id"] else "-"] for r in rows],
    )


@app.command("get")
@user_errors
def get(
    path: Path = DirArg,
    ids: list[str] = typer.Argument(..., help="Record ids (hex)."),
    as_agent: str | None = AsOpt,
    json_out: bool = JsonOpt,
    deadline: float = DeadlineOpt,
) -> None:
    """Fetch records by id (or unique prefixes of 8+ hex) from the owners; verify them."""
    from ..cluster.processes import link_addresses
    from ..net.api import get_records

    cdir = cluster_dir(path)
    wanted = resolve_ids(cdir, ids)
    records = run_async(
        get_records,
        cdir.roster(),
        identity_for(cdir, as_agent),
        wanted,
        link_addresses(cdir),
        deadline,
    )
    if json_out:
        echo_json([r.to_json() for r in records])
        return
    for r in records:
        typer.echo(
            f"{r.id.hex()} {r.key} seq {r.seq} {r.kind} by {r.owner} "
            f"parents [{', '.join(p.hex()[:16] for p in r.parents)}] "
            f"body {json.dumps(to_jsonable(r.body))}"
        )


@app.command("logs")
@user_errors
def logs(
    path: Path = DirArg,
    agent: str = typer.Argument(..., help="Agent name."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines."),
    event: str | None = typer.Option(None, "--event", help="Only this event name."),
    shaper: bool = typer.Option(
        False, "--shaper", help="The output of the shaper in front of AGENT."
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Print an owner's structured log (connections, handshakes, requests, puts, errors), or
    with --shaper the output of the shaper in front of it."""
    from ..cluster.processes import shaper_name
    from ..core.errors import PlanfenceError
    from ..owners.logs import EVENTS, format_event, read_events, read_lines

    cdir = cluster_dir(path)
    cdir.roster().agent(agent)
    if event is not None and event not in EVENTS:
        raise PlanfenceError(f"unknown event {event!r}; owners log: {', '.join(EVENTS)}")
    source = cdir.out(shaper_name(agent)) if shaper else cdir.log(agent)
    try:
        entries = (
            ({"agent": agent, "line": line} for line in read_lines(source, follow))
            if shaper
            else read_events(source, event=event, follow=follow)
        )
        for entry in entries:
            if json_out:
                typer.echo(json.dumps(entry))
            else:
                typer.echo(entry["line"] if shaper else format_event(entry))
    except FileNotFoundError:
        what = "shaper output" if shaper else "log"
        raise PlanfenceError(f"no {what} for {agent} yet at {source}") from None
    except KeyboardInterrupt:
        pass


cli_executor.register(app)
cli_shape.register(app)
cli_bench.register(app)
cli_traces.register(app)
cli_inspect.register(app, owner_app)
cli_workspace.register(app)
cli_hook.register(app)
cli_mcp.register(app)
cli_ping.register(app)
