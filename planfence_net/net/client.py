"""An authenticated client session to one owner, with pipelined requests.

    async with open_session(roster, identity, "reqs") as session:
        heads = await session.request("heads", {"keys": ["req/order-17"]})

Many requests may be in flight at once; responses are routed by request id as they arrive.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio

from ..core.errors import (
    PlanfenceError,
    RemoteProtocolError,
    TransportError,
    collapse,
)
from ..core.identity import Identity
from ..core.roster import Agent, Roster
from ..protocol.session import Push, Response
from .transport import NoiseStream, Received, connect

if TYPE_CHECKING:  # annotations only
    from anyio.abc import TaskGroup
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream


Outcome = dict[str, Any] | PlanfenceError
# Requests a session's waiters gave up on (a deadline) whose answers have not come: beyond
# this many, the owner is not answering and the session is closed.
MAX_ABANDONED = 1024


class Reply:
    """A request on the wire; `await reply.wait()` for its result."""

    __slots__ = ("req_id", "_future", "_abandon")

    def __init__(
        self,
        req_id: int,
        future: asyncio.Future[Outcome | None],
        abandon: Callable[[int], None],
    ) -> None:
        self.req_id = req_id
        self._future = future
        self._abandon = abandon

    async def wait(self) -> dict[str, Any]:
        """The result. Raises RequestError for a typed error from the owner, TransportError
        when the session is lost, RemoteProtocolError for a malformed response. A waiter
        cancelled here gives the request up: its answer, if it comes, is dropped."""
        outcome = await self.outcome()
        if outcome is None:
            raise TransportError("the request was given up before its answer came")
        if isinstance(outcome, PlanfenceError):
            raise outcome
        return outcome

    async def outcome(self) -> Outcome | None:
        """The result or the error `wait` would raise, without raising it; None when the
        request was given up (`give_up`) before its answer came. A waiter cancelled here
        gives the request up."""
        try:
            # the future is the waiter's own: cancelling this await cancels it, and an
            # answer that comes later finds it done and is dropped
            return await self._future
        except asyncio.CancelledError:
            self._abandon(self.req_id)
            raise

    def give_up(self) -> None:
        """Stop waiting for the answer (a deadline passed): its waiter gets None, and the
        answer, if it comes, is dropped."""
        if not self._future.done():
            self._abandon(self.req_id)
            self._future.set_result(None)


class Session:
    """One Noise session to an owner. Use `open_session`; not constructed directly.

    The protocol session (protocol.session) matches each answer to its request; this loop
    resolves the request's waiter in the socket's receive callback, so a waiting request
    resumes in the next event-loop turn after its answer arrives.
    """

    def __init__(self, stream: NoiseStream, agent: Agent) -> None:
        self.stream = stream
        self.agent = agent
        # outcomes are results, never future exceptions: an answer that arrives after its
        # waiter gave up (a deadline) is then dropped silently
        self._waiters: dict[int, asyncio.Future[Outcome | None]] = {}
        self._subscriptions: dict[int, MemoryObjectSendStream[dict[str, Any]]] = {}
        self._failure: PlanfenceError | None = None
        self._loop = asyncio.get_running_loop()  # the stream's: a session lives in one loop
        stream.set_receiver(self._on_event, self._fail)

    @property
    def alive(self) -> bool:
        """False once the session failed or can no longer send."""
        return self._failure is None and not self.stream.send_broken

    async def request(self, op: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one request and wait for its result.

        Raises RequestError for a typed error from the owner, TransportError when the session
        is lost, RemoteProtocolError for a malformed response.
        """
        reply = await self.send_request(op, args)
        return await reply.wait()

    async def send_request(
        self, op: str, args: dict[str, Any] | None = None, *, subscribe: bool = False
    ) -> Reply:
        """Put one request on the wire and return at once (unless the socket's send buffer
        is full); `await reply.wait()` later. Many replies may be in flight."""
        reply = self.send_request_now(op, args, subscribe=subscribe)
        try:
            await self.stream.wait_writable()
        except BaseException:
            self._abandon(reply.req_id)
            raise
        return reply

    def send_request_now(
        self, op: str, args: dict[str, Any] | None = None, *, subscribe: bool = False
    ) -> Reply:
        """`send_request` without waiting even when the socket's send buffer is full (check
        `stream.writable` first): for a caller that awaits the answer next anyway."""
        reply, data = self.prepare_request(op, args, subscribe=subscribe)
        self.stream.write_prepared(data)
        return reply

    def prepare_request(
        self, op: str, args: dict[str, Any] | None = None, *, subscribe: bool = False
    ) -> tuple[Reply, bytes]:
        """`send_request_now` in two steps: the reply to wait for and the bytes to hand to
        `stream.write_prepared` before anything else is sent on this session."""
        if self._failure is not None:
            raise self._failure
        req_id, data = self.stream.prepare_request(op, args or {}, subscribe=subscribe)
        future = self._waiters[req_id] = self._loop.create_future()
        return Reply(req_id, future, self._abandon), data

    async def subscribe(
        self,
        keys: list[str] | None = None,
        every: int = 1,
        group: str | None = None,
        records: bool = False,
    ) -> MemoryObjectReceiveStream[dict[str, Any]]:
        """Subscribe to head updates, pushed after every `every` updates; returns a stream of
        pushed {"heads": [...]} maps. With a sync `group`, pushes also carry "seq", which the
        caller acknowledges with `request("ack", {"group": group, "seq": seq})` once applied.
        With `records`, pushes also carry "records": wire records of pushed rows (unverified:
        read them with `core.answers.verified_records`), as many as the owner's push budget
        holds; a row without its record is read with `get`."""
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](math.inf)
        args: dict[str, Any] = {} if keys is None else {"keys": keys}
        if every != 1:
            args["every"] = every
        if group is not None:
            args["group"] = group
        if records:
            args["records"] = True
        try:
            reply = await self.send_request("subscribe", args, subscribe=True)
            self._subscriptions[reply.req_id] = send
            await reply.wait()
        except BaseException:
            for req_id, stream in list(self._subscriptions.items()):
                if stream is send:
                    del self._subscriptions[req_id]
            send.close()
            receive.close()
            raise
        return receive

    def _abandon(self, req_id: int) -> None:
        """Forget a request whose waiter gave up (its answer, if it comes, is dropped). An
        owner that leaves more than MAX_ABANDONED such requests unanswered loses the
        session."""
        if self._waiters.pop(req_id, None) is None:
            return  # answered already, or the session failed
        if self.stream.abandon(req_id) > MAX_ABANDONED:
            self._fail(
                TransportError(
                    f"{self.agent.name} left {MAX_ABANDONED} requests "
                    f"unanswered past their deadlines"
                )
            )
            self.stream.close()

    async def run_reader(self) -> None:
        """Live as long as the session (answers are routed as they arrive); when it ends or
        this task is cancelled, fail every request still waiting."""
        try:
            self._fail(await self.stream.wait_closed())
        except anyio.get_cancelled_exc_class():
            self._fail(TransportError("session closed"))
            raise

    def _on_event(self, event: Received) -> None:
        if isinstance(event, Response):
            future = self._waiters.pop(event.req_id, None)
            if future is not None and not future.done():
                future.set_result(event.outcome())
        elif isinstance(event, Push):
            subscription = self._subscriptions.get(event.req_id)
            if subscription is not None:
                subscription.send_nowait(event.result)
        else:  # a session that matches responses hands on nothing else
            raise RemoteProtocolError("an unmatched message on a request session")

    def _fail(self, exc: PlanfenceError) -> None:
        if self._failure is not None:
            return
        self._failure = (
            exc
            if isinstance(exc, TransportError)
            else TransportError(f"session to {self.agent.name} failed: {exc}")
        )
        for future in self._waiters.values():
            if not future.done():
                future.set_result(self._failure)
        self._waiters.clear()
        for subscription in self._subscriptions.values():
            subscription.close()
        self._subscriptions.clear()

    async def aclose(self) -> None:
        await self.stream.aclose()


async def start_session(
    task_group: TaskGroup,
    roster: Roster,
    identity: Identity,
    agent: Agent,
    *,
    host: str | None = None,
    port: int | None = None,
) -> Session:
    """Connect to `agent` (or host:port, e.g. a shaper in front of it) and start the reader
    in `task_group`. The session lives until closed or the task group ends."""
    stream = await connect(
        host or agent.host,
        port or agent.port,
        cluster=roster.cluster,
        static_private=identity.noise_private,
        remote_static=agent.noise_key,
    )
    session = Session(stream, agent)
    task_group.start_soon(session.run_reader)
    return session


@asynccontextmanager
async def open_session(
    roster: Roster, identity: Identity, owner: str, **address: Any
) -> AsyncIterator[Session]:
    """A session to the owner named `owner`, closed on exit."""
    async with collapsing_task_group() as tg:
        session = await start_session(tg, roster, identity, roster.agent(owner), **address)
        try:
            yield session
        finally:
            await session.aclose()
            tg.cancel_scope.cancel()


@asynccontextmanager
async def collapsing_task_group() -> AsyncIterator[TaskGroup]:
    """A task group whose failures surface as the one planfence error they stand for."""
    try:
        async with anyio.create_task_group() as tg:
            yield tg
    except BaseExceptionGroup as group:
        raise collapse(group) from None
