"""An authenticated client session to one owner, with pipelined requests.

    async with open_session(roster, identity, "reqs") as session:
        heads = await session.request("heads", {"keys": ["req/order-17"]})

Many requests may be in flight at once; a reader task routes responses by request id.
"""

from __future__ import annotations

import itertools
import math
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .errors import PlanfenceError, collapse, RemoteProtocolError, RequestError, TransportError
from .identity import Identity
from .messages import decode_response, encode_request
from .roster import Agent, Roster
from .transport import NoiseStream, connect


class _Pending:
    __slots__ = ("event", "result", "error")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.result: dict[str, Any] | None = None
        self.error: PlanfenceError | None = None


class Session:
    """One Noise session to an owner. Use `open_session`; not constructed directly."""

    def __init__(self, stream: NoiseStream, agent: Agent) -> None:
        self.stream = stream
        self.agent = agent
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._subscriptions: dict[int, MemoryObjectSendStream[dict[str, Any]]] = {}
        self._failure: PlanfenceError | None = None

    @property
    def alive(self) -> bool:
        """False once the session failed or can no longer send (an interrupted send)."""
        return self._failure is None and not self.stream.send_broken

    async def request(self, op: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one request and wait for its result.

        Raises RequestError for a typed error from the owner, TransportError when the session
        is lost, RemoteProtocolError for a malformed response.
        """
        req_id, pending = self._register()
        await self._send(req_id, op, args or {})
        await pending.event.wait()
        if pending.error is not None:
            raise pending.error
        assert pending.result is not None
        return pending.result

    async def subscribe(self, keys: list[str] | None = None, every: int = 1,
                        group: str | None = None,
                        ) -> MemoryObjectReceiveStream[dict[str, Any]]:
        """Subscribe to head updates, pushed after every `every` updates; returns a stream of
        pushed {"heads": [...]} maps. With a sync `group`, pushes also carry "seq", which the
        caller acknowledges with `request("ack", {"group": group, "seq": seq})` once applied."""
        req_id, pending = self._register()
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](math.inf)
        self._subscriptions[req_id] = send
        args: dict[str, Any] = {} if keys is None else {"keys": keys}
        if every != 1:
            args["every"] = every
        if group is not None:
            args["group"] = group
        try:
            await self._send(req_id, "subscribe", args)
            await pending.event.wait()
            if pending.error is not None:
                raise pending.error
        except BaseException:
            self._subscriptions.pop(req_id, None)
            send.close()
            receive.close()
            raise
        return receive

    def _register(self) -> tuple[int, _Pending]:
        if self._failure is not None:
            raise self._failure
        req_id = next(self._ids)
        pending = self._pending[req_id] = _Pending()
        return req_id, pending

    async def _send(self, req_id: int, op: str, args: dict[str, Any]) -> None:
        try:
            await self.stream.send_message(encode_request(req_id, op, args))
        except PlanfenceError:
            self._pending.pop(req_id, None)
            raise

    async def run_reader(self) -> None:
        """Route responses to waiting requests until the session ends; then fail the rest."""
        try:
            while True:
                response = decode_response(await self.stream.receive_message())
                self._deliver(response.req_id, response.ok, response.result)
        except (TransportError, RemoteProtocolError) as exc:
            self._fail(exc)
        except anyio.get_cancelled_exc_class():
            self._fail(TransportError("session closed"))
            raise

    def _deliver(self, req_id: int, ok: bool, result: dict[str, Any]) -> None:
        pending = self._pending.pop(req_id, None)
        subscription = self._subscriptions.get(req_id)
        if pending is None and subscription is not None:
            subscription.send_nowait(result)
            return
        if pending is None:
            raise RemoteProtocolError(f"response to unknown request id {req_id}")
        if ok:
            pending.result = result
        else:
            code, message = result.get("code"), result.get("message")
            pending.error = RequestError(str(code), str(message))
        pending.event.set()

    def _fail(self, exc: PlanfenceError) -> None:
        self._failure = exc if isinstance(exc, TransportError) else TransportError(
            f"session to {self.agent.name} failed: {exc}")
        for pending in self._pending.values():
            pending.error = self._failure
            pending.event.set()
        self._pending.clear()
        for subscription in self._subscriptions.values():
            subscription.close()
        self._subscriptions.clear()

    async def aclose(self) -> None:
        await self.stream.aclose()


async def start_session(task_group: TaskGroup, roster: Roster, identity: Identity,
                        agent: Agent, *, host: str | None = None,
                        port: int | None = None) -> Session:
    """Connect to `agent` (or host:port, e.g. a shaper in front of it) and start the reader
    in `task_group`. The session lives until closed or the task group ends."""
    stream = await connect(host or agent.host, port or agent.port, cluster=roster.cluster,
                           static_private=identity.noise_private,
                           remote_static=agent.noise_key)
    session = Session(stream, agent)
    task_group.start_soon(session.run_reader)
    return session


@asynccontextmanager
async def open_session(roster: Roster, identity: Identity, owner: str,
                       **address: Any) -> AsyncIterator[Session]:
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
