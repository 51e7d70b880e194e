"""`planfence owner serve|restart|stop|start|compact`, `put`, `heads`, `get` and `logs`: records and the
owners that hold them. `register(app)` adds them to the composition root's click group."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..core.errors import ConfigError, PlanfenceError
from ..core.escaping import escape
from . import inspect as cli_inspect
from .group import Group
from .params import Argument, Option
from .support import (
    AsOpt,
    DeadlineAlias,
    DirArg,
    JsonOpt,
    TimeoutOpt,
    cluster_dir,
    echo_json,
    identity_for,
    print_table,
    resolve_ids,
    run_async,
    timeout_of,
    user_errors,
    write_record,
)
from .text import to_jsonable

if TYPE_CHECKING:  # the commands import the library in their bodies: `put --help` loads none
    from collections.abc import Iterator
    from typing import Any

    from ..cluster.folder import ClusterDir
    from ..core.identity import Identity
    from ..core.roster import Roster
    from ..owners.limits import Limits


def register(app: Group) -> None:
    """Add `owner` (serve, restart, stop, start, compact), `put`, `heads`, `get` and `logs` to `app`."""
    owner_app = Group("owner", help="Run, stop, start or restart an owner daemon.")
    owner_app.command("serve")(owner_serve)
    owner_app.command("restart")(cli_inspect.restart)
    owner_app.command("stop")(owner_stop)
    owner_app.command("start")(owner_start)
    owner_app.command("compact")(owner_compact)
    app.add_command(owner_app)
    app.command("put")(put)
    app.command("heads")(heads)
    app.command("get")(get)
    app.command("logs")(logs)


# ---- owner ---------------------------------------------------------------------------------


@user_errors
def owner_serve(
    path: Path = DirArg,
    agent: str = Option(..., "--agent", help="Which agent to serve as."),
    listen: str | None = Option(
        None,
        "--listen",
        help="HOST:PORT to bind instead of the roster address (e.g. 0.0.0.0:7401 in a container).",
    ),
    limit: list[str] = Option(
        [],
        "--limit",
        help="NAME=VALUE: change one resource limit, e.g. "
        "max_connections=200 (repeat; docs/FAULTS.md).",
    ),
    accept_loss: bool = Option(
        False,
        "--accept-loss",
        help="Start even though the store lost "
        "acknowledged records; sign above the highest "
        "seq ever acknowledged (docs/FAULTS.md).",
    ),
) -> None:
    """Run one owner daemon in the foreground until SIGTERM or Ctrl-C."""
    from ..cluster.ports import address_in_use, check_port
    from ..core.roster import parse_address
    from ..owners.limits import Limits

    cdir = cluster_dir(path)
    roster = cdir.roster()
    identity = cdir.identity(agent)
    roster.agent(agent)
    bind = parse_address(listen) if listen else None
    limits = Limits.parse(limit)
    host, port = bind or (roster.agent(agent).host, roster.agent(agent).port)
    remedy = "serve on another address with --listen HOST:PORT"
    if port:
        check_port(agent, host, port, remedy)
    serve = functools.partial(
        serve_owner,
        cdir,
        roster,
        identity,
        host=host,
        bind=bind,
        limits=limits,
        accept_loss=accept_loss,
    )
    try:
        run_async(serve)
    except (OSError, BaseExceptionGroup) as exc:  # the port was taken after the check
        if not address_in_use(exc):
            raise
        raise ConfigError(
            f"port {port} of {agent} ({host}:{port}) is already in use; {remedy}"
        ) from None


async def serve_owner(
    cdir: ClusterDir,
    roster: Roster,
    identity: Identity,
    *,
    host: str,
    bind: tuple[str, int] | None,
    limits: Limits,
    accept_loss: bool,
) -> None:
    """Serve `identity`'s owner of `cdir` (an ordinary or a workspace owner) until cancelled,
    on `bind` instead of the roster's address when given; print `host` and the port it
    listens on once it does."""
    from ..net.client import collapsing_task_group
    from ..workspace.owner.daemon import owner_runner

    agent = identity.name
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
        click.echo(f"owner {agent} listening on {host}:{bound}")


@user_errors
def owner_stop(
    path: Path = DirArg, agent: str = Argument(..., help="Agent name."), json_out: bool = JsonOpt
) -> None:
    """Stop AGENT's owner of a running cluster (SIGTERM, SIGKILL after 10 s); the others keep
    running. `planfence owner start` (or `cluster up`) starts it again."""
    from ..cluster.lifecycle import stop_owner

    pid = stop_owner(cluster_dir(path), agent)
    if json_out:
        echo_json({"agent": agent, "pid": pid, "was_running": pid is not None})
    else:
        click.echo(f"stopped {agent} (pid {pid})" if pid else f"{agent} was not running")


@user_errors
def owner_start(
    path: Path = DirArg,
    agent: str = Argument(..., help="Agent name."),
    timeout: float = Option(20.0, "--timeout", help="Seconds to wait for it."),
    json_out: bool = JsonOpt,
) -> None:
    """Start AGENT's owner unless it runs (the shaper in front of it, if any, keeps
    running); returns once it accepts sessions."""
    from ..cluster.lifecycle import start_owner

    pid, started = start_owner(cluster_dir(path), agent, timeout)
    if json_out:
        echo_json({"agent": agent, "pid": pid, "started": started})
    else:
        click.echo(f"{'started' if started else 'already running:'} {agent} (pid {pid})")


# ---- records -------------------------------------------------------------------------------


@user_errors
def put(
    path: Path = DirArg,
    key: str = Argument(..., help="Semantic key."),
    body: str = Option(..., "--body", help="Record body as JSON."),
    parent: list[str] = Option([], "--parent", help="Parent record id (repeat)."),
    kind: str = Option("fact", "--kind", help="fact, plan, action, ..."),
    json_out: bool = JsonOpt,
    as_agent: str | None = Option(
        None,
        "--as",
        help="Write as this agent (default: the key's owner; owners "
        "refuse writes from anyone else).",
    ),
    timeout: float = TimeoutOpt,
    deadline: float | None = DeadlineAlias,
) -> None:
    """Write a record as the agent that owns KEY; prints its id and seq."""
    write_record(path, key, body, parent, kind, json_out, as_agent, timeout_of(timeout, deadline))


@user_errors
def heads(
    path: Path = DirArg,
    keys: list[str] = Argument(..., help="Keys."),
    as_agent: str | None = AsOpt,
    json_out: bool = JsonOpt,
    timeout: float = TimeoutOpt,
    deadline: float | None = DeadlineAlias,
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
        timeout_of(timeout, deadline),
    )
    if json_out:
        echo_json(rows)
        return
    print_table(
        ["key", "owner", "seq", "id"],
        [[r["key"], r["owner"], r["seq"], r["id"].hex() if r["id"] else "-"] for r in rows],
    )


@user_errors
def get(
    path: Path = DirArg,
    ids: list[str] = Argument(..., help="Record ids (hex)."),
    as_agent: str | None = AsOpt,
    json_out: bool = JsonOpt,
    timeout: float = TimeoutOpt,
    deadline: float | None = DeadlineAlias,
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
        timeout_of(timeout, deadline),
    )
    if json_out:
        echo_json([r.to_json() for r in records])
        return
    for r in records:
        click.echo(
            f"{r.id.hex()} {r.key} seq {r.seq} {r.kind} by {r.owner} "
            f"parents [{', '.join(p.hex()[:16] for p in r.parents)}] "
            f"body {json.dumps(to_jsonable(r.body))}"
        )


@user_errors
def logs(
    path: Path = DirArg,
    agent: str | None = Argument(
        None,
        metavar="[AGENT]",
        help="Agent name (default: every owner, merged by time, the agent on each line).",
    ),
    follow: bool = Option(False, "--follow", "-f", help="Keep printing new lines."),
    event: str | None = Option(None, "--event", help="Only this event name."),
    shaper: bool = Option(False, "--shaper", help="The output of the shaper in front of AGENT."),
    json_out: bool = JsonOpt,
) -> None:
    """Print an owner's structured log (connections, handshakes, requests, puts, errors), or
    with --shaper the output of the shaper in front of it.

    The decisions the agent made as an executor (`gate` lines, logs/executors/AGENT.jsonl)
    are merged in by time. Without AGENT, every owner's and executor's log as one stream, merged by time, each line
    starting with its agent; with --follow, new lines of every log as they come, until Ctrl-C.
    """
    from ..cluster.processes import shaper_name
    from ..executor.decisionlog import decision_log_path, executor_logs
    from ..owners.logs import EVENTS, format_event, read_events, read_lines, read_merged

    cdir = cluster_dir(path)
    roster = cdir.roster()
    if agent is not None:
        roster.agent(agent)
    elif shaper:
        raise click.BadParameter("--shaper needs an AGENT", param_hint="'--shaper'")
    if event is not None and event not in EVENTS:
        raise click.BadParameter(
            f"unknown event {event!r}; owners log: {', '.join(EVENTS)}", param_hint="'--event'"
        )
    width = max(len(name) for name in roster.names)
    try:
        if agent is None:
            paths = {name: cdir.log(name) for name in roster.names}
            paths |= executor_logs(cdir.root, roster.names)  # the executors' decisions
            merged = read_merged(paths, event=event, follow=follow)
            for entry in merged:
                if json_out:
                    click.echo(json.dumps(entry))
                else:
                    who = escape(str(entry.get("agent", "?")))
                    click.echo(f"{who:<{width}} {format_event(entry)}")
            return
        source = cdir.out(shaper_name(agent)) if shaper else cdir.log(agent)
        decisions = decision_log_path(cdir.root, agent)  # the agent's own, as an executor
        entries: Iterator[dict[str, Any]]
        if shaper:
            entries = ({"agent": agent, "line": line} for line in read_lines(source, follow))
        elif decisions.exists():
            logs = {agent: source, f"{agent} executor": decisions}
            entries = read_merged(logs, event=event, follow=follow)
        else:
            entries = read_events(source, event=event, follow=follow)
        for entry in entries:
            if json_out:
                click.echo(json.dumps(entry))
            else:
                click.echo(entry["line"] if shaper else format_event(entry))
    except FileNotFoundError:
        if agent is None:
            raise PlanfenceError(f"no owner has a log yet in {cdir.root / 'logs'}") from None
        what = "shaper output" if shaper else "log"
        raise PlanfenceError(f"no {what} for {agent} yet at {source}") from None
    except KeyboardInterrupt:
        pass


@user_errors
def owner_compact(
    path: Path = DirArg,
    agent: str = Option(..., "--agent", help="Whose store to compact (owner stopped)."),
    keep: int = Option(
        ..., "--keep", help="Records to keep per key, newest first (at least 1: the head)."
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Remove all but each key's KEEP newest records from a stopped owner's store, never one
    that the lineage of a head in any store of the cluster (so of any live plan) names."""
    from ..owners.compact import compact

    done = compact(cluster_dir(path), agent, keep)
    if json_out:
        echo_json(
            {
                "agent": done.agent,
                "records_before": done.records_before,
                "removed": done.removed,
                "records_after": done.records_after,
                "kept_for_lineage": done.kept_for_lineage,
                "bytes_before": done.bytes_before,
                "bytes_after": done.bytes_after,
            }
        )
        return
    click.echo(
        f"{done.agent}: removed {done.removed:,} of {done.records_before:,} records "
        f"({done.kept_for_lineage:,} old ones kept: a live lineage names them); "
        f"{done.bytes_before:,} -> {done.bytes_after:,} bytes on disk"
    )
