"""`planfence workspace plans` and `workspace show PLAN`: the team's plans, and why a plan
was let through or blocked.

`wait_plan_records` asks every owner of the roster, concurrently, for the heads of every key
it holds (`subscribe` without keys answers them all; the session then closes) and fetches
the head records of the `plan/*` keys it owns, each verified against the roster. An owner
that cannot be reached is named with the reason, never fatal. `plan_row` turns one plan
record into what `plans` lists; `history_rows` turns a plan's lines in the owners' logs
(its `put`s, described by the records they wrote, and its `check`s, `checklog`) into what
`show` prints. Both shapes are the documented `--json` output (docs/HOOKS.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from ...core.answers import verifier
from ...core.drive import FetchRound
from ...core.errors import PlanfenceError
from ...core.identity import Identity
from ...core.records import Record
from ...core.roster import Roster
from ...net.api import owner_session
from ..model.facts import split_key
from .checklog import CHECK

PLAN_PREFIX = "plan/"


async def wait_plan_records(
    roster: Roster,
    identity: Identity,
    addresses: dict[str, tuple[str, int]] | None,
    owner_timeout: float,
) -> tuple[list[Record], dict[str, str]]:
    """The head records of the plan keys every owner holds, and {owner: why} for the owners
    that could not be asked within `owner_timeout` seconds."""
    found: list[Record] = []
    unreachable: dict[str, str] = {}
    verify = verifier(roster)

    async def ask(owner: str) -> None:
        try:
            async with owner_session(roster, identity, owner, addresses, owner_timeout) as session:
                heads = (await session.request("subscribe", {}))["heads"]
                ids = [
                    row[1]
                    for row in heads
                    if isinstance(row[0], str)
                    and row[0].startswith(PLAN_PREFIX)
                    and row[1]
                    and roster.owner_of(row[0]) == owner
                ]
                found.extend(await _fetch(session, owner, ids, verify))
        except PlanfenceError as exc:
            unreachable[owner] = str(exc)

    async with anyio.create_task_group() as tg:
        for owner in roster.names:
            tg.start_soon(ask, owner)
    return sorted(found, key=lambda r: r.key), dict(sorted(unreachable.items()))


async def _fetch(session: Any, owner: str, ids: list[bytes], verify: Any) -> list[Record]:
    """The records `ids` from `owner` over `session`, verified (asked again for omitted)."""
    if not ids:
        return []
    fetch = FetchRound(ids, [owner], verify)
    while (args := fetch.request(owner)) is not None:
        fetch.answered(owner, await session.request("get", args))
    return [fetch.found[rid] for rid in ids if rid in fetch.found]


async def wait_records(
    roster: Roster,
    identity: Identity,
    owner: str,
    ids: list[bytes],
    addresses: dict[str, tuple[str, int]] | None,
    owner_timeout: float,
) -> dict[bytes, Record]:
    """The records `ids` held by `owner`, verified; raises PlanfenceError naming the owner
    when it cannot be asked within `owner_timeout` seconds."""
    async with owner_session(roster, identity, owner, addresses, owner_timeout) as session:
        return {r.id: r for r in await _fetch(session, owner, ids, verifier(roster))}


def roles_count(body: Any) -> dict[str, int]:
    """How many declared keys have each role in a plan record body."""
    declaration = body.get("declaration") if isinstance(body, dict) else None
    counts: dict[str, int] = {}
    for roles in declaration.values() if isinstance(declaration, dict) else ():
        for role in roles if isinstance(roles, list) else ():
            counts[str(role)] = counts.get(str(role), 0) + 1
    return counts


def _int(body: Any, name: str, default: int = 0) -> int:
    value = body.get(name) if isinstance(body, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _text(body: Any, name: str) -> str | None:
    value = body.get(name) if isinstance(body, dict) else None
    return value if isinstance(value, str) else None


def plan_row(
    record: Record,
    spaces: dict[str, Path],
    current: str | None,
    last_check: dict[str, Any] | None,
) -> dict[str, Any]:
    """What `workspace plans --json` lists for one plan record (see docs/HOOKS.md)."""
    body = record.body
    counts = roles_count(body)
    declaration = body.get("declaration") if isinstance(body, dict) else None
    agents = sorted(
        {
            parts[0]
            for key in (declaration if isinstance(declaration, dict) else {})
            if (parts := split_key(key)) is not None and parts[0] in spaces
        }
    )
    trust = _int(body, "trust", 1)
    plan = record.key.removeprefix(PLAN_PREFIX)
    from_list = body.get("from") if isinstance(body, dict) else None
    return {
        "plan": plan,
        "owner": record.owner,
        "record": record.id.hex(),
        "seq": record.seq,
        "current": plan == current,
        "session": _text(body, "session"),
        "agent": _text(body, "agent"),
        "worktrees": {name: str(spaces[name]) for name in agents},
        "reads": counts.get("read", 0),
        "targets": counts.get("target", 0),
        "evidence": counts.get("evidence", 0),
        "lockfiles": counts.get("lockfile", 0),
        "trust": trust,
        "replans": max(trust - 1, 0),
        "advanced": _int(body, "advanced"),
        "time": body.get("time") if isinstance(body, dict) else None,
        "from": from_list if isinstance(from_list, dict) else None,
        "last_check": _check_summary(last_check) if last_check else None,
    }


def _check_summary(event: dict[str, Any]) -> dict[str, Any]:
    """The fields of a `check` line `plans` shows as its last check."""
    return {
        "time": event.get("ts"),
        "class": event.get("class"),
        "exit": event.get("exit"),
        "outcome": outcome(event),
        "source": event.get("source"),
        "session": event.get("session"),
        "tool": event.get("tool"),
    }


def outcome(event: dict[str, Any]) -> str:
    """ "allowed" or "blocked" for the hook's checks, "passed" or "failed" for the others."""
    ok = event.get("exit") == 0
    if event.get("source") == "hook":
        return "allowed" if ok else "blocked"
    return "passed" if ok else "failed"


def last_checks(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The newest `check` line of each plan among `events`."""
    last: dict[str, dict[str, Any]] = {}
    for event in events:
        plan = event.get("plan")
        if event.get("event") != CHECK or not isinstance(plan, str):
            continue
        ts = event.get("ts")
        if not isinstance(ts, (int, float)):
            continue
        if plan not in last or ts >= last[plan]["ts"]:
            last[plan] = event
    return last


def record_id(event: dict[str, Any]) -> bytes | None:
    """The record id a `put` log line names (hex in the log), or None."""
    rid = event.get("id")
    try:
        return bytes.fromhex(rid) if isinstance(rid, str) else None
    except ValueError:
        return None


def history_rows(
    events: list[dict[str, Any]], records: dict[bytes, Record]
) -> list[dict[str, Any]]:
    """A plan's history, oldest first, from its log lines `events` (`put`s of its key and
    its `check`s) and the plan `records` fetched for the puts (a put whose record is
    missing is shown as `record`). A put is a `trust` when the trust count changed (or it is
    the first), an `advance` when only the recorded edits did, else a `record`."""
    rows: list[dict[str, Any]] = []
    previous: Any = None
    for event in sorted(events, key=lambda e: e.get("ts") or 0):
        if event.get("event") == CHECK:
            rows.append(
                {
                    "time": event.get("ts"),
                    "event": outcome(event),
                    **{
                        k: event.get(k)
                        for k in ("class", "exit", "source", "session", "subagent", "tool")
                    },
                    "files": event.get("files", []),
                    "trust": event.get("trust"),
                    "changed_again": event.get("changed_again", False),
                    "reread": event.get("reread", []),
                    "lines": event.get("lines", []),
                    "detail": event.get("detail", ""),
                }
            )
            continue
        rid = record_id(event)
        record = records.get(rid) if rid is not None else None
        body = record.body if record is not None else None
        counts = roles_count(body)
        if body is None:
            kind = "record"
        elif previous is None or _int(body, "trust", 1) != _int(previous, "trust", 1):
            kind = "trust"
        elif _int(body, "advanced") != _int(previous, "advanced"):
            kind = "advance"
        else:
            kind = "record"
        rows.append(
            {
                "time": event.get("ts"),
                "event": kind,
                "seq": event.get("seq"),
                "record": rid.hex() if rid is not None else None,
                "trust": _int(body, "trust", 1) if body is not None else None,
                "advanced": _int(body, "advanced") if body is not None else None,
                "session": _text(body, "session"),
                "subagent": _text(body, "agent"),
                "reads": counts.get("read", 0),
                "targets": counts.get("target", 0),
                "evidence": counts.get("evidence", 0),
                "from": body.get("from") if isinstance(body, dict) else None,
            }
        )
        if body is not None:
            previous = body
    return rows
