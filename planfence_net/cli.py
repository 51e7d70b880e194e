"""The `planfence` command: a thin shell over the library (the composition root)."""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import anyio
import typer
from rich.console import Console
from rich.table import Table

from . import cluster as clusterlib
from .api import get_records, put_record, query_heads, wait_owner_ready
from .cluster import ClusterDir
from .errors import PlanfenceError
from .owners.daemon import run_owner
from .owners.logs import format_event, read_events

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="planfence-net: dependency-scoped plan validation for agent teams.")
cluster_app = typer.Typer(no_args_is_help=True, help="Create, start, inspect and stop a cluster.")
owner_app = typer.Typer(no_args_is_help=True, help="Run an owner daemon.")
app.add_typer(cluster_app, name="cluster")
app.add_typer(owner_app, name="owner")

F = TypeVar("F", bound=Callable[..., Any])
DirArg = typer.Argument(..., help="Cluster folder (made by `planfence cluster init`).")
JsonOpt = typer.Option(False, "--json", help="Print JSON instead of a table.")


def run_async(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a coroutine function on asyncio (uvloop when installed)."""
    try:
        import uvloop  # noqa: F401
        options = {"use_uvloop": True}
    except ImportError:
        options = {}
    return anyio.run(fn, *args, backend="asyncio", backend_options=options)


def user_errors(fn: F) -> F:
    """Turn planfence errors into one line on stderr and exit code 1, no traceback."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except PlanfenceError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
    return wrapper  # type: ignore[return-value]


def to_jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value


def echo_json(value: Any) -> None:
    typer.echo(json.dumps(to_jsonable(value), indent=2))


def parse_id(text: str) -> bytes:
    try:
        rid = bytes.fromhex(text)
    except ValueError:
        rid = b""
    if len(rid) != 32:
        raise typer.BadParameter(f"{text!r} is not a record id (64 hex characters)")
    return rid


def print_table(columns: list[str], rows: list[list[Any]]) -> None:
    table = Table(*columns, box=None, pad_edge=False)
    for row in rows:
        table.add_row(*[str(c) for c in row])
    Console(width=160).print(table)


# ---- cluster -------------------------------------------------------------------------------

@cluster_app.command("init")
@user_errors
def cluster_init(path: Path = DirArg,
                 agents: int = typer.Option(5, "--agents", min=1, help="Number of agents."),
                 base_port: Optional[int] = typer.Option(
                     None, "--base-port", help="First port (0: pick free ports)."),
                 json_out: bool = JsonOpt) -> None:
    """Create a cluster folder: roster, identity keys, data and log folders."""
    roster = clusterlib.init_cluster(path, agents=agents, base_port=base_port)
    if json_out:
        echo_json({"cluster": roster.cluster, "agents": [a.to_json() for a in roster.agents]})
        return
    typer.echo(f"cluster {roster.cluster!r} with {len(roster.agents)} agents in {path}")
    print_table(["agent", "address", "owns"],
                [[a.name, a.address, " ".join(a.owns)] for a in roster.agents])


@cluster_app.command("up")
@user_errors
def cluster_up(path: Path = DirArg, json_out: bool = JsonOpt,
               timeout: float = typer.Option(20.0, help="Seconds to wait for owners.")) -> None:
    """Start every owner that is not running; return once each accepts sessions."""
    cdir = ClusterDir(path)
    roster = cdir.roster()
    started = []
    for agent in roster.agents:
        marker = clusterlib.owner_marker(cdir, agent.name)
        if clusterlib.running_pid(cdir, agent.name, marker) is None:
            clusterlib.spawn(cdir, agent.name, clusterlib.owner_argv(cdir, agent.name))
            started.append(agent.name)

    async def wait_all() -> None:
        deadline = time.monotonic() + timeout
        async with anyio.create_task_group() as tg:
            for name in started:
                marker = clusterlib.owner_marker(cdir, name)
                pid = clusterlib.read_pid(cdir, name)
                alive = functools.partial(clusterlib.process_alive, pid or 0, marker)
                tg.start_soon(wait_one, name, deadline, alive)

    async def wait_one(name: str, deadline: float, alive: Callable[[], bool]) -> None:
        try:
            await wait_owner_ready(roster, cdir.identity(name), name, deadline, alive)
        except PlanfenceError as exc:
            output = clusterlib.tail(cdir.out(name))
            raise PlanfenceError(f"owner {name} failed to start: {exc}"
                                 + (f"\n{output}" if output else "")) from None

    run_async(wait_all)
    if json_out:
        echo_json({"started": started, "running": roster.names})
    else:
        typer.echo(f"started {len(started)} owner(s): {', '.join(started) or '-'}; "
                   f"{len(roster.agents)} running")


@cluster_app.command("status")
@user_errors
def cluster_status(path: Path = DirArg, json_out: bool = JsonOpt) -> None:
    """Per agent: name, address, pid, alive, owned patterns."""
    cdir = ClusterDir(path)
    rows = []
    for agent in cdir.roster().agents:
        pid = clusterlib.read_pid(cdir, agent.name)
        alive = pid is not None and clusterlib.process_alive(
            pid, clusterlib.owner_marker(cdir, agent.name))
        rows.append({"name": agent.name, "address": agent.address, "pid": pid,
                     "alive": alive, "owns": list(agent.owns)})
    if json_out:
        echo_json(rows)
        return
    print_table(["agent", "address", "pid", "alive", "owns"],
                [[r["name"], r["address"], r["pid"] or "-", "yes" if r["alive"] else "no",
                  " ".join(r["owns"])] for r in rows])


@cluster_app.command("down")
@user_errors
def cluster_down(path: Path = DirArg, json_out: bool = JsonOpt) -> None:
    """Stop every process of the cluster (SIGTERM, then SIGKILL after 10 s)."""
    cdir = ClusterDir(path)
    stopped = [agent.name for agent in cdir.roster().agents
               if clusterlib.stop_process(cdir, agent.name,
                                          clusterlib.owner_marker(cdir, agent.name))]
    if json_out:
        echo_json({"stopped": stopped})
    else:
        typer.echo(f"stopped {len(stopped)} owner(s): {', '.join(stopped) or '-'}")


# ---- owner ---------------------------------------------------------------------------------

@owner_app.command("serve")
@user_errors
def owner_serve(path: Path = DirArg,
                agent: str = typer.Option(..., "--agent", help="Which agent to serve as.")) -> None:
    """Run one owner daemon in the foreground until SIGTERM or Ctrl-C."""
    cdir = ClusterDir(path)
    roster = cdir.roster()
    identity = cdir.identity(agent)
    roster.agent(agent)

    async def serve() -> None:
        async with anyio.create_task_group() as tg:
            port = await tg.start(functools.partial(
                run_owner, roster, identity, cdir.db(agent), cdir.log(agent)))
            typer.echo(f"owner {agent} listening on {roster.agent(agent).host}:{port}")

    run_async(serve)


# ---- records -------------------------------------------------------------------------------

def parse_body(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--body is not valid JSON: {exc}") from None


@app.command("put")
@user_errors
def put(path: Path = DirArg, key: str = typer.Argument(..., help="Semantic key."),
        body: str = typer.Option(..., "--body", help="Record body as JSON."),
        parent: list[str] = typer.Option([], "--parent", help="Parent record id (repeat)."),
        kind: str = typer.Option("fact", "--kind", help="fact, plan, action, ..."),
        json_out: bool = JsonOpt) -> None:
    """Write a record as the agent that owns KEY; prints its id and seq."""
    cdir = ClusterDir(path)
    roster = cdir.roster()
    value, parents = parse_body(body), [parse_id(p) for p in parent]
    owner = roster.owner_of(key)
    if owner is None:
        raise PlanfenceError(f"no agent owns {key!r} in the roster")
    result = run_async(functools.partial(put_record, roster, cdir.identity(owner), key,
                                         body=value, parents=parents, kind=kind))
    if json_out:
        echo_json(result)
    else:
        typer.echo(f"{key} seq {result['seq']} id {result['id'].hex()} (owner {owner})")


def identity_for(cdir: ClusterDir, as_agent: str | None) -> Any:
    roster = cdir.roster()
    return cdir.identity(as_agent or roster.agents[0].name)


AsOpt = typer.Option(None, "--as", help="Roster member to connect as (default: the first).")


@app.command("heads")
@user_errors
def heads(path: Path = DirArg, keys: list[str] = typer.Argument(..., help="Keys."),
          as_agent: Optional[str] = AsOpt, json_out: bool = JsonOpt) -> None:
    """Current head of each KEY, asked from its owner."""
    cdir = ClusterDir(path)
    rows = run_async(query_heads, cdir.roster(), identity_for(cdir, as_agent), keys)
    if json_out:
        echo_json(rows)
        return
    print_table(["key", "owner", "seq", "id"],
                [[r["key"], r["owner"], r["seq"], r["id"].hex() if r["id"] else "-"]
                 for r in rows])


@app.command("get")
@user_errors
def get(path: Path = DirArg, ids: list[str] = typer.Argument(..., help="Record ids (hex)."),
        as_agent: Optional[str] = AsOpt, json_out: bool = JsonOpt) -> None:
    """Fetch records by id from the owners and verify them."""
    cdir = ClusterDir(path)
    wanted = [parse_id(i) for i in ids]
    records = run_async(get_records, cdir.roster(), identity_for(cdir, as_agent), wanted)
    if json_out:
        echo_json([r.to_json() for r in records])
        return
    for r in records:
        typer.echo(f"{r.id.hex()} {r.key} seq {r.seq} {r.kind} by {r.owner} "
                   f"parents [{', '.join(p.hex()[:16] for p in r.parents)}] "
                   f"body {json.dumps(to_jsonable(r.body))}")


@app.command("logs")
@user_errors
def logs(path: Path = DirArg, agent: str = typer.Argument(..., help="Agent name."),
         follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines."),
         event: Optional[str] = typer.Option(None, "--event", help="Only this event name."),
         json_out: bool = JsonOpt) -> None:
    """Print an owner's structured log (connections, handshakes, requests, puts, errors)."""
    cdir = ClusterDir(path)
    cdir.roster().agent(agent)
    try:
        for entry in read_events(cdir.log(agent), event=event, follow=follow):
            typer.echo(json.dumps(entry) if json_out else format_event(entry))
    except FileNotFoundError:
        raise PlanfenceError(f"no log for {agent} yet at {cdir.log(agent)}") from None
    except KeyboardInterrupt:
        pass


def main() -> None:
    app()
