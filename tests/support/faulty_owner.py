"""A test-only faulty owner: a real owner daemon whose service's `heads` row is corrupted.

    python tests/support/faulty_owner.py DIR AGENT FAULT

FAULT is one of: wrong_key (answers about a key nobody asked for), missing_key (drops the
first requested key), garbage_id (a 5-byte id), duplicate_key (one key twice), slow (every
get and heads answered late, correctly).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import anyio

from planfence_net.cluster.folder import ClusterDir
from planfence_net.owners.ops import owner_operations
from planfence_net.owners.service import Call, Handler, Service
from planfence_net.owners.startup import run_owner

FAULTS = ("wrong_key", "missing_key", "garbage_id", "duplicate_key", "slow")
SLOW = 0.9  # seconds a `slow` owner takes to answer each get and heads


def corrupt(fault: str, answer: dict[str, Any]) -> dict[str, Any]:
    heads = [list(row) for row in answer["heads"]]
    if fault == "wrong_key":
        heads[0][0] = heads[0][0] + "-not-asked"
    elif fault == "missing_key":
        heads = heads[1:]
    elif fault == "garbage_id":  # a 5-byte id, also in a short row (which has none)
        heads[0] = [heads[0][0], b"\x00garb", heads[0][-1]]
    elif fault == "duplicate_key":
        heads.append(heads[0])
    return {**answer, "heads": heads}


def faulty_service(fault: str) -> Service:
    """An ordinary owner's service whose `heads` row answers with `fault`; with `slow`, its
    `get` and `heads` answer after SLOW seconds (an owner on a bad link)."""
    ordinary = owner_operations()
    heads, get = ordinary.operations["heads"], ordinary.operations["get"]

    async def faulty_heads(call: Call, parsed: Any) -> dict[str, Any]:
        return corrupt(fault, await heads.handle(call, parsed))

    def slow(handle: Handler) -> Handler:
        async def late(call: Call, parsed: Any) -> dict[str, Any]:
            await anyio.sleep(SLOW)  # the fault itself: this owner is slow
            return await handle(call, parsed)

        return late

    if fault == "slow":
        return ordinary.with_rows(
            dataclasses.replace(heads, handle=slow(heads.handle), inline=False),
            dataclasses.replace(get, handle=slow(get.handle)),
        )
    return ordinary.with_rows(dataclasses.replace(heads, handle=faulty_heads))


def main() -> None:
    path, agent, fault = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    assert fault in FAULTS, fault
    cdir = ClusterDir(path)
    anyio.run(
        lambda: run_owner(
            cdir.roster(),
            cdir.identity(agent),
            cdir.db(agent),
            cdir.log(agent),
            service=faulty_service(fault),
        ),
        backend="asyncio",
    )


if __name__ == "__main__":
    main()
