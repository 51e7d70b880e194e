"""The state behind an MCP server as an owner of the team's cluster.

`planfence mcp proxy --cluster DIR` runs an ordinary owner daemon (same roster, Noise
sessions, store and logs as every owner) inside the proxy process, as the roster member
`--as` (default: the server's name), whose keys are `NAME:resource/URI` and
`NAME:tool/TOOL/ARGS-DIGEST`. Each fact the session reads through the proxy becomes a record
(body: the content digest, MIME type and size); so other agents' plans can declare it and
their executors validate against it like any other key. The heads stay current two ways:

- where the server offers subscriptions, a `notifications/resources/updated` makes the proxy
  read the resource at once and write its new record, so a later `heads` needs no read;
- otherwise `heads` reads the asked-for facts again first (lazily: only what is asked).

Nobody `put`s these facts; the service refuses it.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from ..cluster.folder import ClusterDir
from ..owners.logs import EventLog
from ..owners.ops import owner_operations
from ..owners.service import Call, Handler, Owner, Service
from ..owners.startup import cluster_owner, run_owner
from ..owners.store import Store
from ..protocol.messages import BadRequest
from .proxy import Proxy
from .relay import Observed, Reread, resource_key


@dataclass
class McpFacts:
    """The facts of one proxied server, written to `store` as the proxy sees them."""

    name: str
    proxy: Proxy
    store: Store
    log: EventLog
    timeout: float
    _last: dict[str, str] = field(default_factory=dict)  # fact -> digest of its head record
    _changed: set[str] = field(default_factory=set)  # announced, not yet read again
    _lock: anyio.Lock = field(default_factory=anyio.Lock)

    def key(self, fact: str) -> str:
        return f"{self.name}:{fact}"

    def service(self) -> Service:
        """An ordinary owner's operations, observing before `heads`, refusing `put`s."""
        ordinary = owner_operations(observe=self.observe)
        put = ordinary.operations["put"]
        return ordinary.with_rows(
            dataclasses.replace(put, handle=functools.partial(self.put, put.handle)),
            statistics=self.statistics,
        )

    async def seen(self, observed: Observed) -> None:
        """The session read a fact: its record, if the value is new."""
        await self.record(observed.key, observed.digest, observed.mime, observed.size)

    async def changed(self, uri: str, tg: TaskGroup) -> None:
        """The server announced a change: read the resource again and record it, in `tg`."""
        self._changed.add(resource_key(uri))
        tg.start_soon(self._refresh, resource_key(uri))

    async def _refresh(self, fact: str) -> None:
        with anyio.move_on_after(self.timeout):
            answer = await self.proxy.read_again(fact)
            if answer is not None and answer.digest is not None:
                self._changed.discard(fact)
                await self.record(fact, answer.digest, answer.mime, answer.size)

    async def observe(self, owner: Owner, keys: list[str]) -> None:
        """Before `heads`: read again each asked-for fact that no subscription keeps current.

        Raises BadRequest("server_unreadable") when one cannot be read in time.
        """
        prefix = self.name + ":"
        facts = [k.removeprefix(prefix) for k in keys if k.startswith(prefix)]
        stale = [f for f in facts if f in self._last and not self._current(f)]
        answers: dict[str, Reread | None] = {}

        async def look(fact: str) -> None:
            answers[fact] = await self.proxy.read_again(fact)

        with anyio.move_on_after(self.timeout):
            async with anyio.create_task_group() as tg:
                for fact in stale:
                    tg.start_soon(look, fact)
        for fact in stale:
            answer = answers.get(fact)
            if answer is None or answer.digest is None:
                reason = answer.error if answer is not None else "no answer in time"
                raise BadRequest("server_unreadable", f"cannot read {self.key(fact)}: {reason}")
            self._changed.discard(fact)
            await self.record(fact, answer.digest, answer.mime, answer.size)

    def _current(self, fact: str) -> bool:
        """A subscription keeps `fact` current unless it announced a change not yet read."""
        return fact in self.proxy.subscribed and fact not in self._changed

    async def record(self, fact: str, digest: str, mime: str | None, size: int) -> None:
        """Write `fact`'s record unless its head already holds `digest`."""
        async with self._lock:  # two reads of one fact must not write it twice
            if self._last.get(fact) == digest:
                return
            body = {"digest": f"blake2b:{digest}", "mime": mime, "size": size}
            record = await self.store.wait_put(self.key(fact), "fact", [], body)
            self._last[fact] = digest
            self.log.write(
                "put", key=record.key, id=record.id, seq=record.seq, kind="fact", observed=True
            )

    async def put(self, ordinary: Handler, call: Call, parsed: Any) -> dict[str, Any]:
        if str(parsed[0]).startswith(self.name + ":"):
            raise BadRequest(
                "forbidden", f"{parsed[0]!r} is read from the MCP server; nobody writes it"
            )
        return await ordinary(call, parsed)

    def statistics(self) -> dict[str, Any]:
        stats = self.proxy.stats
        return {
            "mcp_server": self.name,
            "facts": len(self._last),
            "rereads": stats.rereads,
            "checked": stats.checked,
            "refused": stats.refused,
        }


async def serve_facts(
    proxy: Proxy,
    cdir: ClusterDir,
    agent: str,
    tg: TaskGroup,
    *,
    read_timeout: float,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `proxy`'s facts as owner `agent` of the cluster at `cdir` until cancelled;
    reports the bound port. Raises ConfigError (roster, key) or StoreError before listening."""

    def service(store: Store, log: EventLog) -> Service:
        facts = McpFacts(proxy.name, proxy, store, log, read_timeout)
        proxy.on_observed = facts.seen
        proxy.on_changed = functools.partial(facts.changed, tg=tg)
        made = facts.service()
        log.write("mcp_proxy", server=proxy.name)
        return made

    await run_owner(
        *cluster_owner(cdir, agent),
        service=service,
        task_status=task_status,
    )
