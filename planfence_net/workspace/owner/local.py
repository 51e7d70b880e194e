"""The workspace owner's checks of its own keys, answered in-process: the hook's `decide`
runs in the owner's worker threads and asks this owner for the worktree's heads, records and
intents; `LocalOwner` serves those requests with the owner's own service and store, on its
event loop, instead of over a Noise session to itself (no handshake, no encryption, no
socket, no session task to wake). Other owners are still asked over sessions.

    LocalOwner(daemon, before)   made on the daemon's event loop; a `syncclient.Local`

Each request is read as the daemon reads it off the wire (`decode_request` with the
service's schema, so a malformed one is refused alike), served by the same `Service.serve`
on the event loop, and its answer copied as the wire would (packed and unpacked): the caller
gets what a session would have given it. The peer is the roster member whose key is the
caller's (an identity not in the roster is refused as the handshake would refuse it). A
request not answered by its deadline raises TransportError, as a session's would; so does
one to an owner that has stopped. Each is logged as the daemon logs a session's request (a
`request` event), with `in_process`. `before(agent, op, args)` is entered around each request
in the caller's thread (the workspace owner looks at the worktree there, so `heads` does
not hand its look to yet another thread: `Workspace.looking`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, cast

import anyio
import anyio.from_thread
import anyio.lowlevel

from ...core.errors import (
    HandshakeError,
    PlanfenceError,
    RequestError,
    StoreError,
    TransportError,
)
from ...core.identity import Identity
from ...core.roster import Agent, Roster
from ...net.transport import NoiseStream
from ...owners.daemon import OwnerDaemon
from ...owners.ops import keys_of
from ...owners.service import Call, Connection
from ...protocol.messages import BadRequest, Request, encode_request, pack, unpack
from ...protocol.requestread import decode_request

Before = Callable[[str, str, dict[str, Any]], AbstractContextManager[None]]


def _nothing(agent: str, op: str, args: dict[str, Any]) -> AbstractContextManager[None]:
    return contextlib.nullcontext()


class _InProcess:
    """The daemon as an in-process request's operation sees it (`service.Owner`): its own
    state, locks and pushes, but no reply budget to reserve (the answer is copied at once,
    never held in a socket's buffer)."""

    def __init__(self, daemon: OwnerDaemon) -> None:
        self.daemon = daemon
        self.roster, self.agent, self.store = daemon.roster, daemon.agent, daemon.store
        self.log, self.limits, self.max_message = daemon.log, daemon.limits, daemon.max_message
        self.connections, self.put_if_lock = daemon.connections, daemon.put_if_lock

    def statistics(self) -> dict[str, Any]:
        return self.daemon.statistics()

    async def reserve_reply(self, size: int) -> None:
        return None

    def queue_push(self, connection: Connection, message: bytes) -> None:
        self.daemon.queue_push(connection, message)

    def sync_progress(self) -> None:
        self.daemon.sync_progress()

    async def wait_sync_progress(self) -> None:
        await self.daemon.wait_sync_progress()


class LocalOwner:
    """`daemon`'s own requests answered in-process (module doc). Make it on the daemon's
    event loop; `request` is called from worker threads (any thread but the loop's)."""

    def __init__(self, daemon: OwnerDaemon, before: Before = _nothing) -> None:
        self._owner = _InProcess(daemon)
        self._before = before
        self._service = daemon.service
        self._token = anyio.lowlevel.current_token()
        self.answered = 0

    def serves(self, roster: Roster, agent: Agent) -> bool:
        """Whether `agent` of `roster` is this owner (same cluster, name and key)."""
        mine = self._owner.agent
        return (
            roster.cluster == self._owner.roster.cluster
            and agent.name == mine.name
            and agent.public_key == mine.public_key
        )

    def request(
        self, identity: Identity, op: str, args: dict[str, Any], deadline: float
    ) -> dict[str, Any]:
        """The answer a session from `identity` would get to `op(args)` by `deadline`;
        raises RequestError for a typed error, TransportError past the deadline or once the
        owner stopped, HandshakeError for an identity outside the roster."""
        peer = self._peer(identity)
        try:
            request = decode_request(encode_request(0, op, args), self._service.schema)
        except BadRequest as exc:
            raise RequestError(exc.code, exc.message) from None
        try:
            with self._before(self._owner.agent.name, request.op, request.args):
                outcome = anyio.from_thread.run(
                    self._serve, peer, request, deadline, token=self._token
                )
        except (anyio.RunFinishedError, concurrent.futures.CancelledError):
            # the owner stopped, or the call this request serves was given up
            raise TransportError(f"{self._owner.agent.name} stopped") from None
        if isinstance(outcome, PlanfenceError):
            raise outcome
        self.answered += 1
        return cast(dict[str, Any], unpack(pack(outcome)))

    def _peer(self, identity: Identity) -> Agent:
        for agent in self._owner.roster.agents:
            if agent.name == identity.name and agent.public_key == identity.public_key:
                return agent
        raise HandshakeError(
            f"handshake with {self._owner.agent.name} failed: {identity.name!r} is not in "
            "its roster with this key"
        )

    async def _serve(
        self, peer: Agent, request: Request, deadline: float
    ) -> dict[str, Any] | PlanfenceError:
        """The daemon's answer to `request` (as `OwnerDaemon` gives it a session), or the
        error the caller raises; logged as the daemon logs a session's request (a `request`
        event, with `in_process`)."""
        started = time.perf_counter()
        outcome = await self._outcome(peer, request, deadline)
        said = "ok" if isinstance(outcome, dict) else "timeout"
        if isinstance(outcome, RequestError):
            said = outcome.code
        self._owner.log.write_soon(
            "request",
            peer=peer.name,
            op=request.op,
            keys=keys_of(request)[:64],
            outcome=said,
            latency_ms=round((time.perf_counter() - started) * 1000, 3),
            in_process=True,
        )
        return outcome

    async def _outcome(
        self, peer: Agent, request: Request, deadline: float
    ) -> dict[str, Any] | PlanfenceError:
        call = Call(self._owner, Connection(cast(NoiseStream, None), peer), request.req_id)
        with anyio.move_on_after(deadline - time.monotonic()):
            try:
                return await self._service.serve(call, request)
            except BadRequest as exc:
                return RequestError(exc.code, exc.message)
            except StoreError as exc:
                return RequestError(exc.code, exc.message)
            except Exception as exc:  # a bug in one request must not kill the daemon
                self._owner.log.write("error", peer=peer.name, op=request.op, reason=repr(exc))
                return RequestError("internal", "internal error")
        return TransportError("deadline passed")
