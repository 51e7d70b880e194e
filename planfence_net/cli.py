"""The `planfence` command: a thin shell over the library (the composition root)."""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import anyio
import typer
from rich.console import Console
from rich.table import Table

from . import cli_bench, cli_shape
from . import cluster as clusterlib
from .api import get_records, put_record, query_heads, wait_cluster_ready
from .cluster import ClusterDir
from .errors import PlanfenceError
from .executor.demo import run_demo, summarize
from .executor.harness import bench_cluster
from .executor.pool import SessionPool
from .executor.replica import Replica
from .executor.runner import GateRunner
from .executor.scenario import Outcome
from .gate import Action, Decision
from .roster import parse_address
from .traces import require_traces
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
    options = {"use_uvloop": True} if importlib.util.find_spec("uvloop") else {}
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
                 compose: bool = typer.Option(
                     False, "--compose", help="Lay out for docker-compose.yml (owner-NAME:7401 "
                                              "reached through shaper-NAME:7402)."),
                 json_out: bool = JsonOpt) -> None:
    """Create a cluster folder: roster, identity keys, data and log folders."""
    roster = clusterlib.init_cluster(path, agents=agents, base_port=base_port, compose=compose)
    if json_out:
        echo_json({"cluster": roster.cluster, "agents": [a.to_json() for a in roster.agents]})
        return
    typer.echo(f"cluster {roster.cluster!r} with {len(roster.agents)} agents in {path}")
    print_table(["agent", "address", "owns"],
                [[a.name, a.address, " ".join(a.owns)] for a in roster.agents])


@cluster_app.command("up")
@user_errors
def cluster_up(path: Path = DirArg, json_out: bool = JsonOpt,
               profile: str = typer.Option(
                   "loopback", "--profile",
                   help="Link profile: a shaper in front of every owner (see `planfence profiles`)."),
               delay_ms: Optional[int] = typer.Option(None, "--delay-ms", min=0,
                                                      help="One-way delay override."),
               loss: float = typer.Option(0.0, "--loss", min=0.0, max=0.99,
                                          help="Loss probability on every link."),
               timeout: float = typer.Option(20.0, help="Seconds to wait for owners.")) -> None:
    """Start every owner (and shaper) that is not running; return once each accepts sessions."""
    cdir = ClusterDir(path)
    roster = cdir.roster()
    require_traces(profile)  # fail before starting anything
    started = clusterlib.start_owners(cdir)
    run_async(wait_cluster_ready, cdir, started, timeout)
    links = clusterlib.start_shapers(cdir, profile, delay_ms=delay_ms, loss=loss)
    if links:
        run_async(functools.partial(wait_cluster_ready, cdir, roster.names, timeout, links,
                                    watch=clusterlib.shaper_name))
    if json_out:
        echo_json({"started": started, "running": roster.names, "profile": profile,
                   "links": {a: f"{h}:{p}" for a, (h, p) in links.items()}})
    else:
        typer.echo(f"started {len(started)} owner(s): {', '.join(started) or '-'}; "
                   f"{len(roster.agents)} running"
                   + (f"; links shaped with {profile}" if links else ""))


@cluster_app.command("status")
@user_errors
def cluster_status(path: Path = DirArg, json_out: bool = JsonOpt) -> None:
    """Per agent: name, address, pid, alive, owned patterns, and the shaper in front of it."""
    cdir = ClusterDir(path)
    links = clusterlib.link_addresses(cdir)
    profile = clusterlib.read_links(cdir).get("profile")
    rows = []
    for agent in cdir.roster().agents:
        pid = clusterlib.running_pid(cdir, agent.name, clusterlib.owner_marker(cdir, agent.name))
        link = links.get(agent.name)
        rows.append({"name": agent.name, "address": agent.address,
                     "pid": pid or clusterlib.read_pid(cdir, agent.name), "alive": pid is not None,
                     "owns": list(agent.owns),
                     "shaper": {"address": f"{link[0]}:{link[1]}", "profile": profile,
                                "pid": clusterlib.read_pid(cdir, clusterlib.shaper_name(
                                    agent.name))} if link else None})
    if json_out:
        echo_json(rows)
        return
    print_table(["agent", "address", "pid", "alive", "owns", "shaper"],
                [[r["name"], r["address"], r["pid"] or "-", "yes" if r["alive"] else "no",
                  " ".join(r["owns"]),
                  f"{r['shaper']['address']} ({profile})" if r["shaper"] else "-"]
                 for r in rows])


@cluster_app.command("down")
@user_errors
def cluster_down(path: Path = DirArg, json_out: bool = JsonOpt) -> None:
    """Stop every process of the cluster (SIGTERM, then SIGKILL after 10 s)."""
    cdir = ClusterDir(path)
    shapers = clusterlib.stop_shapers(cdir)
    stopped = clusterlib.stop_owners(cdir)
    if json_out:
        echo_json({"stopped": stopped, "shapers_stopped": shapers})
    else:
        typer.echo(f"stopped {len(stopped)} owner(s): {', '.join(stopped) or '-'}"
                   + (f"; {len(shapers)} shaper(s)" if shapers else ""))


# ---- owner ---------------------------------------------------------------------------------

@owner_app.command("serve")
@user_errors
def owner_serve(path: Path = DirArg,
                agent: str = typer.Option(..., "--agent", help="Which agent to serve as."),
                listen: Optional[str] = typer.Option(
                    None, "--listen", help="HOST:PORT to bind instead of the roster address "
                                           "(e.g. 0.0.0.0:7401 in a container).")) -> None:
    """Run one owner daemon in the foreground until SIGTERM or Ctrl-C."""
    cdir = ClusterDir(path)
    roster = cdir.roster()
    identity = cdir.identity(agent)
    roster.agent(agent)
    bind = parse_address(listen) if listen else None

    async def serve() -> None:
        async with anyio.create_task_group() as tg:
            port = await tg.start(functools.partial(
                run_owner, roster, identity, cdir.db(agent), cdir.log(agent), listen=bind))
            host = bind[0] if bind else roster.agent(agent).host
            typer.echo(f"owner {agent} listening on {host}:{port}")

    run_async(serve)


# ---- records -------------------------------------------------------------------------------

def parse_body(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--body is not valid JSON: {exc}") from None


AsOpt = typer.Option(None, "--as", help="Roster member to connect as (default: the first).")


@app.command("put")
@user_errors
def put(path: Path = DirArg, key: str = typer.Argument(..., help="Semantic key."),
        body: str = typer.Option(..., "--body", help="Record body as JSON."),
        parent: list[str] = typer.Option([], "--parent", help="Parent record id (repeat)."),
        kind: str = typer.Option("fact", "--kind", help="fact, plan, action, ..."),
        json_out: bool = JsonOpt,
        as_agent: Optional[str] = typer.Option(
            None, "--as", help="Write as this agent (default: the key's owner; owners "
                               "refuse writes from anyone else).")) -> None:
    """Write a record as the agent that owns KEY; prints its id and seq."""
    cdir = ClusterDir(path)
    roster = cdir.roster()
    value, parents = parse_body(body), [parse_id(p) for p in parent]
    owner = roster.owner_of(key)
    if owner is None:
        raise PlanfenceError(f"no agent owns {key!r} in the roster")
    writer = cdir.identity(as_agent or owner)
    result = run_async(functools.partial(put_record, roster, writer, key,
                                         body=value, parents=parents, kind=kind,
                                         addresses=clusterlib.link_addresses(cdir)))
    if json_out:
        echo_json(result)
    else:
        typer.echo(f"{key} seq {result['seq']} id {result['id'].hex()} (owner {owner})")


def identity_for(cdir: ClusterDir, as_agent: str | None) -> Any:
    roster = cdir.roster()
    return cdir.identity(as_agent or roster.agents[0].name)


@app.command("heads")
@user_errors
def heads(path: Path = DirArg, keys: list[str] = typer.Argument(..., help="Keys."),
          as_agent: Optional[str] = AsOpt, json_out: bool = JsonOpt) -> None:
    """Current head of each KEY, asked from its owner."""
    cdir = ClusterDir(path)
    rows = run_async(query_heads, cdir.roster(), identity_for(cdir, as_agent), keys,
                     clusterlib.link_addresses(cdir))
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
    records = run_async(get_records, cdir.roster(), identity_for(cdir, as_agent), wanted,
                        clusterlib.link_addresses(cdir))
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


# ---- executor ------------------------------------------------------------------------------

@app.command("plan")
@user_errors
def plan(path: Path = DirArg, key: str = typer.Argument(..., help="Plan key (e.g. plan/x)."),
         body: str = typer.Option(..., "--body", help="Plan body as JSON."),
         parent: list[str] = typer.Option(..., "--parent", help="Record the plan used (repeat)."),
         json_out: bool = JsonOpt) -> None:
    """Write a plan record, derived from the given parent records, as its owner."""
    put(path, key, body, parent, "plan", json_out, None)


EXIT_AUTHORIZED, EXIT_STALE, EXIT_BLOCKED = 0, 2, 3


@app.command("authorize")
@user_errors
def authorize(path: Path = DirArg,
              root: list[str] = typer.Option(..., "--root", help="Plan record id (repeat)."),
              dep: list[str] = typer.Option(..., "--dep", help="Declared key (repeat)."),
              as_agent: Optional[str] = AsOpt,
              name: str = typer.Option("action", "--name", help="Action name for the log."),
              deadline: float = typer.Option(5.0, "--deadline", help="Seconds per step."),
              json_out: bool = JsonOpt) -> None:
    """Validate a plan's declared dependencies against their owners, right now.

    Exit 0: authorized. Exit 2: the plan is stale (a dependency drifted; replan and retry).
    Exit 3: blocked for another reason (owner unavailable, missing lineage, ...).
    """
    cdir = ClusterDir(path)
    roster = cdir.roster()
    identity = identity_for(cdir, as_agent)
    action = Action(name, tuple(parse_id(r) for r in root), tuple(dep))

    async def decide() -> Decision:
        async with anyio.create_task_group() as tg:
            pool = SessionPool(tg, roster, identity, clusterlib.link_addresses(cdir))
            runner = GateRunner(pool, await Replica.open(None), deadline=deadline)
            run = await runner.wait_decision(action)
            await pool.aclose()
            tg.cancel_scope.cancel()
        return run.decision

    decision = run_async(decide)
    if json_out:
        echo_json(decision.to_json())
    else:
        typer.echo(decision.explain())
    if decision.authorized:
        raise typer.Exit(EXIT_AUTHORIZED)
    raise typer.Exit(EXIT_STALE if decision.reason == "stale_plan" else EXIT_BLOCKED)


@app.command("demo")
@user_errors
def demo(keep: Optional[Path] = typer.Option(
             None, "--dir", help="Cluster folder to create and keep (default: a temporary one)."),
         profile: str = typer.Option(
             "loopback", "--profile",
             help="Put a shaper replaying this link profile in front of every owner."),
         json_out: bool = JsonOpt) -> None:
    """Run the stale-plan scenario on a new five-agent loopback cluster, then stop it.

    Starts five owners (and the central store of the centralized baseline) on 127.0.0.1,
    runs each workflow family under every baseline and PlanFence, prints the result table
    and one drift explained, and stops every process it started.
    """
    import tempfile

    require_traces(profile)  # fail before starting anything
    console = Console(stderr=True)
    with tempfile.TemporaryDirectory(prefix="planfence-demo-") as tmp:
        root = keep or Path(tmp) / "cluster"
        with console.status("starting five owners and the central store on 127.0.0.1 ...") \
                as status, bench_cluster(root, agents=5, name="planfence-demo") as cdir:
            try:
                links = clusterlib.start_shapers(cdir, profile)
                if links:
                    status.update(f"starting a {profile} shaper in front of every owner ...")
                    run_async(functools.partial(wait_cluster_ready, cdir, list(links), 20.0,
                                                links, watch=clusterlib.shaper_name))
                status.update("running the stale-plan scenario ...")
                outcomes = run_async(functools.partial(
                    run_demo, cdir, addresses=links,
                    progress=lambda m: status.update(f"running {m} ...")))
            finally:
                clusterlib.stop_shapers(cdir)
    where = "5 owners and a central store on 127.0.0.1"
    report_outcomes(outcomes, json_out, where + (f", links shaped with {profile}"
                                                 if profile != "loopback" else ""))


@app.command("scenario")
@user_errors
def scenario(path: Path = DirArg, json_out: bool = JsonOpt) -> None:
    """Run the stale-plan scenario against a running cluster and print the result table.

    Runs as agent `ops`, through the cluster's shapers when it has them.
    """
    cdir = ClusterDir(path)
    links = clusterlib.link_addresses(cdir)
    outcomes = run_async(functools.partial(run_demo, cdir, addresses=links))
    report_outcomes(outcomes, json_out, f"{len(cdir.roster().agents)} owners"
                    + (" through shapers" if links else ""))


def report_outcomes(outcomes: list[Outcome], json_out: bool, where: str) -> None:
    rows = summarize(outcomes)
    drifted = next((o for o in outcomes if o.policy == "planfence" and o.decision is not None
                    and o.decision.drift), None)
    if json_out:
        echo_json({"summary": [r.to_json() for r in rows],
                   "actions": [outcome_json(o) for o in outcomes]})
        return
    typer.echo(f"stale-plan scenario: {where}, "
               f"{len(outcomes) // len(rows)} workflow families per policy\n")
    print_table(["policy", "issued", "invalid", "replans", "blocked", "stall ms/action",
                 "KiB/action"],
                [[r.policy, r.issued, r.invalid, r.replans, r.blocked, f"{r.stall_ms:.2f}",
                  f"{r.kib:.2f}"] for r in rows])
    if drifted is not None and drifted.decision is not None:
        typer.echo(f"\nwhy PlanFence replanned the {drifted.family} action:")
        typer.echo(drifted.decision.explain())


def outcome_json(o: Outcome) -> dict[str, Any]:
    return {"family": o.family, "policy": o.policy, "issued": o.issued,
            "action_id": o.action_id.hex() if o.action_id else None, "invalid": o.invalid,
            "replanned": o.replanned, "blocked": o.blocked, "stall_ms": o.stall * 1000,
            "bytes": o.traffic,
            "decision": o.decision.to_json() if o.decision is not None else None}


cli_shape.register(app)
cli_bench.register(app)


def main() -> None:
    app()
