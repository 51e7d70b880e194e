"""`planfence mcp proxy`: the relay's I/O loop between an agent and a real MCP server.

The real server runs as a child process (its stderr goes to ours). Lines from the agent come
from this process's stdin, lines for the agent go to its stdout; the `Relay` decides what
passes and the `ReadSet` decides each write call. Before a write call goes on, every fact the
session read is read again (resources with `resources/read`, read tools by calling them again
with the same arguments). Where the server offers subscriptions, the proxy also subscribes to
every resource the agent reads, so a change is known as soon as the server announces it.

A write is never forwarded unless its check finished in time and found nothing changed: an
error, a timeout or a server that cannot be read refuses it (fails closed).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import IO, Any

import anyio
from anyio.abc import ByteSendStream, Process
from anyio.streams.buffered import BufferedByteReceiveStream

from ..core.timeouts import DEFAULT_TIMEOUT
from .readset import ReadSet
from .relay import (
    Changed,
    CheckWrite,
    Event,
    Observed,
    Relay,
    Reread,
    Subscribed,
    ToClient,
    ToolPolicy,
    ToServer,
    resource_key,
)

MAX_LINE = 64 * 1024 * 1024  # one JSON-RPC message; a longer line ends the session
# DEFAULT_TIMEOUT (core/timeouts.py): seconds for one write check (every re-read it needs)


@dataclass
class ProxyStats:
    forwarded: int = 0
    checked: int = 0
    refused: int = 0
    rereads: int = 0


@dataclass
class Proxy:
    """One agent session in front of one server. `write_client` delivers a line to the agent."""

    name: str
    server: ByteSendStream
    write_client: Callable[[bytes], None]
    policy: ToolPolicy = field(default_factory=ToolPolicy)
    timeout: float = DEFAULT_TIMEOUT
    on_observed: Callable[[Observed], Awaitable[None]] | None = None  # the owner's hooks
    on_changed: Callable[[str], Awaitable[None]] | None = None
    relay: Relay = field(init=False)
    reads: ReadSet = field(init=False)
    stats: ProxyStats = field(default_factory=ProxyStats)
    _subscribed: set[str] = field(default_factory=set)  # keys with a live subscription
    _waiting: dict[str, tuple[anyio.Event, list[Reread]]] = field(default_factory=dict)  # by id

    def __post_init__(self) -> None:
        self.relay = Relay(self.policy)
        self.reads = ReadSet(self.name)

    @property
    def subscribed(self) -> frozenset[str]:
        """The facts a subscription of the proxy's own keeps current."""
        return frozenset(self._subscribed)

    async def carry_out(self, events: list[Event], tg: anyio.abc.TaskGroup) -> None:
        """Do what the relay asked, in order; write checks run as tasks of `tg`."""
        for event in events:
            if isinstance(event, ToServer):
                self.stats.forwarded += 1
                await self.server.send(event.line)
            elif isinstance(event, ToClient):
                self.write_client(event.line)
            elif isinstance(event, Observed):
                self.reads.observed(event.key, event.digest)
                if self.on_observed is not None:
                    await self.on_observed(event)
                uri = event.key.removeprefix("resource/")
                if (
                    self.relay.server_subscribes
                    and event.key != uri
                    and event.key not in (self._subscribed)
                ):
                    await self.server.send(self.relay.subscribe(uri).line)
            elif isinstance(event, Subscribed):
                if event.ok:
                    self._subscribed.add(resource_key(event.uri))
            elif isinstance(event, Changed):
                if self.on_changed is not None:
                    await self.on_changed(event.uri)
            elif isinstance(event, Reread):
                waiter = self._waiting.pop(event.request, None)
                if waiter is not None:
                    waiter[1].append(event)
                    waiter[0].set()
            elif isinstance(event, CheckWrite):
                tg.start_soon(self._check, event, tg)

    async def _check(self, call: CheckWrite, tg: anyio.abc.TaskGroup) -> None:
        self.stats.checked += 1
        keys = self.reads.to_reread()
        current: dict[str, str | None] = {key: None for key in keys}

        async def look(key: str) -> None:
            answer = await self.read_again(key)
            current[key] = answer.digest if answer is not None else None

        with anyio.move_on_after(self.timeout):
            async with anyio.create_task_group() as reads:
                for key in keys:
                    reads.start_soon(look, key)
        decision = self.reads.decide(call.tool, current)
        if decision.allowed:
            await self.carry_out(self.relay.allow(call.token), tg)
        else:
            self.stats.refused += 1
            await self.carry_out(self.relay.refuse(call.token, decision.reason), tg)

    async def read_again(self, key: str) -> Reread | None:
        """Read `key` again as the agent read it: the server's answer (its digest is None
        when the server answered with an error), or None for a key never read through this
        proxy. The caller bounds the wait."""
        self.stats.rereads += 1
        try:
            request = self.relay.reread(key)
        except KeyError:
            return None
        rid = request.request
        ready, answers = self._waiting[rid] = (anyio.Event(), [])
        try:
            await self.server.send(request.line)
            await ready.wait()
        finally:
            self._waiting.pop(rid, None)
        return answers[0]


async def run_proxy(
    name: str,
    command: list[str],
    policy: ToolPolicy,
    *,
    check_timeout: float = DEFAULT_TIMEOUT,
    stdin: IO[bytes] | None = None,
    stdout: IO[bytes] | None = None,
    owner: Callable[[Proxy, anyio.abc.TaskGroup], Awaitable[None]] | None = None,
) -> int:
    """Relay between this process's stdin/stdout and `command` until either side closes;
    returns the server's exit code (or 0 when the agent closed first and the server was
    stopped). `owner(proxy, tg)`, when given, starts what serves the proxy's facts to the
    cluster before the first line is relayed. Raises OSError when the server cannot be
    started."""
    agent_in = stdin or sys.stdin.buffer
    agent_out = stdout or sys.stdout.buffer

    def write_client(line: bytes) -> None:
        agent_out.write(line)
        agent_out.flush()

    process: Process = await anyio.open_process(command, stderr=None)
    assert process.stdin is not None and process.stdout is not None
    proxy = Proxy(name, process.stdin, write_client, policy, check_timeout)
    async with process, anyio.create_task_group() as tg:
        if owner is not None:
            await owner(proxy, tg)
        tg.start_soon(_from_server, proxy, BufferedByteReceiveStream(process.stdout), tg)
        while line := await anyio.to_thread.run_sync(agent_in.readline, abandon_on_cancel=True):
            if line.strip():
                await proxy.carry_out(proxy.relay.from_client(line), tg)
        await process.stdin.aclose()  # the agent is gone: let the server finish
        with anyio.move_on_after(check_timeout):
            await process.wait()
        if process.returncode is None:
            process.terminate()
        tg.cancel_scope.cancel()
    return process.returncode or 0


async def _from_server(proxy: Proxy, lines: BufferedByteReceiveStream, tg: Any) -> None:
    try:
        while True:
            line = await lines.receive_until(b"\n", MAX_LINE)
            if line.strip():
                await proxy.carry_out(proxy.relay.from_server(line + b"\n"), tg)
    except (anyio.EndOfStream, anyio.IncompleteRead, anyio.DelimiterNotFound):
        tg.cancel_scope.cancel()  # the server is gone: the session ends
