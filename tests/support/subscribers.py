"""Many subscribers, run as their own process: `python subscribers.py CLUSTER OWNER SESSIONS`.

Opens SESSIONS sessions to OWNER (as the cluster's agents in turn), each with 16 subscriptions
to every key, and reads every push. Prints `ready` once all are subscribed. Then reads a
number N from stdin, waits until every subscription has been pushed N head rows, and prints
the number of rows received in all.
"""

from __future__ import annotations

import os
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

from planfence_net.cluster.folder import ClusterDir
from planfence_net.net.client import open_session

PER_SESSION = 16


async def main(root: Path, owner: str, sessions: int) -> None:
    cdir = ClusterDir(root)
    roster = cdir.roster()
    agents = [a.name for a in roster.agents]
    rows: list[int] = []
    changed = anyio.Event()

    async def drain(index: int, updates: Any) -> None:
        nonlocal changed
        async for push in updates:
            rows[index] += len(push["heads"])
            changed.set()
            changed = anyio.Event()

    async with AsyncExitStack() as stack, anyio.create_task_group() as tg:
        for n in range(sessions):
            agent = agents[n % len(agents)]
            session = await stack.enter_async_context(
                open_session(roster, cdir.identity(agent), owner)
            )
            for _ in range(PER_SESSION):
                rows.append(0)
                tg.start_soon(drain, len(rows) - 1, await session.subscribe())
        print("ready", flush=True)
        expected = int(await anyio.to_thread.run_sync(sys.stdin.readline))
        while min(rows) < expected:
            await changed.wait()
        print(sum(rows), flush=True)
        os._exit(0)  # the sessions need no goodbye: the owner sees them close


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
