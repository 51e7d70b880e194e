"""Requests an owner answers in the socket's callback, and the answers it may give again.

A request whose row can answer without waiting (`service.answers_now`) is answered where
its bytes arrived, without waking the session's task: decoded, served, encoded and
encrypted in one step, with the same log line and counts as the session's loop; the answers
to every request one read delivered leave in one write (`NoiseStream.set_answer_now`). A row
marked `repeatable` answers from the request's args and the store's committed records alone
(not the session, its peer or the time), so its answer is kept by the request's bytes after
the req_id and given again to the same bytes, with the asker's req_id, while the store
commits nothing (`Store.commits` is counted before a commit changes any head). Executors
ask the same heads again for every decision of a plan: a repeated heads is one lookup.
A request whose parse or row raises BadRequest (its typed error) is left to the session's
loop, which sends that error; any other exception is a bug and is not caught here. The
response's envelope around the kept bytes is `protocol.messages.encode_ok_response`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..protocol.messages import BadRequest, Request, encode_ok_response, pack, split_req_id
from ..protocol.requestread import Schema, decode_request
from .ops import keys_of
from .service import Call, Connection, Service

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from .daemon import OwnerDaemon

REPEAT_ENTRIES = 128  # answers kept (the set is emptied at every commit)
REPEAT_MAX = 8 * 1024  # bytes of the largest request whose answer is kept


class AnswersNow:
    """`answer(connection, task_group, data)` for one daemon (module docstring)."""

    def __init__(self, daemon: OwnerDaemon, schema: Schema, service: Service) -> None:
        self._daemon = daemon
        self._schema = schema
        self._service = service
        self._repeats: dict[bytes, tuple[bytes, str]] = {}  # rest -> (body, log fields)
        self._repeats_at = -1  # Store.commits when the kept answers were given
        self.repeated = 0
        # a service no row of which answers without waiting never decodes a request here
        self._any = any(op.now is not None for op in service.operations.values())
        # nor is a request of an op whose row cannot (a put_many of 4096 items: ~20 ms)
        self._later = {name for name, op in service.operations.items() if op.now is None}

    def answer(self, connection: Connection, data: bytes) -> bool:
        """Answer `data` now and return True, or return False to leave it to the session's
        loop (which reads it again): when the socket would make the reply wait, or the
        request is not one a row answers without waiting."""
        daemon = self._daemon
        if not self._any or not connection.stream.writable:
            return False
        started = time.perf_counter()
        split = split_req_id(data)
        if split is not None and _op_of(split[1]) in self._later:
            return False
        commits = daemon.store.commits
        if commits != self._repeats_at:
            self._repeats.clear()
            self._repeats_at = commits
        if split is not None and (kept := self._repeats.get(split[1])) is not None:
            self.repeated += 1
            return self._send(connection, split[0], *kept, started)
        request = decode(data, self._schema)
        if request is None:
            return False
        operation = self._service.operations.get(request.op)
        if operation is None or operation.now is None:
            return False
        try:
            result = operation.now(
                Call(daemon, connection, request.req_id), operation.parse(request.args)
            )
        except BadRequest:  # the typed error `parse` and `now` raise: the session's loop sends it
            return False
        if result is None:
            return False
        body = pack(result)
        fields = daemon.log.request_fields(request.op, keys_of(request)[:64])
        if split is None:
            split = (pack(request.req_id), b"")
        elif operation.repeatable and len(data) <= REPEAT_MAX:
            if len(self._repeats) < REPEAT_ENTRIES:
                self._repeats[split[1]] = (body, fields)
        return self._send(connection, split[0], body, fields, started)

    def _send(
        self,
        connection: Connection,
        req_id: bytes,
        body: bytes,
        fields: str,
        started: float,
    ) -> bool:
        """Write the response [req_id, true, body] (each part already encoded) and log it
        (`fields`: the line's op and keys, rendered by `EventLog.request_fields`). The
        stream holds it until every request of the same read is answered (`stalled`)."""
        daemon = self._daemon
        connection.stream.write_message(encode_ok_response(req_id, body))
        daemon.requests_served += 1
        daemon.log.write_request_soon(
            connection.peer.name, fields, "ok", round((time.perf_counter() - started) * 1000, 3)
        )
        return True

    def stalled(self, connection: Connection, tg: TaskGroup, size: int) -> None:
        """The answers of one read (`size` bytes, one write) filled the socket's send
        buffer: they count as in flight until the peer has read them, and a peer that does
        not within `send_timeout` loses its session (`OwnerDaemon.drain`)."""
        self._daemon.in_flight += 1
        tg.start_soon(self._daemon.drain, connection, size)


def _op_of(rest: bytes) -> str | None:
    """The op of a request from the bytes after its req_id, when it is a fixstr (at most 31
    bytes, as every op's name is); None otherwise."""
    if not rest or not 0xA0 <= rest[0] <= 0xBF:
        return None
    try:
        return rest[1 : 1 + (rest[0] & 0x1F)].decode()
    except UnicodeDecodeError:
        return None


def decode(data: bytes, schema: Schema) -> Request | None:
    """The request in `data` when it reads without error (the session's loop answers the
    others, with their error)."""
    try:
        return decode_request(data, schema)
    except BadRequest:
        return None
