"""Looking into a cluster: the keys and records an owner holds, a key's history, a record's
lineage, a shaper's log, and restarting one owner.

`keys`, `records` and `history` read the owners' store files in the cluster folder
(read-only, while the owners run); `lineage` asks the owners over the network (`get`), so it
also works for a cluster whose stores live elsewhere.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..core.errors import ConfigError, PlanfenceError
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
)

if TYPE_CHECKING:  # imported where used: `planfence --help` loads no library
    from ..cluster.folder import ClusterDir
    from ..core.identity import Identity
    from ..core.records import Record
    from ..owners.reader import StoreReader

AgentArg = Argument(..., help="Agent name (see `planfence cluster status`).")
MAX_LINEAGE = 1000  # records a lineage walk fetches before it stops


def register(app: Group) -> None:
    """Add `keys`, `records`, `history` and `lineage` to `app` (`owner restart`, defined
    here, is added by cli/records.py with the rest of `owner`)."""
    app.command("keys")(keys)
    app.command("records")(records)
    app.command("history")(history)
    app.command("lineage")(lineage)


def _store(cdir: ClusterDir, agent: str) -> StoreReader:
    from ..owners.reader import StoreReader

    cdir.roster().agent(agent)
    return StoreReader(cdir.db(agent))


def _row(r: Record) -> dict[str, Any]:
    return {
        "id": r.id.hex(),
        "key": r.key,
        "seq": r.seq,
        "kind": r.kind,
        "owner": r.owner,
        "parents": [p.hex() for p in r.parents],
    }


def _print_records(rows: list[dict[str, Any]]) -> None:
    print_table(
        ["seq", "key", "kind", "id", "parents"],
        [
            [
                r["seq"],
                r["key"],
                r["kind"],
                r["id"][:16],
                " ".join(p[:16] for p in r["parents"]) or "-",
            ]
            for r in rows
        ],
    )


@user_errors
def keys(path: Path = DirArg, agent: str = AgentArg, json_out: bool = JsonOpt) -> None:
    """The keys AGENT's owner holds: head seq and id, and how many versions each has."""
    heads: dict[str, dict[str, Any]] = {}
    for r in _store(cluster_dir(path), agent).records():
        versions = heads.get(r.key, {}).get("versions", 0) + 1
        heads[r.key] = {"key": r.key, "seq": r.seq, "id": r.id.hex(), "versions": versions}
    rows = sorted(heads.values(), key=lambda h: h["key"])
    if json_out:
        echo_json(rows)
        return
    print_table(
        ["key", "seq", "head", "versions"],
        [[h["key"], h["seq"], h["id"][:16], h["versions"]] for h in rows],
    )


@user_errors
def records(
    path: Path = DirArg,
    agent: str = AgentArg,
    key: str | None = Option(None, "--key", help="Only this key's records."),
    json_out: bool = JsonOpt,
) -> None:
    """Every record AGENT's owner holds, oldest first: seq, key, kind, id, parents."""
    store = _store(cluster_dir(path), agent)
    rows = [_row(r) for r in (store.history(key) if key else store.records())]
    if json_out:
        echo_json(rows)
    else:
        _print_records(rows)


@user_errors
def history(
    path: Path = DirArg,
    key: str = Argument(..., help="Semantic key."),
    json_out: bool = JsonOpt,
) -> None:
    """Every version of KEY, oldest first (the last is the head), from its owner's store."""
    cdir = cluster_dir(path)
    owner = cdir.roster().owner_of(key)
    if owner is None:
        raise ConfigError(f"no agent owns {key!r} in the roster")
    rows = [_row(r) for r in _store(cdir, owner).history(key)]
    if not rows:
        raise PlanfenceError(f"{owner} holds no record of {key!r}")
    if json_out:
        echo_json(rows)
    else:
        _print_records(rows)


@user_errors
def lineage(
    path: Path = DirArg,
    record_id: str = Argument(..., metavar="ID", help="Record id (or a unique prefix of 8+ hex)."),
    depth: int = Option(8, "--depth", min=1, help="Parent levels to follow."),
    as_agent: str | None = AsOpt,
    timeout: float = TimeoutOpt,
    deadline: float | None = DeadlineAlias,
    json_out: bool = JsonOpt,
) -> None:
    """The record ID and its ancestors, walking parents level by level from the owners."""
    cdir = cluster_dir(path)
    start = resolve_ids(cdir, [record_id])
    found = run_async(
        functools.partial(
            _walk, cdir, identity_for(cdir, as_agent), start, depth, timeout_of(timeout, deadline)
        )
    )
    if json_out:
        echo_json([{**_row(r), "depth": d} for d, r in found])
        return
    print_table(
        ["depth", "key", "seq", "kind", "owner", "id", "parents"],
        [
            [
                d,
                r.key,
                r.seq,
                r.kind,
                r.owner,
                r.id.hex()[:16],
                " ".join(p.hex()[:16] for p in r.parents) or "-",
            ]
            for d, r in found
        ],
    )


async def _walk(
    cdir: ClusterDir, identity: Identity, start: list[bytes], depth: int, owner_timeout: float
) -> list[tuple[int, Record]]:
    """(depth, record) for the records reachable from `start` within `depth` parent levels,
    breadth first, each once; every record verified against the roster."""
    from ..cluster.processes import link_addresses
    from ..net.api import get_records

    roster, addresses = cdir.roster(), link_addresses(cdir)
    seen: set[bytes] = set(start)
    found: list[tuple[int, Record]] = []
    level = start
    for d in range(depth + 1):
        if not level or len(found) >= MAX_LINEAGE:
            break
        fetched = await get_records(roster, identity, level, addresses, owner_timeout)
        found += [(d, r) for r in fetched]
        level = [p for r in fetched for p in r.parents if p not in seen]
        seen.update(level)
    return found


@user_errors
def restart(
    path: Path = DirArg,
    agent: str = AgentArg,
    timeout: float = Option(20.0, "--timeout", help="Seconds to wait for it."),
    json_out: bool = JsonOpt,
) -> None:
    """Stop AGENT's owner (SIGTERM, SIGKILL after 10 s) and start it again; returns once it
    accepts sessions."""
    from ..cluster import processes as clusterlib
    from ..cluster.pids import read_pid
    from ..cluster.ready import wait_cluster_ready

    cdir = cluster_dir(path)
    cdir.roster().agent(agent)
    was_running = clusterlib.stop_process(cdir, agent, clusterlib.owner_marker(cdir, agent))
    clusterlib.start_owners(cdir, only=[agent])
    run_async(wait_cluster_ready, cdir, [agent], timeout)
    pid = read_pid(cdir, agent)
    if json_out:
        echo_json({"agent": agent, "pid": pid, "was_running": was_running})
    else:
        click.echo(f"{'restarted' if was_running else 'started'} {agent} (pid {pid})")
