"""The central store of the `central` baseline (docs/ARCHITECTURE.md): one process, every record.

    python -m planfence_net.bench.central DIR [--agent central] [--listen HOST:PORT]

It is an owner daemon whose store holds every agent's records, so every write and every
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
`heads` reads them; `action` is a string of at most 256 characters.

The central agent is a roster member (for the Noise handshake) that owns no keys.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import anyio

from ..cluster.folder import ClusterDir
from ..core.errors import PlanfenceError, RecordError
from ..core.records import record_from_wire, verify, wire_from_bytes
from ..core.roster import Agent, parse_address
from ..owners.daemon import Connection, OwnerDaemon
from ..owners.logs import EventLog
from ..owners.store import StaleSeq, Store
from ..protocol.messages import BadRequest, RawValue, Request, parse_heads
from ..protocol.requestread import RAW, REQUESTS, SCALAR

CENTRAL_AGENT = "central"


class CentralDaemon(OwnerDaemon):
    """An owner daemon serving every key, accepting owner-signed records (module docstring)."""

    schema = {
        **REQUESTS,
        "put": {"record": RAW},
        "validate": {**REQUESTS["heads"], "action": SCALAR},
    }

    def _check_owned(self, keys: list[str]) -> None:
        for key in keys:
            if self.roster.owner_of(key) is None:
                raise BadRequest("not_owner", f"no roster agent owns {key!r}")

    async def _dispatch(self, connection: Connection, request: Request) -> dict[str, Any]:
        if request.op == "put":
            record = request.args.get("record")
            try:
                wire = wire_from_bytes(record.data) if isinstance(record, RawValue) else None
            except RecordError as exc:
                raise BadRequest("bad_request", f"record rejected: {exc}") from None
            return await self._put_record(connection.peer, wire)
        if request.op == "validate":
            return await self._validate(connection.peer, request.args)
        return await super()._dispatch(connection, request)

    async def _validate(self, peer: Agent, args: dict[str, Any]) -> dict[str, Any]:
        """Compare the expected ids with the heads; all matching, log the decision."""
        action = args.get("action", "")
        if not isinstance(action, str) or len(action) > 256:
            raise BadRequest("bad_request", "'action' must be a string of at most 256 characters")
        keys, expect = parse_heads(args)
        answer = await self._heads(keys, expect, short=True)
        matched = all(len(row) == 2 for row in answer["heads"] if row[0] in expect)
        if matched:
            self.log.write("decision", action=action, peer=peer.name, keys=keys[:64])
        return {**answer, "matched": matched}

    async def _put_record(self, peer: Agent, wire: Any) -> dict[str, Any]:
        try:
            record = record_from_wire(wire)
            verify(record, public_key_of=self.roster.public_key_of, owner_of=self.roster.owner_of)
        except RecordError as exc:
            raise BadRequest("bad_request", f"record rejected: {exc}") from None
        if record.owner != peer.name:
            raise BadRequest("forbidden", f"a record of {record.owner} sent by {peer.name}")
        try:
            await self.store.wait_put_record(record)
        except StaleSeq as exc:
            raise BadRequest("stale_seq", str(exc)) from None
        self.log.write(
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
    roster = cdir.roster()
    identity = cdir.identity(agent)
    log = EventLog(cdir.log(agent), agent)
    store = None
    try:
        store = await Store.open(cdir.db(agent))
        daemon = CentralDaemon(
            roster, identity, store, log, max_message=16 * 1024 * 1024, listen=listen
        )
        await daemon.serve()
    finally:
        if store is not None:
            await store.close()
        log.close()


def parser() -> argparse.ArgumentParser:
    """The command line: DIR [--agent NAME] [--listen HOST:PORT]."""
    found = argparse.ArgumentParser(prog="python -m planfence_net.bench.central")
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
    args = parser().parse_args(argv)
    anyio.run(run_central, ClusterDir(args.dir), args.agent, args.listen, backend="asyncio")


if __name__ == "__main__":
    main()
