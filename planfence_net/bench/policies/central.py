"""The central store of the `central` baseline (docs/ARCHITECTURE.md): one process, every record.

    python -m planfence_net.bench.policies.central DIR [--agent central] [--listen HOST:PORT]

It is an owner daemon (serving `central_service()`) whose store holds every agent's records, so every write and every
validation of the centralized-lineage baseline goes through one place. Records stay signed
by their owners: a writer signs its record client side (with its own per-owner seq) and sends
the whole wire array as `put {"record": [...]}`. The central store verifies the record (id,
Ed25519 signature, that its owner owns its key), accepts it only from a session authenticated
as that owner and only with a seq above the owner's last one, and logs a `put` event exactly
like an owner does, so the invalid-action oracle reads its log unchanged. `heads` and `get`
serve every key that some roster agent owns; `stats` adds each owner's last seq under
`last_seq_by_owner` so a writer can resume its counter.

`validate {"expect": {key: id}, "keys": [...], "action": name}` is the store-side validation
a team would build on a central store (etcd's Txn: compare, then put or get): in one round
trip the store compares every declared key's head with the expected id and, when all match,
records the decision (a `decision` event in its log naming the action and the keys). It
answers like `heads` with `short` rows (the rows of changed keys in full, with their records
inline, which is the Txn's else-branch read) plus `"matched": bool`. Arguments are read as
`heads` reads them; `action` is a string of at most 256 characters. With `"record": [...]`
(the put-if) the store first stores that signed record, as `put` does, then compares: the
replanned plan's write and its re-validation in one round trip. A plan record may come from
any roster member's session (the executor carries the planner's plan): its signature, its
owner's key and its seq above the owner's last one are what the store checks.

The central agent is a roster member (for the Noise handshake) that owns no keys.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import anyio

from ...cluster.folder import ClusterDir
from ...core.errors import PlanfenceError, RecordError
from ...core.escaping import escape
from ...core.records import record_from_wire, verify, wire_from_bytes
from ...core.roster import parse_address
from ...owners.ops import heads_answer, owner_operations
from ...owners.service import Call, Operation, Owner, Service
from ...owners.startup import cluster_owner, run_owner
from ...owners.store import StaleSeq
from ...protocol.messages import BadRequest, RawValue, parse_heads
from ...protocol.requestread import RAW, REQUESTS, SCALAR

CENTRAL_AGENT = "central"


def any_agent_owns(owner: Owner, keys: list[str]) -> None:
    """The central store serves every key some roster agent owns."""
    for key in keys:
        if owner.roster.owner_of(key) is None:
            raise BadRequest("not_owner", f"no roster agent owns {key!r}")


def central_service() -> Service:
    """An ordinary owner's operations serving every key, with `put` taking a signed record
    and `validate` (module docstring)."""
    return owner_operations(owned=any_agent_owns).with_rows(
        Operation("put", {"record": RAW}, parse_record, put_record),
        Operation(
            "validate",
            {**REQUESTS["heads"], "action": SCALAR, "record": RAW},
            parse_validate,
            validate,
        ),
    )


def parse_record(args: dict[str, Any]) -> Any:
    """The wire array of a `put {"record": ...}`, or BadRequest."""
    record = args.get("record")
    try:
        return wire_from_bytes(record.data) if isinstance(record, RawValue) else None
    except RecordError as exc:
        raise BadRequest("bad_request", f"record rejected: {exc}") from None


Validate = tuple[str, list[str], dict[str, bytes], Any]


def parse_validate(args: dict[str, Any]) -> Validate:
    """(action, keys, expect, the put-if's record wire array or None) of a `validate`, or
    BadRequest."""
    action = args.get("action", "")
    if not isinstance(action, str) or len(action) > 256:
        raise BadRequest("bad_request", "'action' must be a string of at most 256 characters")
    wire = parse_record(args) if "record" in args else None
    if "record" in args and wire is None:
        raise BadRequest("bad_request", "'record' must be a record's wire array")
    return (action, *parse_heads(args), wire)


async def validate(call: Call, parsed: Validate) -> dict[str, Any]:
    """Store the put-if's record (if any), then compare the expected ids with the heads; all
    matching, log the decision."""
    action, keys, expect, wire = parsed
    if wire is not None:
        await store_record(call, wire, any_sender=True)
    keys = list(dict.fromkeys(keys))  # a key asked twice is answered once
    any_agent_owns(call.owner, keys)
    answer = await heads_answer(call.owner, keys, expect, short=True)
    matched = all(len(row) == 2 for row in answer["heads"] if row[0] in expect)
    if matched:
        call.owner.log.write(
            "decision", action=action, peer=call.connection.peer.name, keys=keys[:64]
        )
    return {**answer, "matched": matched}


async def put_record(call: Call, wire: Any) -> dict[str, Any]:
    """Store a record its owner signed, sent by that owner (module docstring)."""
    return await store_record(call, wire)


async def store_record(call: Call, wire: Any, any_sender: bool = False) -> dict[str, Any]:
    """Verify and store a signed record, log its `put`; only from its owner's session, but
    for a plan under `any_sender` (the put-if). Raises BadRequest."""
    owner, peer = call.owner, call.connection.peer
    try:
        record = record_from_wire(wire)
        verify(record, public_key_of=owner.roster.public_key_of, owner_of=owner.roster.owner_of)
    except RecordError as exc:
        raise BadRequest("bad_request", f"record rejected: {exc}") from None
    if record.owner != peer.name and not (any_sender and record.kind == "plan"):
        raise BadRequest("forbidden", f"a record of {record.owner} sent by {peer.name}")
    try:
        await owner.store.wait_put_record(record)
    except StaleSeq as exc:
        raise BadRequest("stale_seq", str(exc)) from None
    owner.log.write(
        "put",
        key=record.key,
        id=record.id,
        seq=record.seq,
        kind=record.kind,
        parents=list(record.parents),
        owner=record.owner,
    )
    return {"id": record.id, "seq": record.seq}


async def run_central(
    cdir: ClusterDir, agent: str = CENTRAL_AGENT, listen: tuple[str, int] | None = None
) -> None:
    """Serve the central store of the cluster at `cdir` until SIGTERM/SIGINT; `listen`
    overrides the roster address to bind (0.0.0.0 inside a container)."""
    await run_owner(
        *cluster_owner(cdir, agent),
        listen=listen,
        service=central_service(),
        signs=False,
    )


def parser() -> argparse.ArgumentParser:
    """The command line: DIR [--agent NAME] [--listen HOST:PORT]."""
    found = argparse.ArgumentParser(prog="python -m planfence_net.bench.policies.central")
    found.add_argument("dir", type=Path)
    found.add_argument("--agent", default=CENTRAL_AGENT)
    found.add_argument("--listen", type=_address, help="HOST:PORT to bind instead of the roster's")
    return found


def _address(text: str) -> tuple[str, int]:
    try:
        return parse_address(text)
    except PlanfenceError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> None:
    """Serve until signalled; a planfence error (a missing or unreadable key, a bad roster,
    a taken port) is one line on stderr and exit status 1, as the `planfence` commands do."""
    args = parser().parse_args(argv)
    try:
        anyio.run(run_central, ClusterDir(args.dir), args.agent, args.listen, backend="asyncio")
    except PlanfenceError as exc:
        sys.exit(f"error: {escape(str(exc))}")


if __name__ == "__main__":
    main()
