"""Client operations on a running cluster: the library the CLI and scripts call.

Each function opens sessions as one roster member (`identity`), does one job and closes
them. Long-running executors use the executor's session pool instead.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from ..core.answers import verifier
from ..core.drive import FetchRound
from ..core.errors import ConfigError, PlanfenceError, RequestError, TransportError
from ..core.identity import Identity
from ..core.records import Record
from ..core.roster import Roster
from ..core.timeouts import DEFAULT_TIMEOUT
from .client import Session, collapsing_task_group, open_session

Addresses = dict[str, tuple[str, int]]


@asynccontextmanager
async def owner_session(
    roster: Roster,
    identity: Identity,
    owner: str,
    addresses: Addresses | None = None,
    owner_timeout: float = DEFAULT_TIMEOUT,
) -> AsyncIterator[Session]:
    """A session to `owner` whose whole use (connect, handshake, requests) must end within
    `owner_timeout` seconds; raises TransportError naming the owner and its address otherwise
    (and for any other transport failure).

    A program other than the owner on the roster port accepts the connection and then never
    answers the handshake: without a timeout the caller would wait forever.
    """
    where = _address(addresses, owner)
    address = f"{where['host']}:{where['port']}" if where else roster.agent(owner).address
    try:
        with anyio.fail_after(owner_timeout):
            async with open_session(roster, identity, owner, **where) as session:
                yield session
    except TimeoutError:
        raise TransportError(
            f"owner {owner} at {address} did not answer within {owner_timeout:g} s "
            f"(is it running? is another program on that port?)"
        ) from None
    except TransportError as exc:  # "cannot connect to HOST:PORT: ...": say whose it is
        message = str(exc)
        if message.startswith(f"owner {owner} "):
            raise
        raise TransportError(f"owner {owner}: {message}") from None


async def wait_owner_ready(
    roster: Roster,
    identity: Identity,
    owner: str,
    deadline: float,
    alive: Callable[[], bool] = lambda: True,
    addresses: Addresses | None = None,
) -> None:
    """Retry until `owner` accepts an authenticated session and answers a ping.

    Raises TransportError when `deadline` (a time.monotonic() value) passes first or
    `alive()` says the owner's process has exited.
    """
    last: Exception | None = None
    while time.monotonic() < deadline and alive():
        try:
            async with owner_session(
                roster, identity, owner, addresses, max(deadline - time.monotonic(), 0.001)
            ) as session:
                await session.request("ping")
                return
        except PlanfenceError as exc:
            last = exc
        await anyio.sleep(0.05)  # polling a process that is still starting: nothing to await
    raise TransportError(f"owner {owner} did not accept a session in time: {last}")


async def put_record(
    roster: Roster,
    identity: Identity,
    key: str,
    *,
    body: Any,
    parents: list[bytes] | None = None,
    kind: str = "fact",
    addresses: Addresses | None = None,
    owner_timeout: float = DEFAULT_TIMEOUT,
) -> dict[str, Any]:
    """Write a record as `identity` to the owner of `key`; returns {"id", "seq", "owner"}."""
    owner = roster.owner_of(key)
    if owner is None:
        raise ConfigError(f"no agent owns {key!r} in the roster")
    async with owner_session(roster, identity, owner, addresses, owner_timeout) as session:
        result = await session.request(
            "put", {"key": key, "kind": kind, "parents": parents or [], "body": body}
        )
    return {"key": key, "owner": owner, "id": result["id"], "seq": result["seq"]}


async def ping_owners(
    roster: Roster,
    identity: Identity,
    names: list[str],
    addresses: Addresses | None = None,
    owner_timeout: float = DEFAULT_TIMEOUT,
) -> None:
    """Return once every owner in `names` answered a ping, all concurrently; raises
    TransportError naming the first owner that could not be reached within `owner_timeout`."""

    async def ping(owner: str) -> None:
        async with owner_session(roster, identity, owner, addresses, owner_timeout) as session:
            await session.request("ping")

    async with collapsing_task_group() as tg:
        for name in names:
            tg.start_soon(ping, name)


def group_by_owner(roster: Roster, keys: list[str]) -> dict[str, list[str]]:
    """Keys grouped by owning agent; raises ConfigError for a key nobody owns."""
    groups: dict[str, list[str]] = defaultdict(list)
    for key in keys:
        owner = roster.owner_of(key)
        if owner is None:
            raise ConfigError(f"no agent owns {key!r} in the roster")
        groups[owner].append(key)
    return dict(groups)


async def query_heads(
    roster: Roster,
    identity: Identity,
    keys: list[str],
    addresses: Addresses | None = None,
    owner_timeout: float = DEFAULT_TIMEOUT,
) -> list[dict[str, Any]]:
    """Current heads of `keys`, one batched request per owner, all owners concurrently."""
    groups = group_by_owner(roster, keys)
    rows: dict[str, dict[str, Any]] = {}

    async def ask(owner: str, owner_keys: list[str]) -> None:
        async with owner_session(roster, identity, owner, addresses, owner_timeout) as session:
            result = await session.request("heads", {"keys": owner_keys})
        for key, rid, seq in result["heads"]:
            rows[key] = {"key": key, "owner": owner, "id": rid, "seq": seq}

    async with collapsing_task_group() as tg:
        for owner, owner_keys in groups.items():
            tg.start_soon(ask, owner, owner_keys)
    return [rows[k] for k in keys]


async def get_records(
    roster: Roster,
    identity: Identity,
    ids: list[bytes],
    addresses: Addresses | None = None,
    owner_timeout: float = DEFAULT_TIMEOUT,
) -> list[Record]:
    """Fetch records by id from every owner, each verified (`FetchRound`, asking again for
    ids an owner omitted).

    Raises RecordError for a record that fails verification (a person asked for these
    records: a bad one is reported, not hidden); RequestError("not_found") for ids no owner
    has when every owner answered; TransportError naming the owners that could not be asked
    (with the first one's reason: owner and address) when an id is missing and some owner did
    not answer: it may hold it.
    """
    fetch = FetchRound(ids, roster.names, verifier(roster), bad="raise")
    unreachable: dict[str, str] = {}

    async def ask(owner: str) -> None:
        try:
            async with owner_session(roster, identity, owner, addresses, owner_timeout) as session:
                while (args := fetch.request(owner)) is not None:
                    fetch.answered(owner, await session.request("get", args))
        except TransportError as exc:
            unreachable[owner] = str(exc)

    async with collapsing_task_group() as tg:
        for owner in roster.names:
            tg.start_soon(ask, owner)
    found = fetch.found
    missing = [rid.hex() for rid in ids if rid not in found]
    if missing and unreachable:
        names = sorted(unreachable)
        raise TransportError(
            f"could not ask {', '.join(names)} for record {', '.join(missing)} "
            f"({unreachable[names[0]]})"
        )
    if missing:
        raise RequestError("not_found", f"no owner has record {', '.join(missing)}")
    return [found[rid] for rid in ids]


def _address(addresses: Addresses | None, owner: str) -> dict[str, Any]:
    """open_session keyword arguments reaching `owner` through its link, if it has one."""
    if addresses and owner in addresses:
        host, port = addresses[owner]
        return {"host": host, "port": port}
    return {}
