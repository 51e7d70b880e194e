"""The Noise session, sans-IO: the one set of rules every loop drives.

A `Session` is fed the bytes that arrived (`receive_data`) and asked what they mean
(`next_event`, None when it needs more bytes); what to send comes back as bytes from
`initiate`, `accept`, `send_request` and `send_message`, for the caller to write in order.
It never touches a socket, a clock or a task, so the asyncio client, the owner's door and
the hook's blocking client are each a short loop over it.

    initiator: initiate() -> bytes, then next_event() -> Established(peer_key)
    responder: next_event() -> HandshakeReceived(peer_key), then accept() -> bytes
    then:      Message, Refused, Response, Push and LargeChunk events; send_* -> bytes

Every session runs the IK handshake with empty payloads, its prologue binding the protocol
version and the cluster name. Frames are capped at HANDSHAKE_FRAME_CAP until the handshake
is done, then at MAX_FRAME; a longer length prefix is refused before its body is held. An
application message is split into chunks of at most CHUNK_DATA bytes, each one encrypted
transport message in one frame, and joined again on receipt under `max_message`.

An initiator matches responses to its requests by request id (`match_responses`, on by
default): a response answers one request sent with `send_request` (Response), or, after the
first answer to a subscription, is a Push; an answer to a request given up with `abandon` is
dropped; any other id is a protocol error. Without `match_responses` (and on a responder)
every message is a Message event.

Errors: `next_event` raises RemoteProtocolError when the peer breaks the protocol
(HandshakeError until the handshake is done, TransportError never: there is no socket); the
session is then broken and every later `next_event` raises the same error. Sending before
the handshake is done, or a message over `max_message`, raises LocalProtocolError.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any

from ..core.errors import (
    HandshakeError,
    LocalProtocolError,
    PlanfenceError,
    RemoteProtocolError,
    RequestError,
)
from .framing import (
    CHUNK_DATA,
    DEFAULT_MAX_MESSAGE,
    HANDSHAKE_FRAME_CAP,
    MAX_FRAME,
    PATTERN,
    FrameDecoder,
    MessageAssembler,
    Screen,
    encode_frame,
    iter_chunks,
    prologue,
)
from .messages import decode_response, encode_request, encode_response
from .noise import CipherState, HandshakeState


class _Event:
    """Base of the events: values compared and shown by their fields. Plain classes with
    slots, not dataclasses: making a dataclass costs about half a millisecond of CPU, paid at
    import by the hook, a fresh process before every tool call."""

    __slots__: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(
            getattr(self, name) == getattr(other, name) for name in self.__slots__
        )

    def __hash__(self) -> int:
        return hash((type(self), *(getattr(self, name) for name in self.__slots__)))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"


class HandshakeReceived(_Event):
    """Responder: the initiator's first message names its static key. Call `accept()` to
    answer it, or drop the connection to refuse the peer."""

    __slots__ = ("peer_key",)

    def __init__(self, peer_key: bytes) -> None:
        self.peer_key = peer_key


class Established(_Event):
    """Initiator: the responder answered; the session is ready for requests."""

    __slots__ = ("peer_key",)

    def __init__(self, peer_key: bytes) -> None:
        self.peer_key = peer_key


class Message(_Event):
    """A whole application message (a request to a responder, or anything unmatched)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class Refused(_Event):
    """The screen refused a message from its first chunk; the rest of it is dropped as it
    arrives, and the session goes on."""

    __slots__ = ("error",)

    def __init__(self, error: PlanfenceError) -> None:
        self.error = error


class Response(_Event):
    """The answer to the request `req_id` (sent with `send_request`)."""

    __slots__ = ("req_id", "ok", "result")

    def __init__(self, req_id: int, ok: bool, result: dict[str, Any]) -> None:
        self.req_id, self.ok, self.result = req_id, ok, result

    def outcome(self) -> dict[str, Any] | RequestError:
        """The result, or the owner's typed error as a RequestError."""
        if self.ok:
            return self.result
        return RequestError(str(self.result.get("code")), str(self.result.get("message")))


class Push(_Event):
    """A later answer to the subscription `req_id`: pushed, not asked for."""

    __slots__ = ("req_id", "result")

    def __init__(self, req_id: int, result: dict[str, Any]) -> None:
        self.req_id, self.result = req_id, result


class LargeChunk(_Event):
    """A chunk of a message longer than one chunk was taken in: `starts` with its first,
    `ends` with its last (the Message follows). A loop that bounds how many large messages
    its sessions hold at once counts with these; others ignore them."""

    __slots__ = ("starts", "ends")

    def __init__(self, starts: bool, ends: bool) -> None:
        self.starts, self.ends = starts, ends


Event = HandshakeReceived | Established | Message | Refused | Response | Push | LargeChunk

_HANDSHAKE, _ACCEPTING, _OPEN = "handshake", "accepting", "open"
HANDSHAKE_FAILED = "handshake failed: "  # what a peer's error in the handshake is prefixed with


class Session:
    """One side of a Noise session (module docstring). Not thread-safe."""

    def __init__(
        self,
        *,
        initiator: bool,
        cluster: str,
        static_private: bytes,
        remote_static: bytes | None = None,
        max_message: int = DEFAULT_MAX_MESSAGE,
        screen: Screen | None = None,
        match_responses: bool | None = None,
    ) -> None:
        """`remote_static` (the responder's X25519 key) is required of an initiator.
        `screen` judges each message longer than one chunk from its first chunk."""
        self.initiator = initiator
        self.max_message = max_message
        self.match_responses = initiator if match_responses is None else match_responses
        self.peer_key: bytes | None = None
        self._handshake: HandshakeState | None = HandshakeState(
            PATTERN, initiator, prologue(cluster), s=static_private, rs=remote_static
        )
        self._state = _HANDSHAKE
        self._decoder = FrameDecoder(HANDSHAKE_FRAME_CAP)
        self._assembler = MessageAssembler(max_message, screen)
        self._send_cipher = CipherState()
        self._receive_cipher = CipherState()
        self._events: deque[Event] = deque()
        self._error: PlanfenceError | None = None
        self._ids = itertools.count(1)
        self._pending: set[int] = set()  # requests sent, not answered
        self._subscriptions: set[int] = set()  # subscriptions whose later answers are pushes
        self._abandoned: set[int] = set()  # given up by their callers, not answered

    # -- the handshake ----------------------------------------------------------------------

    def initiate(self) -> bytes:
        """Initiator: the first handshake message, framed. Raises LocalProtocolError when
        called twice or on a responder."""
        if not self.initiator or self._handshake is None:
            raise LocalProtocolError("only an initiator starts the handshake, once")
        return encode_frame(self._handshake.write_message(b""))

    def accept(self) -> bytes:
        """Responder: accept the peer named by HandshakeReceived; returns the answer to send.
        From here on the session is open."""
        if self._state != _ACCEPTING or self._handshake is None:
            raise LocalProtocolError("accept() answers a HandshakeReceived, once")
        reply = encode_frame(self._handshake.write_message(b""))
        self._open()
        return reply

    @property
    def established(self) -> bool:
        """True once the handshake is done (and, on a responder, accepted)."""
        return self._state == _OPEN

    def _open(self) -> None:
        assert self._handshake is not None
        first, second = self._handshake.split()
        if self.initiator:
            self._send_cipher, self._receive_cipher = first, second
        else:
            self._send_cipher, self._receive_cipher = second, first
        self._handshake = None
        self._state = _OPEN
        self._decoder.max_frame = MAX_FRAME

    # -- receiving ----------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Take bytes received from the peer (any split); nothing is decoded until
        `next_event`."""
        self._decoder.feed(data)

    @property
    def assembling(self) -> bool:
        """True while the chunks of an unfinished message are held."""
        return self._assembler.assembling

    @property
    def buffered(self) -> int:
        """Bytes received and not yet decoded."""
        return self._decoder.buffered

    def next_event(self) -> Event | None:
        """The next event in the bytes received so far, or None when more are needed (or,
        on a responder, until `accept()`). Raises as the module docstring says."""
        if self._error is not None:
            raise self._error
        events = self._events
        if events:
            return events.popleft()
        try:
            while True:
                if self._state == _ACCEPTING:
                    return None
                frame = self._decoder.next_frame()
                if frame is None:
                    return None
                if self._state == _HANDSHAKE:
                    self._read_handshake(frame)
                else:
                    self._read_transport(frame)
                if events:
                    return events.popleft()
        except RemoteProtocolError as exc:
            self._error = exc if self._state == _OPEN else _handshake_error(exc)
            raise self._error from None

    def _read_handshake(self, frame: bytes) -> None:
        """Handshake frames: RemoteProtocolErrors become HandshakeErrors (their cause kept)."""
        assert self._handshake is not None
        self._handshake.read_message(frame)
        peer = self._handshake.remote_static
        if peer is None:  # IK always carries it; a guard, not a path
            raise HandshakeError("handshake did not name the peer's static key")
        self.peer_key = peer
        if self.initiator:
            self._open()
            self._events.append(Established(peer))
        else:
            self._state = _ACCEPTING
            self._events.append(HandshakeReceived(peer))

    def _read_transport(self, frame: bytes) -> None:
        assembler = self._assembler
        held = assembler.assembling
        message = assembler.add(self._receive_cipher.decrypt_with_ad(b"", frame))
        if held or message is None:  # a whole message (or a refusal) from no held chunk holds none
            holds = assembler.assembling
            if held or holds:
                self._events.append(LargeChunk(starts=not held, ends=not holds))
            if message is None:
                return
        if isinstance(message, PlanfenceError):
            self._events.append(Refused(message))
        elif self.match_responses:
            self._match(message)
        else:
            self._events.append(Message(message))

    def _match(self, data: bytes) -> None:
        response = decode_response(data)
        req_id = response.req_id
        if req_id in self._pending:
            self._pending.discard(req_id)
            if not response.ok:
                self._subscriptions.discard(req_id)
            self._events.append(Response(req_id, response.ok, response.result))
        elif req_id in self._subscriptions:
            self._events.append(Push(req_id, response.result))
        elif req_id in self._abandoned:  # late: its caller gave up
            self._abandoned.discard(req_id)
        else:
            raise RemoteProtocolError(f"response to unknown request id {req_id}")

    # -- sending ------------------------------------------------------------------------------

    def send_request(
        self, op: str, args: dict[str, Any], *, subscribe: bool = False
    ) -> tuple[int, bytes]:
        """Initiator: a new request id and the bytes of the request. With `subscribe`, the
        answers after the first to this id are Push events. Raises LocalProtocolError."""
        if not self.match_responses:
            raise LocalProtocolError("this session does not match responses to requests")
        req_id = next(self._ids)
        data = self.send_message(encode_request(req_id, op, args))
        self._pending.add(req_id)
        if subscribe:
            self._subscriptions.add(req_id)
        return req_id, data

    def abandon(self, req_id: int) -> None:
        """The caller gave up on `req_id`: its answer, if it comes, is dropped (see
        `abandoned`). Does nothing for an id already answered."""
        if req_id in self._pending:
            self._pending.discard(req_id)
            self._subscriptions.discard(req_id)
            self._abandoned.add(req_id)

    @property
    def abandoned(self) -> int:
        """Requests given up and not answered yet: a peer that leaves many is not answering."""
        return len(self._abandoned)

    @property
    def pending(self) -> int:
        """Requests sent and not answered yet."""
        return len(self._pending)

    def send_response(self, req_id: int, ok: bool, result: dict[str, Any]) -> bytes:
        """The bytes of a response (or push) to `req_id`."""
        return self.send_message(encode_response(req_id, ok, result))

    def send_message(self, data: bytes) -> bytes:
        """The frames of one application message, encrypted in order. Raises
        LocalProtocolError before the handshake is done or when `data` is over
        `max_message` (then nothing was encrypted: the session can go on)."""
        if self._state != _OPEN:
            raise LocalProtocolError("the handshake is not done: nothing can be sent yet")
        if len(data) <= CHUNK_DATA and len(data) <= self.max_message:  # one chunk: LAST
            frame = self._send_cipher.encrypt_with_ad(b"", b"\x00" + data)
            return len(frame).to_bytes(2, "big") + frame
        encrypt = self._send_cipher.encrypt_with_ad
        return b"".join(
            encode_frame(encrypt(b"", chunk)) for chunk in iter_chunks(data, self.max_message)
        )

    def send_chunk(self, chunk: bytes) -> bytes:
        """One frame of a chunk plaintext as given (flag byte and data), not a whole message:
        for tools that test a peer with what a correct session never sends."""
        if self._state != _OPEN:
            raise LocalProtocolError("the handshake is not done: nothing can be sent yet")
        return encode_frame(self._send_cipher.encrypt_with_ad(b"", chunk))


def _handshake_error(exc: RemoteProtocolError) -> HandshakeError:
    """`exc`, raised during a handshake, as the HandshakeError it stands for."""
    if isinstance(exc, HandshakeError):
        return exc
    return HandshakeError(f"{HANDSHAKE_FAILED}{exc}")
