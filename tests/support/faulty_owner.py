"""A test-only faulty owner: a real owner daemon whose `heads` answers are corrupted.

    python tests/faulty_owner.py DIR AGENT FAULT

FAULT is one of: wrong_key (answers about a key nobody asked for), missing_key (drops the
first requested key), garbage_id (a 5-byte id), duplicate_key (one key twice).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio

from planfence_net.cluster.folder import ClusterDir
from planfence_net.owners import daemon
from planfence_net.owners.daemon import OwnerDaemon, run_owner

FAULTS = ("wrong_key", "missing_key", "garbage_id", "duplicate_key")


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


def main() -> None:
    path, agent, fault = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    assert fault in FAULTS, fault
    honest = OwnerDaemon._heads

    async def faulty_heads(
        self: OwnerDaemon, keys: list[str], expect: dict[str, bytes], *, short: bool = False
    ) -> dict[str, Any]:
        return corrupt(fault, await honest(self, keys, expect, short=short))

    OwnerDaemon._heads = faulty_heads  # type: ignore[method-assign, assignment]
    cdir = ClusterDir(path)
    anyio.run(
        lambda: run_owner(cdir.roster(), cdir.identity(agent), cdir.db(agent), cdir.log(agent)),
        backend="asyncio",
    )


if __name__ == "__main__":
    assert daemon  # the real daemon module, only `_heads` replaced
    main()
