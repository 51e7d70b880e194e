"""Client operations on a running cluster: the library the CLI and scripts call.

Each function opens sessions as one roster member (`identity`), does one job and closes
them. Long-running executors use the executor's session pool instead.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
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
from ..protocol.messages import MAX_PUT_BYTES, MAX_PUT_ITEMS, pack
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


# Bytes of one put_many request beyond its items' bodies, and per item beyond its key and
# parents: headers and field names (generous upper bounds).
_REQUEST_ROOM, _ITEM_ROOM = 1024, 128


async def put_records(
    roster: Roster,
    identity: Identity,
    items: Sequence[dict[str, Any]],
    *,
    batch: int = MAX_PUT_ITEMS,
    max_message: int = 16 * 1024 * 1024,
    addresses: Addresses | None = None,
    owner_timeout: float = DEFAULT_TIMEOUT,
) -> list[dict[str, Any]]:
    """Write one record per item ({"key", "body", "kind"?, "parents"?}) as `identity`, all
    owned by one agent, with `put_many` requests of at most `batch` items (and within the
    protocol's byte caps), sent one after another on one session: records are written in
    item order, each request in one transaction, acknowledged once durable. Returns
    [{"key", "owner", "id", "seq"}, ...] in item order.

    Raises ConfigError when a key has no owner or the keys have several; RequestError for a
    refused request, its message naming the item by its index in `items` ("item N: ...";
    the requests before it are written, nothing of it and after it is); TransportError as
    `owner_session`. `owner_timeout` bounds each request, and the whole write that many
    times the number of requests.
    """
    owners = group_by_owner(roster, [item["key"] for item in items])
    if len(owners) > 1:
        raise ConfigError(f"put_records writes one owner's keys; these have {sorted(owners)}")
    if not owners:
        return []
    (owner,) = owners
    written: list[dict[str, Any]] = []
    batches = list(_put_batches(items, min(batch, MAX_PUT_ITEMS), max_message))
    whole = owner_timeout * (len(batches) + 1)
    async with owner_session(roster, identity, owner, addresses, whole) as session:
        for start, chunk in batches:
            args = {"items": [_put_item(item) for item in chunk]}
            try:
                with anyio.fail_after(owner_timeout):
                    result = await session.request("put_many", args)
            except TimeoutError:
                raise TransportError(
                    f"owner {owner} did not answer a put_many within {owner_timeout:g} s"
                ) from None
            except RequestError as exc:
                raise _item_error(exc, start) from None
            for item, (rid, seq) in zip(chunk, result["puts"], strict=True):
                written.append({"key": item["key"], "owner": owner, "id": rid, "seq": seq})
    return written


def _put_item(item: dict[str, Any]) -> dict[str, Any]:
    return {
        "key": item["key"],
        "kind": item.get("kind", "fact"),
        "parents": item.get("parents") or [],
        "body": item["body"],
    }


def _put_batches(
    items: Sequence[dict[str, Any]], batch: int, max_message: int
) -> Iterator[tuple[int, Sequence[dict[str, Any]]]]:
    """(index of the first item, items) of each put_many: at most `batch` items, their
    bodies within MAX_PUT_BYTES and the request within `max_message` bytes."""
    start, bodies, size = 0, 0, _REQUEST_ROOM
    for index, item in enumerate(items):
        body = len(pack(item["body"]))
        extra = _ITEM_ROOM + 4 * len(item["key"]) + 34 * len(item.get("parents") or [])
        full = index - start >= batch or bodies + body > MAX_PUT_BYTES
        if index > start and (full or size + body + extra > max_message):
            yield start, items[start:index]
            start, bodies, size = index, 0, _REQUEST_ROOM
        bodies += body
        size += body + extra
    if start < len(items):
        yield start, items[start:]


_ITEM = re.compile(r"item (\d+): ")


def _item_error(exc: RequestError, start: int) -> RequestError:
    """The owner's error with its item counted from the start of the whole list."""
    found = _ITEM.match(exc.message)
    if found is None:
        return RequestError(exc.code, f"items from {start} on: {exc.message}")
    index = start + int(found.group(1))
    return RequestError(exc.code, f"item {index}: {exc.message[found.end() :]}")


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
