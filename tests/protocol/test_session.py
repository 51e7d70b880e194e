"""The sans-IO Noise session: two Session objects handed each other's bytes, no socket."""

from __future__ import annotations

import pytest
from nacl.bindings import crypto_scalarmult_base

from planfence_net.core.errors import (
    HandshakeError,
    LocalProtocolError,
    PlanfenceError,
    RemoteProtocolError,
    RequestError,
)
from planfence_net.protocol.framing import CHUNK_DATA, HANDSHAKE_FRAME_CAP, MAX_FRAME
from planfence_net.protocol.messages import encode_request
from planfence_net.protocol.session import (
    Established,
    Event,
    HandshakeReceived,
    LargeChunk,
    Message,
    Push,
    Refused,
    Response,
    Session,
)

CLIENT, OWNER = bytes(range(1, 33)), bytes(range(33, 65))


def client(**options: object) -> Session:
    return Session(
        initiator=True,
        cluster="t",
        static_private=CLIENT,
        remote_static=crypto_scalarmult_base(OWNER),
        **options,  # type: ignore[arg-type]
    )


def owner(**options: object) -> Session:
    return Session(initiator=False, cluster="t", static_private=OWNER, **options)  # type: ignore[arg-type]


def events(session: Session, data: bytes = b"") -> list[Event]:
    """Feed `data`, then every event it makes."""
    session.receive_data(data)
    found = []
    while (event := session.next_event()) is not None:
        found.append(event)
    return found


def joined(**owner_options: object) -> tuple[Session, Session]:
    """(client, owner) after the handshake."""
    c, o = client(), owner(**owner_options)
    assert events(o, c.initiate()) == [HandshakeReceived(crypto_scalarmult_base(CLIENT))]
    assert events(c, o.accept()) == [Established(crypto_scalarmult_base(OWNER))]
    return c, o


def test_handshake_opens_both_sides_with_each_others_keys() -> None:
    c, o = client(), owner()
    first = c.initiate()
    assert len(first) == 2 + 96 and not c.established
    o.receive_data(first[:50])
    assert o.next_event() is None  # half a frame
    assert events(o, first[50:]) == [HandshakeReceived(crypto_scalarmult_base(CLIENT))]
    assert not o.established
    with pytest.raises(LocalProtocolError, match="handshake is not done"):
        o.send_message(b"too early")
    reply = o.accept()
    assert len(reply) == 2 + 48 and o.established
    assert events(c, reply) == [Established(crypto_scalarmult_base(OWNER))]
    assert c.established and c.peer_key == crypto_scalarmult_base(OWNER)
    assert events(o, c.send_message(b"hello")) == [Message(b"hello")]
    with pytest.raises(LocalProtocolError):
        o.accept()


def test_a_responder_reads_nothing_more_until_it_accepts() -> None:
    c, o = client(), owner()
    o.receive_data(c.initiate() + b"\x00\x05junk!")
    assert isinstance(o.next_event(), HandshakeReceived)
    assert o.next_event() is None  # the junk waits behind the decision
    assert o.buffered == 7


def test_a_wrong_key_or_cluster_fails_the_handshake() -> None:
    stranger = Session(
        initiator=True,
        cluster="t",
        static_private=CLIENT,
        remote_static=crypto_scalarmult_base(CLIENT),  # not the owner's key
    )
    with pytest.raises(HandshakeError, match="decryption failed"):
        events(owner(), stranger.initiate())
    other_cluster = Session(
        initiator=True,
        cluster="u",
        static_private=CLIENT,
        remote_static=crypto_scalarmult_base(OWNER),
    )
    with pytest.raises(HandshakeError, match="decryption failed"):
        events(owner(), other_cluster.initiate())


def test_frames_are_capped_before_the_handshake_and_not_after() -> None:
    o = owner()
    o.receive_data((HANDSHAKE_FRAME_CAP + 1).to_bytes(2, "big"))  # the prefix alone
    with pytest.raises(HandshakeError) as raised:
        o.next_event()
    assert str(raised.value) == "handshake failed: frame of 257 bytes exceeds the limit of 256"
    with pytest.raises(HandshakeError) as again:
        o.next_event()  # broken for good
    assert again.value is raised.value
    c, o = joined()
    big = bytes(range(256)) * 40  # one frame of 10,257 bytes: over the handshake cap
    assert events(o, c.send_message(big)) == [Message(big)]


def test_pipelined_requests_are_matched_by_id_whatever_the_order_of_answers() -> None:
    c, o = joined()
    sent = [c.send_request("ping", {"n": n}) for n in range(3)]
    assert [req_id for req_id, _ in sent] == [1, 2, 3] and c.pending == 3
    received = events(o, b"".join(data for _, data in sent))
    assert received == [Message(encode_request(i + 1, "ping", {"n": i})) for i in range(3)]
    answers = o.send_response(3, True, {"n": 2}) + o.send_response(1, True, {"n": 0})
    answers += o.send_response(2, False, {"code": "bad_request", "message": "no"})
    got = events(c, answers)
    assert got == [
        Response(3, True, {"n": 2}),
        Response(1, True, {"n": 0}),
        Response(2, False, {"code": "bad_request", "message": "no"}),
    ]
    refused = got[2].outcome()  # type: ignore[union-attr]
    assert isinstance(refused, RequestError) and (refused.code, refused.message) == (
        "bad_request",
        "no",
    )
    assert c.pending == 0


def test_an_answer_to_no_request_is_a_protocol_error_and_a_late_one_is_dropped() -> None:
    c, o = joined()
    req_id, data = c.send_request("ping", {})
    events(o, data)
    c.abandon(req_id)
    assert (c.pending, c.abandoned) == (0, 1)
    assert events(c, o.send_response(req_id, True, {})) == []  # late: dropped
    assert c.abandoned == 0
    with pytest.raises(RemoteProtocolError) as raised:
        events(c, o.send_response(req_id, True, {}))  # twice: no request has that id
    assert str(raised.value) == "response to unknown request id 1"
    with pytest.raises(RemoteProtocolError) as again:
        c.next_event()
    assert again.value is raised.value


def test_pushes_follow_the_first_answer_to_a_subscription() -> None:
    c, o = joined()
    sub, data = c.send_request("subscribe", {"keys": ["req/a"]}, subscribe=True)
    failed, more = c.send_request("subscribe", {"keys": [1]}, subscribe=True)
    assert len(events(o, data + more)) == 2
    got = events(
        c,
        o.send_response(sub, True, {})
        + o.send_response(sub, True, {"heads": [["req/a", b"h", 1]]})
        + o.send_response(failed, False, {"code": "bad_request", "message": "keys"}),
    )
    assert got == [
        Response(sub, True, {}),
        Push(sub, {"heads": [["req/a", b"h", 1]]}),
        Response(failed, False, {"code": "bad_request", "message": "keys"}),
    ]
    with pytest.raises(RemoteProtocolError, match="unknown request id 2"):
        events(c, o.send_response(failed, True, {}))  # a refused subscription pushes nothing


def test_a_large_message_arrives_whole_in_any_split_with_its_chunks_counted() -> None:
    c, o = joined()
    big = bytes(range(256)) * (3 * CHUNK_DATA // 256 + 1)  # four chunks
    data = c.send_message(big)
    assert len(data) == 4 * 2 + len(big) + 4 * (1 + 16)
    cuts = [0, 1, 2, 65000, 65537, 150001, len(data) - 1, len(data)]
    got: list[Event] = []
    for start, end in zip(cuts, cuts[1:], strict=False):
        got += events(o, data[start:end])
    assert got == [
        LargeChunk(starts=True, ends=False),
        LargeChunk(starts=False, ends=False),
        LargeChunk(starts=False, ends=False),
        LargeChunk(starts=False, ends=True),
        Message(big),
    ]
    assert not o.assembling and o.buffered == 0
    assert events(o, c.send_message(b"small")) == [Message(b"small")]  # no LargeChunk


def test_the_screen_refuses_a_message_from_its_first_chunk() -> None:
    def screen(first: bytes) -> PlanfenceError | None:
        return RemoteProtocolError("refused") if first.startswith(b"bad") else None

    c, o = joined(screen=screen)
    bad = b"bad" + bytes(2 * CHUNK_DATA)
    data = c.send_message(bad)
    o.receive_data(data)
    refusal = o.next_event()
    assert isinstance(refusal, Refused) and str(refusal.error) == "refused"
    assert events(o) == []  # the rest is dropped, never held
    assert events(o, c.send_message(b"bad but short")) == [Message(b"bad but short")]


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda c: c.send_chunk(b"\x07abc"), "chunk without a valid continuation flag"),
        (lambda c: c.send_chunk(b""), "chunk without a valid continuation flag"),
        (lambda c: c.send_chunk(b"\x01" + bytes(600)), "message exceeds the limit of 1000 bytes"),
        (
            lambda c: c.send_message(b"x")[:-1] + b"\x00",
            "decryption failed: forged, corrupted or out of order",
        ),
        (lambda c: b"\x00\x05short", "ciphertext of 5 bytes is shorter than the tag"),
    ],
)
def test_malformed_frames_break_the_session(make: object, error: str) -> None:
    c, o = joined(max_message=1000)
    o.receive_data(c.send_chunk(b"\x01" + bytes(500)) if "limit" in error else b"")
    with pytest.raises(RemoteProtocolError) as raised:
        events(o, make(c))  # type: ignore[operator]
    assert str(raised.value) == error and not isinstance(raised.value, HandshakeError)


def test_a_malformed_response_is_a_protocol_error() -> None:
    c, o = joined()
    c.send_request("ping", {})
    with pytest.raises(RemoteProtocolError, match="a response is"):
        events(c, o.send_message(b"\x93\x01\x02\x03"))


def test_limits_on_sending() -> None:
    c, o = joined(max_message=16)
    with pytest.raises(LocalProtocolError, match="message of 17 bytes exceeds 16"):
        o.send_message(bytes(17))
    req_id, _ = c.send_request("ping", {})
    assert events(c, o.send_response(req_id, True, {})) == [Response(1, True, {})]  # no nonce lost
    whole = c.send_message(bytes(2 * MAX_FRAME))
    assert len(whole) == 2 * MAX_FRAME + 3 * (2 + 1 + 16)  # three frames, none too long
    raw = Session(
        initiator=True,
        cluster="t",
        static_private=CLIENT,
        remote_static=crypto_scalarmult_base(OWNER),
        match_responses=False,
    )
    with pytest.raises(LocalProtocolError, match="does not match responses"):
        raw.send_request("ping", {})
    with pytest.raises(LocalProtocolError, match="only an initiator"):
        o.initiate()
