"""What an owner does for each operation: the rows of its table (`owner_operations`).

`heads` (observe, then read the heads and the changed records that fit in one reply), `get`,
`put` (durable before it answers), `subscribe`, `ack`, `synced`, `ping` and `stats`. Each
handler takes the `Call` (service.py) and its parsed arguments and returns the result map;
errors are raised as BadRequest and answered by the session as typed errors.

Two things vary between owners and are arguments of the table, not methods to override:
`owned` (which keys this owner serves: by default those the roster gives its agent) and
`observe` (awaited before `heads` reads the store: a workspace owner brings facts kept
outside the store up to date there). A service replaces whole rows for anything else
(`Service.with_rows`), as the workspace owner does for `put`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..core.errors import RecordError
from ..protocol.messages import (
    BadRequest,
    Request,
    parse_ack,
    parse_get,
    parse_heads,
    parse_heads_short,
    parse_put,
    parse_put_head,
    parse_put_many,
    parse_subscribe,
    parse_subscribe_every,
    parse_subscribe_group,
    parse_subscribe_records,
    parse_synced,
)
from ..protocol.requestread import REQUESTS
from . import syncgroups
from .replies import (
    ENVELOPE,
    ID_ENTRY,
    SMALL_REPLY,
    check_readable,
    fit_records,
    rows_size,
    unique,
)
from .service import Call, Handler, Operation, Owner, Service, answers_now
from .store import Fields, PutItemError
from .syncgroups import Subscription

Owned = Callable[[Owner, list[str]], None]  # raises BadRequest("not_owner") for a key not served
Observe = Callable[[Owner, list[str]], Awaitable[None]]


def agent_owns(owner: Owner, keys: list[str]) -> None:
    """The owner serves the keys the roster gives its agent; raises BadRequest otherwise."""
    for key in keys:
        holder = owner.roster.owner_of(key)
        if holder != owner.agent.name:
            raise BadRequest(
                "not_owner",
                f"{owner.agent.name} does not own {key!r} (owner: {holder or 'nobody'})",
            )


async def observe_nothing(owner: Owner, keys: list[str]) -> None:
    """The default `observe`: every fact of an ordinary owner is in its store."""


def no_args(args: dict[str, Any]) -> None:
    return None


def owner_operations(*, owned: Owned = agent_owns, observe: Observe = observe_nothing) -> Service:
    """The service of an ordinary owner: one row per operation of the protocol."""
    heads = heads_handler(owned, observe)

    async def put(
        call: Call, parsed: tuple[str, str, list[bytes], Any, bytes | None]
    ) -> dict[str, Any]:
        key, kind, parents, body, head = parsed
        owned(call.owner, [key])
        if head is None:
            return await put_record(call, key, kind, parents, body)
        return await put_if_head(call, key, kind, parents, body, head)

    async def put_many(call: Call, items: list[Fields]) -> dict[str, Any]:
        for index, item in enumerate(items):
            try:
                owned(call.owner, [item[0]])
            except BadRequest as exc:
                raise exc.of_item(index) from None
        return await put_records(call, items)

    async def subscribe(
        call: Call, parsed: tuple[list[str] | None, int, str | None, bool]
    ) -> dict[str, Any]:
        if parsed[0] is not None:
            owned(call.owner, parsed[0])
        return await subscribe_keys(call, *parsed)

    async def synced(call: Call, parsed: tuple[str, list[str]]) -> dict[str, Any]:
        owned(call.owner, parsed[1])
        return await wait_synced(call, *parsed)

    return Service(
        [
            Operation("ping", REQUESTS["ping"], no_args, ping, inline=True),
            Operation("heads", REQUESTS["heads"], parse_heads_args, heads, inline=True),
            Operation("get", REQUESTS["get"], lambda args: unique(parse_get(args)), get),
            Operation("put", REQUESTS["put"], parse_put_args, put),
            Operation("put_many", REQUESTS["put_many"], parse_put_many, put_many),
            Operation("subscribe", REQUESTS["subscribe"], parse_subscribe_args, subscribe),
            Operation("ack", REQUESTS["ack"], parse_ack, ack, inline=True),
            Operation("synced", REQUESTS["synced"], parse_synced, synced),
            Operation("stats", REQUESTS["stats"], no_args, stats, inline=True),
        ]
    )


def heads_handler(owned: Owned, observe: Observe) -> Handler:
    """The `heads` row's handler: the keys checked with `owned`, observed with `observe`,
    then answered; with nothing to observe, also answered without waiting when it can."""

    def heads_now(
        call: Call, parsed: tuple[list[str], dict[str, bytes], bool]
    ) -> dict[str, Any] | None:
        """`heads` without waiting (nothing to observe): when no key changed (no record to
        read) and the reply is small (no reply budget to wait for)."""
        keys, expect, short = parsed
        keys = list(dict.fromkeys(keys))
        owned(call.owner, keys)
        return heads_unchanged(call.owner, keys, expect, short=short)

    async def observed_heads(
        call: Call, parsed: tuple[list[str], dict[str, bytes], bool]
    ) -> dict[str, Any]:
        keys, expect, short = parsed
        keys = list(dict.fromkeys(keys))  # a key asked twice is answered once
        owned(call.owner, keys)
        await observe(call.owner, keys)
        return await heads_answer(call.owner, keys, expect, short=short)

    if observe is not observe_nothing:  # an owner that observes answers heads after it, awaited
        return observed_heads
    return answers_now(heads_now, repeatable=True)(observed_heads)


async def put_if_head(
    call: Call, key: str, kind: str, parents: list[bytes], body: Any, head: bytes
) -> dict[str, Any]:
    """A compare-and-set put: written only while the key's head is `head` (b"": none); else
    BadRequest `conflict`. Conditional puts are serialized, so two writers that read the
    same head cannot both succeed."""
    async with call.owner.put_if_lock:
        current = call.owner.store.heads.get(key)
        if (current.id if current else b"") != head:
            raise BadRequest("conflict", f"the head of {key!r} is not the one expected")
        return await put_record(call, key, kind, parents, body)


def parse_heads_args(args: dict[str, Any]) -> tuple[list[str], dict[str, bytes], bool]:
    return (*parse_heads(args), parse_heads_short(args))


def parse_put_args(args: dict[str, Any]) -> tuple[str, str, list[bytes], Any, bytes | None]:
    """A put's (key, kind, parents, body) and its optional `head` condition."""
    return (*parse_put(args), parse_put_head(args))


def parse_subscribe_args(
    args: dict[str, Any],
) -> tuple[list[str] | None, int, str | None, bool]:
    return (
        parse_subscribe(args),
        parse_subscribe_every(args),
        parse_subscribe_group(args),
        parse_subscribe_records(args),
    )


async def ping(call: Call, parsed: None) -> dict[str, Any]:
    return {"agent": call.owner.agent.name, "time": time.time()}


async def stats(call: Call, parsed: None) -> dict[str, Any]:
    return call.owner.statistics()


async def get(call: Call, ids: list[bytes]) -> dict[str, Any]:
    return await records_answer(call.owner, ids, room=0)


def head_rows(owner: Owner, keys: list[str]) -> list[list[Any]]:
    rows = []
    for key in keys:
        head = owner.store.heads.get(key)
        rows.append([key, head.id, head.seq] if head else [key, None, 0])
    return rows


def heads_unchanged(
    owner: Owner, keys: list[str], expect: dict[str, bytes], *, short: bool = False
) -> dict[str, Any] | None:
    """What `heads_answer` answers when every key of `expect` is still at its expected id
    and the reply is under SMALL_REPLY (it then takes nothing from the reply budget); None
    otherwise."""
    # rows_size's bound without encoding the keys (a character is at most 4 bytes)
    if 2 * (5 + 49 * len(keys) + 4 * sum(map(len, keys))) >= SMALL_REPLY:
        return None
    heads = owner.store.heads
    rows: list[list[Any]] = []
    for key in keys:
        head = heads.get(key)
        if head is None:
            rows.append([key, None, 0])
        elif key not in expect:
            rows.append([key, head.id, head.seq])
        elif expect[key] != head.id:
            return None  # changed: its record goes inline, read from the store
        else:
            rows.append([key, head.seq] if short else [key, head.id, head.seq])
    return {"heads": rows, "records": []}


async def heads_answer(
    owner: Owner, keys: list[str], expect: dict[str, bytes], *, short: bool = False
) -> dict[str, Any]:
    """The heads of `keys` (each once, all served here) and the changed records that fit."""
    rows = head_rows(owner, keys)
    changed = [
        row[1]
        for row in rows
        if row[0] in expect and row[1] is not None and row[1] != expect[row[0]]
    ]
    if short:  # the client knows the ids it expected: [key, seq] says "that one"
        rows = [[row[0], row[2]] if expect.get(row[0]) == row[1] else row for row in rows]
    result = await records_answer(owner, changed, room=rows_size(rows))
    return {"heads": rows, **result}


async def records_answer(owner: Owner, ids: list[bytes], room: int) -> dict[str, Any]:
    """{"records": [...]} for the stored records among `ids` (no repeats), as many as
    fit in one reply next to `room` bytes of other content, and {"omitted": [...]} for
    the ids of those that did not. Sizes are read first; only chosen records load."""
    if not ids:
        await owner.reserve_reply(room)
        return {"records": []}
    sizes = await owner.store.sizes(ids)
    stored = [(rid, sizes[rid]) for rid in ids if rid in sizes]
    limit = min(owner.max_message, owner.limits.reply_budget) - ENVELOPE - room
    chosen, omitted = fit_records(stored, limit)
    await owner.reserve_reply(room + sum(sizes[rid] for rid in chosen) + ID_ENTRY * len(omitted))
    records = await owner.store.get(chosen) if chosen else []
    result: dict[str, Any] = {"records": [r.to_wire() for r in records]}
    if omitted:
        result["omitted"] = omitted
    return result


async def put_record(
    call: Call, key: str, kind: str, parents: list[bytes], body: Any
) -> dict[str, Any]:
    """Store a record of `key` (served here) written by this owner's agent, durably."""
    owner, peer = call.owner, call.connection.peer
    if peer.name != owner.agent.name:
        raise BadRequest(
            "forbidden",
            f"only {owner.agent.name} may write {key!r}; this session is {peer.name}",
        )
    check_readable(key, owner.agent.name, kind, parents, body, owner.max_message)
    try:
        record = await owner.store.wait_put(key, kind, parents, body)
    except RecordError as exc:
        raise BadRequest("bad_request", str(exc)) from None
    owner.log.write(
        "put", key=key, id=record.id, seq=record.seq, kind=kind, parents=list(record.parents)
    )
    return {"id": record.id, "seq": record.seq}


async def put_records(call: Call, items: list[Fields]) -> dict[str, Any]:
    """Store one record per item (keys served here, checked by the caller), written by this
    owner's agent with consecutive seqs, all in one transaction, durably; each item is
    checked as `put_record` checks a put, and any refusal names its item and writes
    nothing. Answers {"puts": [[id, seq], ...]} in item order."""
    owner, peer = call.owner, call.connection.peer
    if peer.name != owner.agent.name:
        raise BadRequest(
            "forbidden",
            f"only {owner.agent.name} may write its keys; this session is {peer.name}",
        )
    for index, (key, kind, parents, body) in enumerate(items):
        try:
            check_readable(key, owner.agent.name, kind, parents, body, owner.max_message)
        except BadRequest as exc:
            raise exc.of_item(index) from None
    try:
        records = await owner.store.wait_put_many(items)
    except PutItemError as exc:
        raise BadRequest("bad_request", str(exc), item=exc.item) from None
    owner.log.write_puts_soon(records)  # one write(2) for all, at the end of this loop turn
    return {"puts": [[record.id, record.seq] for record in records]}


async def subscribe_keys(
    call: Call, keys: list[str] | None, every: int, group: str | None, records: bool = False
) -> dict[str, Any]:
    """Subscribe the session to `keys` (None: every key); answers the current heads. With
    `records`, its pushes carry the rows' records within the push budget (syncgroups.py)."""
    owner, connection = call.owner, call.connection
    if len(connection.subscriptions) >= owner.limits.subscriptions_per_session:
        raise BadRequest(
            "limit_exceeded",
            f"at most {owner.limits.subscriptions_per_session} subscriptions per session",
        )
    await owner.reserve_reply(rows_size(head_rows(owner, keys or list(owner.store.heads))))
    limits = owner.limits
    # a push never nears the message cap, nor takes a subscriber near being dropped
    caps = (limits.push_record_bytes, limits.queued_push_bytes // 4, owner.max_message // 4)
    budget = min(caps) if records else 0
    connection.subscriptions[call.req_id] = Subscription(
        set(keys) if keys else None, every, group, budget
    )
    # the current heads, read after the last wait: no commit falls in between
    return {"subscribed": True, "heads": head_rows(owner, keys or list(owner.store.heads))}


async def ack(call: Call, parsed: tuple[str, int]) -> dict[str, Any]:
    group, seq = parsed
    if not syncgroups.acknowledge(call.connection.subscriptions.values(), group, seq):
        raise BadRequest("bad_request", f"this session has no subscription in {group!r}")
    call.owner.sync_progress()
    return {"acked": seq}


def subscriptions(owner: Owner) -> list[Subscription]:
    return [s for c in owner.connections for s in c.subscriptions.values()]


async def wait_synced(call: Call, group: str, keys: list[str]) -> dict[str, Any]:
    """Answer once every member of `group` has acknowledged every update of `keys`
    committed before this request (owners/syncgroups.py); held-back rows go out first.
    Only a member may ask: an answer for a group the asker is not in says nothing about
    the asker's copy (and a mistyped group would be trivially synchronized)."""
    owner, peer = call.owner, call.connection.peer.name
    if not any(
        s.group == group
        for c in owner.connections
        if c.peer.name == peer
        for s in c.subscriptions.values()
    ):
        raise BadRequest("bad_request", f"{peer} has no subscription in {group!r}")
    target = max((owner.store.heads[k].seq for k in keys if k in owner.store.heads), default=0)
    for connection in list(owner.connections):
        for req_id, subscription in connection.subscriptions.items():
            rows = subscription.flush() if subscription.group == group else None
            if rows and connection.pushes is not None:
                owner.queue_push(connection, subscription.push(req_id, rows))
    while not syncgroups.is_synchronized(subscriptions(owner), group, target):
        await owner.wait_sync_progress()
    return {"synced": target}


def keys_of(request: Request) -> list[str]:
    """The keys `request` names, for its log line (none when its args are malformed)."""
    args = request.args
    keys = args.get("keys")
    if (
        not isinstance(keys, list)
        and request.op == "heads"
        and isinstance(args.get("expect"), dict)
    ):
        keys = list(args["expect"])  # heads by `expect` alone
    if isinstance(keys, list):
        return [k for k in keys if isinstance(k, str)]
    if isinstance(args.get("key"), str):
        return [args["key"]]
    if request.op == "put_many" and isinstance(args.get("items"), list):
        return [
            i["key"] for i in args["items"] if isinstance(i, dict) and isinstance(i.get("key"), str)
        ]
    return []
