"""The owner daemon: serves one agent's records over Noise sessions (docs/ARCHITECTURE.md).

`OwnerDaemon` holds one owner's state and runs it: `serve` listens, hands accepted
connections to the door (door.py: caps, EMFILE backoff, handshakes), and on a signal stops
accepting and shuts down once idle. Each session's request loop and the replies it sends are
`Sessions` (sessions.py), how pushes reach subscribers is `Pushes` (pushes.py); `OwnerDaemon`
inherits both. What it serves is a `Service` (service.py: one table of operations) it is
given; the ordinary owner's is `ops.owner_operations()`. Opening the store and log around
it is `run_owner` (startup.py).
"""

from __future__ import annotations

import os
import signal
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from ..core.errors import StoreError
from ..core.identity import Identity
from ..core.roster import Roster
from ..protocol.messages import BadRequest, Request, encode_error, encode_response
from ..protocol.requestread import Schema, screen_request
from .door import Door
from .limits import Limits
from .logs import EventLog
from .now import AnswersNow
from .ops import keys_of, owner_operations
from .replies import ByteBudget
from .service import Call, Connection, Service
from .sessions import Sessions
from .store import Store

SHUTDOWN_GRACE = 10.0


class OwnerDaemon(Sessions):
    """Serves `identity`'s records through `service` (default: an ordinary owner's
    operations). `run_owner` builds one and runs `serve`.

    `listen` overrides the roster address to bind (e.g. 0.0.0.0 inside a container). It is
    the `Owner` its operations see (service.py).
    """

    def __init__(
        self,
        roster: Roster,
        identity: Identity,
        store: Store,
        log: EventLog,
        *,
        max_message: int,
        listen: tuple[str, int] | None = None,
        limits: Limits = Limits(),
        service: Service | None = None,
    ) -> None:
        self.service = service if service is not None else owner_operations()
        self.schema: Schema = self.service.schema  # the arguments each op's requests are read with
        self.roster = roster
        self.identity = identity
        self.agent = roster.agent(identity.name)
        self.store = store
        self.log = log
        self.max_message = max_message
        self.connections: set[Connection] = set()
        self.in_flight = 0
        self.requests_served = 0
        self.listen = listen
        self.limits = limits.for_descriptors()
        self.door = Door(
            roster,
            identity,
            log,
            self.limits,
            max_message,
            self.serve_peer,
            lambda prefix: screen_request(prefix, self.schema),
        )
        self.sessions_by_peer: dict[str, int] = {}
        self.dropped_subscribers = 0
        self.replies = ByteBudget(self.limits.reply_budget)
        self.requests = ByteBudget(self.limits.request_budget)
        self.unread_replies = 0  # sessions closed because a reply waited too long
        self._idle: anyio.Event | None = None  # made by wait_idle: not one per request
        self._synced_changed = anyio.Event()  # an ack arrived or a session left
        self.put_if_lock = anyio.Lock()
        self.now = AnswersNow(self, self.schema, self.service)
        self.init_pushes()
        store.on_commit.append(self.push_heads)

    async def serve(self, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen on the roster address, report the bound port, serve until cancelled.

        On SIGTERM or SIGINT: stop accepting, let in-flight requests finish (bounded by
        SHUTDOWN_GRACE), then return.
        """
        host, port = self.listen or (self.agent.host, self.agent.port)
        listener = await anyio.create_tcp_listener(
            local_host=host, local_port=port, reuse_port=False
        )
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        self.log.write("listening", address=f"{host}:{port}", pid=os.getpid())
        try:
            async with anyio.create_task_group() as tg:
                accepting = anyio.CancelScope()
                tg.start_soon(self.store.run_committer)
                tg.start_soon(self.run_pusher)
                tg.start_soon(self._wait_signal, tg.cancel_scope, accepting)
                tg.start_soon(self._accept, listener, tg, accepting)
                task_status.started(port)
        finally:
            with anyio.CancelScope(shield=True):
                await listener.aclose()
            self.log.write("stopped", requests=self.requests_served)

    async def _accept(self, listener: Any, tg: TaskGroup, accepting: anyio.CancelScope) -> None:
        with accepting:
            await self.door.serve(listener, tg)

    async def _wait_signal(self, scope: anyio.CancelScope, accepting: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                self.log.write(
                    "shutdown", signal=signal.Signals(signum).name, in_flight=self.in_flight
                )
                accepting.cancel()  # no new sessions; open ones finish what is in flight
                with anyio.move_on_after(SHUTDOWN_GRACE):
                    await self.wait_idle()
                scope.cancel()
                return

    async def _reply(
        self, connection: Connection, request: Request | BadRequest
    ) -> tuple[bytes, str, list[str], str]:
        """Serve a decoded request and encode the answer: (reply, op, keys, outcome)."""
        op, keys, req_id = "?", [], None
        try:
            if isinstance(request, BadRequest):
                raise request
            op, req_id, keys = request.op, request.req_id, keys_of(request)
            result = await self.service.serve(Call(self, connection, request.req_id), request)
            return encode_response(request.req_id, True, result), op, keys, "ok"
        except BadRequest as exc:
            req_id = exc.req_id if req_id is None else req_id
            return encode_error(req_id, exc.code, exc.message, exc.item), op, keys, exc.code
        except StoreError as exc:  # a damaged record or a full disk: say so, keep serving
            self.log.write("error", peer=connection.peer.name, op=op, reason=exc.message)
            return encode_error(req_id, exc.code, exc.message), op, keys, exc.code
        except Exception as exc:  # a bug in one request must not kill the daemon
            self.log.write("error", peer=connection.peer.name, op=op, reason=repr(exc))
            return encode_error(req_id, "internal", "internal error"), op, keys, "internal"

    def sync_progress(self) -> None:
        """Wake every `synced` waiting: an ack arrived or a session left."""
        self._synced_changed.set()
        self._synced_changed = anyio.Event()

    async def wait_sync_progress(self) -> None:
        """Wait for the next `sync_progress`."""
        await self._synced_changed.wait()

    def statistics(self) -> dict[str, Any]:
        """The daemon's counters, its door's, log's, store's and its service's: what `stats`
        answers."""
        return {
            "agent": self.agent.name,
            "sessions": len(self.connections),
            "in_flight": self.in_flight,
            "requests_served": self.requests_served,
            **self.door.statistics(),
            "dropped_subscribers": self.dropped_subscribers,
            "unread_replies": self.unread_replies,
            "reply_bytes_held": self.replies.used,
            "request_bytes_held": self.requests.used,
            **self.log.statistics(),
            **self.store.statistics(),
            **self.service.statistics(),
        }
