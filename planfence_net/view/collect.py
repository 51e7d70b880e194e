"""The one collector under every reader: it follows a cluster folder's owner logs and its
executors' decision logs, folds them (`team.Team`) and hands the rows that changed to its
subscribers.

`Collector.run` reads every `logs/*.jsonl` and `logs/executors/*.jsonl` (the executors'
decisions, `executor.decisionlog`) of the folder from the start, then follows them
(each POLL seconds it reads what was appended, whole lines only, new log files too), and
publishes the changed rows as one batch per round. The bodies a put line does not carry
(plans, intents, branch and HEAD facts) are fetched from their owners by a task of their own,
batched per owner, verified against the roster, so a slow or dead owner never holds the
logs back: its records simply stay without a body (the rows say less, never something
wrong). Owners are never asked on behalf of a hook or a status line.

A subscriber (`subscribe`) first gets every row, then each batch. One that falls behind by
more than BACKLOG batches is dropped (its stream ends; the page's EventSource reconnects and
starts over from every row). Every round also writes the status row to `view/status.json` in
the cluster folder, which the Claude Code status line reads (`statusline`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..cluster.folder import ClusterDir
from ..cluster.processes import link_addresses
from ..core.errors import PlanfenceError
from ..workspace.plans.listing import wait_records
from .team import Team

POLL = 0.1  # seconds between two reads of the logs
BACKLOG = 256  # batches a subscriber may be behind before it is dropped
FETCH_TIMEOUT = 3.0  # per owner and round of body fetches
STATUS = Path("view") / "status.json"

Batch = list[dict[str, Any]]


class Collector:
    """Follows the owner and executor logs of the cluster folder `cdir` (see module doc)."""

    def __init__(self, cdir: ClusterDir, poll: float = POLL, fetch: bool = True) -> None:
        self.cdir = cdir
        self.poll = poll
        self.fetch = fetch
        self.team = Team()
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, bytes] = {}
        self._inodes: dict[Path, int] = {}
        self._subscribers: list[MemoryObjectSendStream[Batch]] = []
        self._wanted: list[str] = []
        self._wake: anyio.Event | None = None  # made in `run`, inside the event loop
        self.rounds = 0

    def subscribe(self) -> MemoryObjectReceiveStream[Batch]:
        """A stream of batches of rows: every row first, then each round's changes."""
        send, receive = anyio.create_memory_object_stream[Batch](BACKLOG)
        send.send_nowait(self.team.rows())
        self._subscribers.append(send)
        return receive

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Read the logs so far, report started, then follow them until cancelled; then end
        every subscriber's stream."""
        self._wake = anyio.Event()
        self.round()
        if self._wanted:
            self._wake.set()
        try:
            async with anyio.create_task_group() as tg:
                if self.fetch:
                    tg.start_soon(self._fetch_bodies)
                task_status.started()
                while True:
                    await anyio.sleep(self.poll)
                    self.round()
        finally:
            for send in self._subscribers:
                send.close()  # their readers' streams end
            self._subscribers.clear()

    def round(self) -> Batch:
        """Read what the logs gained, fold it, publish the changed rows; returns them."""
        logs = self.cdir.root / "logs"
        for path in [*sorted(logs.glob("*.jsonl")), *sorted(logs.glob("executors/*.jsonl"))]:
            for line in self._new_lines(path):
                self._feed(line)
        batch = self.team.take()
        self.rounds += 1
        if batch:
            self._publish(batch)
            self.write_status()
        return batch

    def statistics(self) -> dict[str, Any]:
        """Lines folded, rounds, subscribers and records waiting for their body."""
        return {
            "lines": self.team.lines,
            "rounds": self.rounds,
            "subscribers": len(self._subscribers),
            "bodies_wanted": len(self._wanted),
        }

    def _feed(self, raw: bytes) -> None:
        try:
            line = json.loads(raw)
        except ValueError:
            return
        if not isinstance(line, dict):
            return
        self.team.feed(line)
        rid = line.get("id")
        if line.get("event") == "put" and isinstance(rid, str) and self.team.wanted(rid):
            self._wanted.append(rid)
            if self._wake is not None:
                self._wake.set()

    def _new_lines(self, path: Path) -> list[bytes]:
        """The whole lines appended to `path` since the last read (a local file read of what
        was appended: short, so it runs in the loop)."""
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                if (
                    st.st_size < self._offsets.get(path, 0)
                    or self._inodes.get(path, st.st_ino) != st.st_ino
                ):
                    self._offsets[path] = 0  # a new file in its place: read it from the start
                    self._partial.pop(path, None)
                self._inodes[path] = st.st_ino
                f.seek(self._offsets.get(path, 0))
                data = f.read()
        except OSError:
            return []
        self._offsets[path] = self._offsets.get(path, 0) + len(data)
        data = self._partial.pop(path, b"") + data
        *lines, rest = data.split(b"\n")
        if rest:
            self._partial[path] = rest
        return [line for line in lines if line]

    def _publish(self, batch: Batch) -> None:
        for send in list(self._subscribers):
            try:
                send.send_nowait(batch)
            except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._subscribers.remove(send)
                send.close()  # behind or gone: it starts over from every row

    def write_status(self) -> None:
        """`view/status.json` in the cluster folder, replaced whole (never half-written)."""
        path = self.cdir.root / STATUS
        try:
            path.parent.mkdir(exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.team.status()))
            os.replace(tmp, path)
        except OSError:
            pass  # the status line then says it has no fresh status

    async def _fetch_bodies(self) -> None:
        """Fetch the bodies of the records `_feed` wanted, as they come."""
        while True:
            assert self._wake is not None  # made before this task starts
            await self._wake.wait()
            self._wake = anyio.Event()
            await self.wait_bodies()

    async def wait_bodies(self) -> None:
        """Fetch the bodies wanted so far, per owner and concurrently (each owner given
        FETCH_TIMEOUT), fold them and publish what changed."""
        roster = self.cdir.roster()
        me = roster.owner_of("plan/x") or roster.agents[0].name
        identity = self.cdir.identity(me)
        wanted, self._wanted = self._wanted, []
        by_owner: dict[str, list[bytes]] = {}
        for rid in dict.fromkeys(wanted):
            put = self.team.puts.get(rid)
            if put is not None and rid not in self.team.bodies and _is_id(rid):
                by_owner.setdefault(put.owner, []).append(bytes.fromhex(rid))
        addresses = link_addresses(self.cdir)

        async def ask(owner: str, ids: list[bytes]) -> None:
            try:
                found = await wait_records(roster, identity, owner, ids, addresses, FETCH_TIMEOUT)
            except PlanfenceError:
                return  # the rows stay without these bodies
            for rid, record in found.items():
                self.team.body(rid.hex(), record.body)

        async with anyio.create_task_group() as tg:
            for owner, ids in by_owner.items():
                tg.start_soon(ask, owner, ids)
        batch = self.team.take()
        if batch:
            self._publish(batch)
            self.write_status()


def _is_id(text: str) -> bool:
    """Whether a log line's `id` can name a record (hex): a line is data, never trusted."""
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return True
