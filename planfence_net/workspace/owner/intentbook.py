"""The workspace owner's side of intents (see intents.py): three operations it serves.

    intend    {plan, files, exclusive, lease, session?, agent?, subagent?, plan_id?}
              -> {"intents": [[key, id], ...], "expires": t}
              writes one intent record per file of this worktree (renewing the plan's own);
              refused with `held` when another plan holds a live exclusive intent on one of
              the files here, or when `exclusive` is asked and another plan has any live
              intent on one of them
    intents   {files} -> {"repo", "worktree", "intents": [record, ...]}
              the live intent records on those files (relative paths) in this worktree
    unintend  {session?, plans?, files?} -> {"ended": n}
              ends (writes an `ended` record for) every live intent of that session or of
              those plans; given `files`, only their intents on those files (a plan that
              lost exclusivity withdraws just the intents it lost, see intentclient.py)

Any roster member may ask: members are the team. Only this owner writes intent records (a
`put` to one is refused), so an intent names the worktree that holds the file. Records are
durable: intents survive the owner's restart; their index is read from the store at the
first request.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from ...core.records import Record
from ...owners.service import Call, Operation, Owner
from ...protocol.messages import KEYS_TOO_MANY, MAX_KEYS, BadRequest
from ...protocol.requestread import SCALAR, Array, Schema
from ..model.intents import (
    INTENT_PREFIX,
    MAX_LEASE,
    MIN_LEASE,
    from_body,
    intent_body,
    intent_key,
    live,
)

FILES = Array(MAX_KEYS, KEYS_TOO_MANY)
SCHEMAS: Schema = {
    "intend": {
        "plan": SCALAR,
        "files": FILES,
        "exclusive": SCALAR,
        "lease": SCALAR,
        "session": SCALAR,
        "agent": SCALAR,
        "subagent": SCALAR,
        "plan_id": SCALAR,
    },
    "intents": {"files": FILES},
    "unintend": {"session": SCALAR, "plans": FILES, "files": FILES},
}


class IntentBook:
    """The intents of the worktree at `root` (repository `repo`), as service rows. Leases
    are read on `clock` (seconds since the epoch: `time.time` unless a test injects one):
    an intent written at `clock()` with lease L is live while `clock()` is under its end."""

    def __init__(self, root: Path, repo: str, clock: Callable[[], float] = time.time) -> None:
        self.root, self.repo = root, repo
        self._clock = clock
        self._heads: dict[str, Record] | None = None  # intent key -> its latest record
        self._lock = anyio.Lock()  # checks and writes of intents, one at a time

    def rows(self) -> list[Operation]:
        return [
            Operation("intend", SCHEMAS["intend"], parse_intend, self.intend),
            Operation("intents", SCHEMAS["intents"], parse_intents, self.intents),
            Operation("unintend", SCHEMAS["unintend"], parse_unintend, self.unintend),
        ]

    async def _index(self, owner: Owner) -> dict[str, Record]:
        if self._heads is None:
            prefix = f"{owner.agent.name}:{INTENT_PREFIX}"
            keys = [k for k in owner.store.heads if k.startswith(prefix)]
            records = await owner.store.records_for(keys) if keys else []
            self._heads = {r.key: r for r in records}
        return self._heads

    def _live(self, heads: dict[str, Record], now: float, files: set[str]) -> list[Record]:
        return [
            r
            for r in heads.values()
            if live(r.body, now) and isinstance(r.body, dict) and r.body.get("file") in files
        ]

    async def intend(self, call: Call, parsed: dict[str, Any]) -> dict[str, Any]:
        owner = call.owner
        name = owner.agent.name
        async with self._lock:
            heads = await self._index(owner)
            now = self._clock()
            plan, files = parsed["plan"], parsed["files"]
            for record in self._live(heads, now, set(files)):
                body = record.body
                if body["plan"] == plan:
                    continue
                if body.get("exclusive") or parsed["exclusive"]:
                    held = from_body(name, record.key, body)
                    who = held.who() if held else repr(body["plan"])
                    how = "exclusively" if body.get("exclusive") else "already"
                    raise BadRequest(
                        "held",
                        f"{body['file']} is intended {how} by {who} until "
                        f"{held.until() if held else '?'}",
                    )
            expires = now + parsed["lease"]
            written = []
            for rel in files:
                key = intent_key(name, plan, parsed["session"], parsed["subagent"], rel)
                previous = heads.get(key)
                renewed = previous.body if previous and live(previous.body, now) else {}
                since = renewed.get("since")  # a renewal keeps its place in the order
                body = intent_body(
                    plan=plan,
                    file=rel,
                    session=parsed["session"],
                    agent=parsed["agent"],
                    subagent=parsed["subagent"],
                    worktree=str(self.root),
                    repo=self.repo,
                    exclusive=parsed["exclusive"],
                    expires=expires,
                    since=since if isinstance(since, int | float) else now,
                )
                parents = [previous.id] if previous is not None else []
                if parsed["plan_id"] is not None:
                    parents.append(parsed["plan_id"])
                written.append(await self._write(owner, key, parents, body))
        return {"intents": [[r.key, r.id] for r in written], "expires": round(expires, 3)}

    async def intents(self, call: Call, files: list[str]) -> dict[str, Any]:
        heads = await self._index(call.owner)
        found = self._live(heads, self._clock(), set(files))
        return {
            "repo": self.repo,
            "worktree": str(self.root),
            "intents": [r.to_wire() for r in found],
        }

    async def unintend(
        self, call: Call, parsed: tuple[str | None, set[str], set[str] | None]
    ) -> dict[str, Any]:
        session, plans, files = parsed
        async with self._lock:
            heads = await self._index(call.owner)
            now = self._clock()
            ending = [
                r
                for r in heads.values()
                if live(r.body, now)
                and ((session and r.body.get("session") == session) or r.body.get("plan") in plans)
                and (files is None or r.body.get("file") in files)
            ]
            for record in ending:
                body = {**record.body, "ended": True}
                await self._write(call.owner, record.key, [record.id], body)
        return {"ended": len(ending)}

    async def _write(self, owner: Owner, key: str, parents: list[bytes], body: Any) -> Record:
        record = await owner.store.wait_put(key, "intent", parents, body)
        assert self._heads is not None
        self._heads[key] = record
        owner.log.write(
            "put", key=key, id=record.id, seq=record.seq, kind="intent", parents=list(parents)
        )
        return record


def _text(args: dict[str, Any], name: str, required: bool = False) -> str | None:
    value = args.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise BadRequest("bad_request", f"'{name}' must be a non-empty string")
    return value


def _files(args: dict[str, Any], name: str = "files") -> list[str]:
    files = args.get(name)
    if not isinstance(files, list) or not all(isinstance(f, str) and f for f in files):
        raise BadRequest("bad_request", f"'{name}' must be an array of relative paths")
    if any(f.startswith("/") or ".." in f.split("/") for f in files):
        raise BadRequest("bad_request", f"'{name}' must hold paths relative to the worktree")
    return list(dict.fromkeys(files))


def parse_intend(args: dict[str, Any]) -> dict[str, Any]:
    exclusive, lease, plan_id = args.get("exclusive"), args.get("lease"), args.get("plan_id")
    if not isinstance(exclusive, bool):
        raise BadRequest("bad_request", "'exclusive' must be true or false")
    if (
        isinstance(lease, bool)
        or not isinstance(lease, int | float)
        or not MIN_LEASE <= lease <= MAX_LEASE
    ):
        raise BadRequest("bad_request", f"'lease' must be {MIN_LEASE:g} to {MAX_LEASE:g} seconds")
    if plan_id is not None and (not isinstance(plan_id, bytes) or len(plan_id) != 32):
        raise BadRequest("bad_request", "'plan_id' must be a 32-byte record id")
    files = _files(args)
    if not files:
        raise BadRequest("bad_request", "'files' is empty")
    agent = _text(args, "agent")
    return {
        "plan": _text(args, "plan", required=True),
        "files": files,
        "exclusive": exclusive,
        "lease": float(lease),
        "session": _text(args, "session"),
        "agent": agent,
        "subagent": _text(args, "subagent"),
        "plan_id": plan_id,
    }


def parse_intents(args: dict[str, Any]) -> list[str]:
    return _files(args)


def parse_unintend(args: dict[str, Any]) -> tuple[str | None, set[str], set[str] | None]:
    session = _text(args, "session")
    plans = args.get("plans", [])
    if not isinstance(plans, list) or not all(isinstance(p, str) for p in plans):
        raise BadRequest("bad_request", "'plans' must be an array of plan names")
    if session is None and not plans:
        raise BadRequest("bad_request", "name a 'session' or 'plans' whose intents end")
    files = set(_files(args)) if "files" in args else None
    return session, set(plans), files
