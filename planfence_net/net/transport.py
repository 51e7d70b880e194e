"""Noise sessions over TCP: the asyncio loop around the sans-IO session.

A `NoiseStream` joins a `protocol.session.Session` (the rules: handshake, caps, chunks,
req-ids) to a `Wire` (the socket): received bytes are fed to the session in the socket's
callback and its events handled there, and a sent message is encrypted and handed to the
socket in one synchronous step. So a request costs no task, lock or extra event-loop turn,
and ciphertexts leave in nonce order without a lock. An initiator's wire hands what one
event-loop round wrote to the socket in one write at the round's end (`Wire.coalesce`); a
responder's answers to one read leave in one write (`set_answer_now`). A session's reader either pulls
messages (`receive`, the owner) or takes each event as it arrives (`set_receiver`, the
client, which resolves the waiting request at once). This is where socket errors become
planfence errors (TransportError, RemoteProtocolError, HandshakeError).
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from collections.abc import Callable
from typing import Any

from ..core.errors import (
    HandshakeError,
    LocalProtocolError,
    PlanfenceError,
    RemoteProtocolError,
    TransportError,
)
from ..protocol.framing import DEFAULT_MAX_MESSAGE, PATTERN, PROTOCOL_VERSION, prologue
from ..protocol.session import (
    Event,
    HandshakeReceived,
    LargeChunk,
    Message,
    Push,
    Refused,
    Response,
    Session,
)
from .slots import MessageSlots
from .socketwire import CloseHandler, Traffic, Wire, attach_wire, connect_wire

READ_AHEAD = 256 * 1024  # received messages nobody has taken yet before we stop reading

Received = Message | Refused | Response | Push  # what a reader is handed
_RECEIVED = (Message, Refused, Response, Push)
EventHandler = Callable[[Received], None]
AcceptPeer = Callable[[bytes], bool]
AnswerNow = Callable[[bytes], bool]  # True: the message was answered in the callback


class NoiseStream:
    """Whole application messages over an authenticated, encrypted TCP connection. Made by
    `connect` (initiator) or `accept` (responder)."""

    def __init__(
        self,
        session: Session,
        accept_peer: AcceptPeer = lambda key: True,
        slots: MessageSlots | None = None,
    ) -> None:
        self._session = session
        self._accept_peer = accept_peer
        self._slots = slots
        self._loop = asyncio.get_running_loop()
        self.traffic = Traffic()
        self._wire = Wire(self._on_data, self.traffic)
        self._wire.on_close = self._wire_closed
        self._received: deque[Received] = deque()
        self._queued = 0
        self._paused = False
        self._on_event: EventHandler | None = None
        self._answer_now: AnswerNow | None = None
        self._stalled: Callable[[int], None] | None = None
        self._closed: asyncio.Future[PlanfenceError] = self._loop.create_future()
        self._chunk_received = False  # a transport chunk decrypted: the peer holds the keys
        self.max_message = session.max_message

    @property
    def peer_key(self) -> bytes:
        """The peer's static key (known once the handshake is done)."""
        assert self._session.peer_key is not None
        return self._session.peer_key

    async def wait_established(self) -> None:
        """Wait until the handshake is done. Raises HandshakeError (a refused peer or a bad
        handshake) or TransportError. The caller sets the deadline (anyio.fail_after)."""
        while not self._session.established:
            if self._wire.error is not None:
                raise self._wire.error
            await self._wire.wait_readable()

    async def wait_first_chunk(self) -> None:
        """Wait until the peer's first transport chunk decrypts: the first chunk of a
        message, a whole message, or one the screen refused. Only a peer holding the
        session's keys can send one, so it proves the session, however long the rest of a
        large message takes on a slow link. Raises TransportError (or the error that ended
        the session) when none came. The caller sets the deadline (anyio.fail_after)."""
        while not self._chunk_received:
            if self._wire.error is not None:
                raise self._wire.error
            await self._wire.wait_readable()

    # -- receiving: the socket's callback feeds the session and handles its events ---------

    def _on_data(self, data: bytes) -> None:
        session = self._session
        wire = self._wire
        handshaking = not session.established
        proven = self._chunk_received
        session.receive_data(data)
        if self._answer_now is None:
            while wire.error is None and (event := session.next_event()) is not None:
                self._handle(event)
        else:  # every answer to what this read delivered leaves in one write
            wire.cork()
            try:
                while wire.error is None and (event := session.next_event()) is not None:
                    self._handle(event)
            finally:
                written = wire.uncork()
            if written and not wire.writable and self._stalled is not None:
                self._stalled(written)
        if self._received or handshaking or self._chunk_received != proven:
            wire.wake()  # a waiter has something new to look at

    def _handle(self, event: Event) -> None:
        if isinstance(event, (*_RECEIVED, LargeChunk)):
            self._chunk_received = True
        if isinstance(event, _RECEIVED):
            self.traffic.messages_received += 1
            if self._on_event is not None:
                self._deliver(event)
            elif (
                self._answer_now is None
                or self._received
                or not isinstance(event, Message)
                or not self._answer_now(event.data)
            ):
                self._queue(event)
        elif isinstance(event, LargeChunk):
            if self._slots is not None:
                self._count_slot(event)
        elif isinstance(event, HandshakeReceived):
            if not self._accept_peer(event.peer_key):
                raise HandshakeError("peer's static key is not in the roster")
            self._wire.write(self._session.accept())
        elif not self._accept_peer(event.peer_key):  # Established
            raise HandshakeError("owner's static key is not in the roster")

    def _queue(self, event: Received) -> None:
        self._received.append(event)
        if not isinstance(event, Message):
            return
        self._queued += len(event.data)
        if not self._paused and self._queued > READ_AHEAD:
            self._paused = True  # the reader is behind: the peer meets TCP backpressure
            self._wire.hold("backlog")

    def _deliver(self, event: Received) -> None:
        assert self._on_event is not None
        if isinstance(event, Refused):
            raise event.error  # a receiver takes no refusals: the session ends with it
        try:
            self._on_event(event)
        except PlanfenceError as exc:
            self._wire.fail(exc)

    def set_receiver(self, on_event: EventHandler, on_close: CloseHandler) -> None:
        """Hand every message (Message, or Response and Push when the session matches
        responses) to `on_event` as it arrives, in the socket's callback, and the error
        that ends the session to `on_close`, once. A PlanfenceError from `on_event`, or a
        message the screen refused, ends the session with it."""
        self._on_event = on_event
        self._closed.add_done_callback(lambda done: on_close(done.result()))
        while self._received and self._wire.error is None:
            event = self._received.popleft()
            try:
                self._deliver(event)
            except PlanfenceError as exc:
                self._wire.fail(exc)

    def set_answer_now(
        self, answer_now: AnswerNow | None, stalled: Callable[[int], None] | None = None
    ) -> None:
        """Offer each whole message to `answer_now` in the socket's callback, before it is
        queued for `receive`, while no earlier message waits there (so messages it declines
        keep their order): True means it answered the message and it is not queued. The
        owner answers requests that need no waiting this way, without waking its session's
        task. What it writes meanwhile is held and handed to the socket in one write when
        the callback has read every message the bytes held (`Wire.cork`); when the socket's
        send buffer is then over its high-water mark, `stalled(size)` is called with the
        size of that write. A PlanfenceError from it ends the session with that error."""
        self._answer_now = answer_now
        self._stalled = stalled if answer_now is not None else None

    async def receive_message(self) -> bytes:
        """Receive one whole application message.

        Raises TransportError when the stream ends or breaks, RemoteProtocolError when the
        peer sends an oversize or undecryptable frame, and the screen's error in place of a
        message it refused.
        """
        message = await self.receive()
        if isinstance(message, PlanfenceError):
            raise message
        return message

    async def receive(self) -> bytes | PlanfenceError:
        """The next whole application message, or the screen's error in place of a message
        it refused (the session goes on). Raises as `receive_message` does otherwise."""
        while not self._received:
            if self._wire.error is not None:
                raise self._wire.error
            await self._wire.wait_readable()
        event = self._received.popleft()
        if isinstance(event, Refused):
            return event.error
        if not isinstance(event, Message):
            raise LocalProtocolError("this session matches responses: use set_receiver")
        self._queued -= len(event.data)
        if self._paused and self._queued < READ_AHEAD // 2:
            self._paused = False
            self._wire.release("backlog")
        return event.data

    async def wait_closed(self) -> PlanfenceError:
        """Wait until the session ends; returns the error that ended it."""
        return await asyncio.shield(self._closed)

    # -- slots for large messages -------------------------------------------------------------

    def _count_slot(self, chunk: LargeChunk) -> None:
        """Take a slot when a large message starts (or stop reading until one is given),
        give it back when the message is whole."""
        assert self._slots is not None
        now = self._loop.time()
        if chunk.starts:
            if not self._slots.take(self, now, self._slot_granted):
                self._wire.hold("slot")
                self._loop.call_later(self._slots.stall, self._close_stalled)
        elif chunk.ends:
            self._slots.give_back(self, now)
            self._wire.release("slot")
        else:
            self._slots.touch(self, now)

    def _slot_granted(self) -> None:
        self._wire.release("slot")

    def _close_stalled(self) -> None:
        """While this session waits for a slot, close the holders that stalled."""
        assert self._slots is not None
        if self._wire.error is not None or not self._slots.waiting(self):
            return
        for holder in self._slots.stalled(self._loop.time()):
            assert isinstance(holder, NoiseStream)
            if not holder._wire.reading:  # we paused it (backlog, turn): not its peer's stall
                continue
            self._slots.evicted += 1
            holder._wire.fail(
                RemoteProtocolError(
                    f"no chunk for {self._slots.stall:g} s in the middle of a message while "
                    f"other sessions waited to send theirs"
                )
            )
        if self._slots.waiting(self):
            self._loop.call_later(self._slots.stall, self._close_stalled)

    def _wire_closed(self, exc: PlanfenceError) -> None:
        if self._slots is not None:
            self._slots.give_back(self, self._loop.time())
        if not self._closed.done():
            self._closed.set_result(exc)

    # -- sending ------------------------------------------------------------------------------

    @property
    def send_broken(self) -> bool:
        """True once the session can no longer send (it failed or was closed). A message is
        encrypted and handed to the socket in one step, so a cancelled send never leaves
        the peer's nonce behind ours."""
        return self._wire.error is not None

    async def send_message(self, data: bytes) -> None:
        """Send one application message (split into chunks). Raises TransportError.

        Returns without waiting unless the socket's send buffer is full (backpressure).
        """
        self.write_message(data)
        await self._wire.wait_writable()

    def write_message(self, data: bytes) -> None:
        """Encrypt one application message and hand it to the socket, without waiting even
        when its send buffer is full (check `writable`). Raises TransportError."""
        self._wire.write(self._session.send_message(data))
        self.traffic.messages_sent += 1

    def write_messages(self, messages: list[bytes]) -> None:
        """`write_message` for several messages in one write to the socket (an owner's
        pushes to one session's subscriptions: one system call, not one per push)."""
        self._wire.write(b"".join(self._session.send_message(data) for data in messages))
        self.traffic.messages_sent += len(messages)

    def write_request(self, op: str, args: dict[str, Any], *, subscribe: bool = False) -> int:
        """Send a request without waiting; returns its id (its answer comes as a Response,
        a subscription's later ones as Push events). Raises TransportError."""
        if self._wire.error is not None:
            raise self._wire.error
        req_id, data = self._session.send_request(op, args, subscribe=subscribe)
        self._wire.write(data)
        self.traffic.messages_sent += 1
        return req_id

    def prepare_request(
        self, op: str, args: dict[str, Any], *, subscribe: bool = False
    ) -> tuple[int, bytes]:
        """`write_request` in two steps: the request's id and its encrypted bytes, which
        must go to `write_prepared` before anything else is sent on this stream (they hold
        the next nonce). Lets a caller encrypt requests to several owners before the first
        write wakes one of them. Raises TransportError."""
        if self._wire.error is not None:
            raise self._wire.error
        return self._session.send_request(op, args, subscribe=subscribe)

    def write_prepared(self, data: bytes) -> None:
        """Hand a `prepare_request`'s bytes to the socket. Raises TransportError."""
        self._wire.write(data)
        self.traffic.messages_sent += 1

    def abandon(self, req_id: int) -> int:
        """Give up on the answer to `req_id` (it is dropped if it comes); returns how many
        given-up requests are still unanswered."""
        self._session.abandon(req_id)
        return self._session.abandoned

    @property
    def requests(self) -> tuple[int, int]:
        """(pending, abandoned): requests sent and not answered, and of those given up."""
        return self._session.pending, self._session.abandoned

    def write_chunk(self, chunk: bytes) -> None:
        """Send one chunk plaintext as it is, not a whole message: for tools that test a
        peer with what a correct session never sends."""
        self._wire.write(self._session.send_chunk(chunk))

    @property
    def writable(self) -> bool:
        """False while the socket's send buffer is over its high-water mark."""
        return self._wire.writable

    async def wait_writable(self) -> None:
        """Wait until the socket's send buffer drains below its high-water mark."""
        await self._wire.wait_writable()

    async def aclose(self) -> None:
        """Close the connection (unsent data is dropped, like an abort)."""
        self.close()

    def close(self) -> None:
        """`aclose` without waiting (it never waits): for callbacks that cannot await."""
        self._wire.fail(TransportError("session closed"))

    def statistics(self) -> dict[str, Any]:
        t = self.traffic
        return {
            "bytes_sent": t.bytes_sent,
            "bytes_received": t.bytes_received,
            "messages_sent": t.messages_sent,
            "messages_received": t.messages_received,
        }


async def connect(
    host: str,
    port: int,
    *,
    cluster: str,
    static_private: bytes,
    remote_static: bytes,
    accept_peer: AcceptPeer = lambda key: True,
    max_message: int = DEFAULT_MAX_MESSAGE,
    match_responses: bool = True,
) -> NoiseStream:
    """Open a TCP connection and run the initiator handshake with the owner whose static
    key is `remote_static`. With `match_responses` (see protocol.session), answers come as
    Response and Push events to `set_receiver`; without, every message is received as it
    is. The caller sets the deadline. Raises TransportError or HandshakeError; never leaves
    the socket open on failure."""
    session = Session(
        initiator=True,
        cluster=cluster,
        static_private=static_private,
        remote_static=remote_static,
        match_responses=match_responses,
        max_message=max_message,
    )
    stream = NoiseStream(session, accept_peer)
    # requests written in one event-loop round leave together: a pool shared by several
    # executors sends one write per owner for all of them, which the owner reads at once
    stream._wire.coalesce = True
    await connect_wire(host, port, stream._wire)
    try:
        stream._wire.write(session.initiate())
        await stream.wait_established()
    except BaseException:
        stream.close()
        raise
    return stream


async def accept(
    sock: socket.socket, session: Session, accept_peer: AcceptPeer, slots: MessageSlots | None
) -> NoiseStream:
    """Run the responder's handshake on an accepted socket; `accept_peer(key)` decides
    whether the peer may connect. A message longer than one chunk is received only while
    it holds one of `slots` (shared by an owner's sessions). The caller sets the deadline.
    Raises HandshakeError or TransportError; never leaves the socket open on failure."""
    stream = NoiseStream(session, accept_peer, slots)
    await attach_wire(sock, stream._wire)
    try:
        await stream.wait_established()
    except BaseException:
        stream.close()
        raise
    return stream


__all__ = [
    "NoiseStream",
    "Traffic",
    "accept",
    "connect",
    "prologue",
    "PlanfenceError",
    "PATTERN",
    "PROTOCOL_VERSION",
]
