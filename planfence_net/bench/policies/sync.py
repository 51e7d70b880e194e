"""The `sync` baseline: synchronous replication of a workflow's records to its participants.

Every participant of a workflow (the template's agents: the planner, the executor and the fact
owners) subscribes to the other participants' keys of the workflow in one sync group, as in
`sync-barrier` (bench/policies/syncbarrier.py), and acknowledges every push once applied; the executor
subscribes with `records` (docs/PROTOCOL.md, `subscribe`), so each push carries the updated
records with their [key, id, seq] rows: it verifies them (`verified_records`), adds them to its
replica and its copy, and acknowledges, one message each way per update. Only a record the
owner left out of the push (over its push budget) or that fails verification is read with
`get` on the same session before the acknowledgement. An update
**completes** when every participant has acknowledged it: the writer (`writers.SyncWriter`)
waits for that (`synced` on its own daemon) before its put returns, and that wait is charged to
the update, not to any action (the harness reports it as `update_ms`). With K > 1 the owners
push every K updates, and a writer completes a burst of updates with one `synced` at its end
(`SyncWriter.settle`), which pushes what is held back.

At action time the executor sends nothing: every update committed before "ready to act" has
completed, so its replica and its copy of the heads hold them. It walks the plan's lineage in
its replica, compares the frontier with its copy, and on a drift replans once with the changed
records from its replica and compares again. The contract is the writers': an update that did
not wait for its acknowledgements (a plain `planfence put`) may not yet be in the replica;
`sync-barrier` is the design that is safe against such writers.
"""

from __future__ import annotations

from typing import Any

from ...core.answers import verified_records, verifier
from ...core.errors import PlanfenceError
from ...core.records import Record
from .syncbarrier import SyncBarrier


class Sync(SyncBarrier):
    """Synchronous replication; no request at action time (module docstring)."""

    push_records = True

    async def start(self, keys: list[str]) -> None:
        """Subscribe every participant (sync-barrier's `start`), then let the writer join the
        group for its own keys, so its updates complete only once every participant has them."""
        await super().start(keys)
        join = getattr(self.writer, "join", None)
        if join is not None:
            await join(self.group, self.owned, self.k)

    async def _acknowledge(self, agent: str, session: Any, stream: Any, group: str) -> None:
        """Apply (the executor: records into the replica, heads into the copy) and
        acknowledge every push, until the session ends."""
        async with stream:
            async for push in stream:
                try:
                    if agent == self.parts.executor:
                        await self._apply(session, push.get("heads", []), push.get("records"))
                    await session.request("ack", {"group": group, "seq": push["seq"]})
                except PlanfenceError:
                    return

    async def _apply(self, session: Any, rows: list[Any], wires: object) -> None:
        """Add a push's verified records to the replica (`get` the rows whose record the
        push did not carry), then its rows to the copy."""
        verify = verifier(self.parts.roster)
        await self.replica.add(verified_records(wires, verify, bad="drop"))
        wanted = [row[1] for row in rows if row[1] is not None and not self.replica.lookup(row[1])]
        if wanted:
            result = await session.request("get", {"ids": wanted})
            await self.replica.add(verified_records(result.get("records"), verify, bad="drop"))
        self.copy.apply(rows)

    async def _ready(self, deps: tuple[str, ...]) -> str | None:
        """Nothing to wait for at action time: every update completed on this replica
        before its writer was answered."""
        return None

    async def _changed(self, drift: dict[str, bytes]) -> list[Record]:
        """The drifted keys' head records, from the replica the pushes filled."""
        return [r for rid in drift.values() if (r := self.replica.lookup(rid)) is not None]
