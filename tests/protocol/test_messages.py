"""Request and response messages, no network: shapes, argument parsers and their error codes."""

from __future__ import annotations

import hashlib
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.bindings import crypto_scalarmult_base, crypto_sign_ed25519_pk_to_curve25519
from nacl.signing import SigningKey

from planfence_net.core.errors import RemoteProtocolError
from planfence_net.core.identity import Identity
from planfence_net.core.records import make_record, record_from_wire
from planfence_net.net.transport import prologue
from planfence_net.protocol.framing import encode_frame, split_message
from planfence_net.protocol.messages import (
    MAX_IDS,
    MAX_KEY_LEN,
    MAX_KEYS,
    OPS,
    BadRequest,
    RawValue,
    Request,
    Response,
    decode_response,
    encode_error,
    encode_request,
    encode_response,
    pack,
    parse_get,
    parse_heads,
    parse_heads_short,
    parse_put,
    parse_put_many,
    parse_subscribe,
    unpack,
)
from planfence_net.protocol.noise import HandshakeState
from planfence_net.protocol.plainread import read_plain
from planfence_net.protocol.requestread import (
    INVALID,
    MAX_ARGS,
    REQUESTS,
    _RequestReader,
    decode_request,
    request_id_of,
    screen_request,
)
from support.cluster import REPO

RID = bytes(range(32))


def test_ops_and_limits() -> None:
    assert OPS == (
        "ping",
        "heads",
        "get",
        "put",
        "put_many",
        "subscribe",
        "ack",
        "synced",
        "stats",
    )
    assert (MAX_KEYS, MAX_IDS, MAX_KEY_LEN) == (4096, 4096, 512)


# -- shapes ------------------------------------------------------------------------------------


def test_request_is_a_three_element_msgpack_array() -> None:
    assert encode_request(1, "ping", {}) == bytes.fromhex("9301a470696e6780")
    data = encode_request(7, "get", {"ids": [RID]})
    assert msgpack.unpackb(data, raw=False) == [7, "get", {"ids": [RID]}]
    assert data.endswith(b"\xc4\x20" + RID)  # ids travel as bin 8 of 32 raw bytes
    assert decode_request(data) == Request(7, "get", {"ids": [RID]})


def test_response_and_error_shapes() -> None:
    assert msgpack.unpackb(encode_response(3, True, {"id": RID, "seq": 1}), raw=False) == [
        3,
        True,
        {"id": RID, "seq": 1},
    ]
    assert msgpack.unpackb(encode_error(4, "not_owner", "no"), raw=False) == [
        4,
        False,
        {"code": "not_owner", "message": "no"},
    ]
    assert msgpack.unpackb(encode_error(None, "bad_request", "x"), raw=False) == [
        -1,
        False,
        {"code": "bad_request", "message": "x"},
    ]
    assert decode_response(encode_response(3, True, {"a": 1})) == Response(3, True, {"a": 1})
    assert decode_response(encode_error(5, "c", "m")) == Response(
        5, False, {"code": "c", "message": "m"}
    )


def test_unpack_refuses_trailing_bytes_and_garbage() -> None:
    assert unpack(pack([1, b"\x00"])) == [1, b"\x00"]
    for data in (pack(1) + pack(2), b"\xc1", b"\x93\x01", b""):
        with pytest.raises(RemoteProtocolError, match="^invalid msgpack: "):
            unpack(data)


@pytest.mark.parametrize(
    "value",
    [
        {"req_id": 1},
        [1, "ping"],
        [1, "ping", {}, 4],
        [True, "ping", {}],
        ["1", "ping", {}],
        [1.0, "ping", {}],
        [1, b"ping", {}],
        [1, "ping", []],
        [1, "ping", None],
    ],
)
def test_wrong_request_shapes_are_bad_request(value: Any) -> None:
    with pytest.raises(BadRequest) as info:
        decode_request(pack(value))
    assert (info.value.code, info.value.message) == (
        "bad_request",
        "a request is [req_id: int, op: str, args: map]",
    )


@pytest.mark.parametrize(
    "data", [b"\xc1", b"\x93\x01", pack([1, "ping", {}]) + b"\x00", b"\x93\x01\xa4ping\x81\x01\x02"]
)  # last: int map key
def test_undecodable_requests_are_bad_request(data: bytes) -> None:
    with pytest.raises(BadRequest) as info:
        decode_request(data)
    assert info.value.code == "bad_request"
    assert info.value.message.startswith("invalid msgpack: ")


@pytest.mark.parametrize(
    "data, req_id",
    [
        (b"\xc1", None),
        (b"\x93\x01", 1),
        (pack([1, "ping", {}]) + b"\x00", 1),
        (b"\x93\x01\xa4ping\x81\x01\x02", 1),
        (pack([7, "heads", {"keys": [b"\xc1"]}])[:-1], 7),
    ],
)
def test_a_malformed_request_keeps_its_req_id_once_read(data: bytes, req_id: int | None) -> None:
    with pytest.raises(BadRequest) as info:
        decode_request(data)
    assert info.value.req_id == req_id


def test_the_reader_builds_only_what_the_op_uses() -> None:
    flood = b"\x90" * 1_000_000  # a million empty arrays: never built, never walked
    million = b"\xdd" + (1_000_000).to_bytes(4, "big") + flood
    assert decode_request(pack([5, "heads", {"keys": ["req/a"], "note": "x" * 5000}])) == (
        Request(5, "heads", {"keys": ["req/a"]})
    )  # an unknown scalar argument is dropped
    for data, error in [
        (
            b"\x93\x05\xa5heads\x82\xa4keys\x91\xa5req/a\xa4junk" + million,
            ("bad_request", "unknown argument 'junk': only a string, id or number is ignored", 5),
        ),
        (
            b"\x93\x06\xa3get\x81\xa3ids" + million,
            ("too_large", "at most 4096 ids per request", 6),
        ),  # refused from the array header
        (
            b"\x93\x07\xa5heads\x81\xa4keys\x91" + million,
            ("bad_request", "an array or map in 'keys' where a string, id or number belongs", 7),
        ),
        (
            b"\x93\x08\xa5heads\x81\xa4keys\xdf" + (1_000_000).to_bytes(4, "big"),
            ("bad_request", "'keys' must be an array", 8),
        ),
    ]:
        with pytest.raises(BadRequest) as info:
            decode_request(data)
        assert (info.value.code, info.value.message, info.value.req_id) == error
    # Strings longer than a key are skipped, not built, then refused by the argument check.
    request = decode_request(pack([7, "heads", {"keys": ["k" * 3000, "ok"]}]))
    assert request.args["keys"][0] is INVALID
    assert bad(parse_heads, request.args) == ("bad_request", KEY_MSG)
    with pytest.raises(BadRequest) as info:
        decode_request(pack([8, "ping", {str(i): i for i in range(65)}]))
    assert (info.value.message, info.value.req_id) == ("at most 64 arguments per request", 8)


def test_a_put_body_is_kept_as_the_bytes_sent() -> None:
    body = b"\x92\xca\x3f\xc0\x00\x00\x81\xa1b\x01"  # [float32 1.5, {"b": 1}]
    data = b"\x93\x02\xa3put\x82\xa3key\xa5req/a\xa4body" + body
    assert parse_put(decode_request(data).args) == ("req/a", "fact", [], RawValue(body))


def test_unknown_op() -> None:
    with pytest.raises(BadRequest) as info:
        decode_request(encode_request(9, "delete", {}))
    assert (info.value.code, info.value.message) == ("unknown_op", "unknown op 'delete'")


def test_request_id_of_malformed_requests() -> None:
    assert request_id_of(pack([12, "nope"])) == 12
    assert request_id_of(pack([-3, 1, 2])) == -3
    assert request_id_of(pack([-1, "ping", {}])) is None  # the owner's own: refused
    assert request_id_of(pack([True, "ping", {}])) is None
    assert request_id_of(pack({"a": 1})) is None
    assert request_id_of(pack([])) is None
    assert request_id_of(b"\xc1") is None


@pytest.mark.parametrize(
    "value",
    [
        {"a": 1},
        [1, True],
        [1, 1, {}],
        [1, True, []],
        [False, True, {}],
        [1, True, {}, 0],
    ],
)
def test_malformed_responses(value: Any) -> None:
    with pytest.raises(
        RemoteProtocolError, match=r"^a response is \[req_id: int, ok: bool, result: map\]$"
    ):
        decode_response(pack(value))


def test_undecodable_response() -> None:
    with pytest.raises(RemoteProtocolError, match="^invalid msgpack: "):
        decode_response(b"\xc1")


# -- argument parsers --------------------------------------------------------------------------


def bad(fn: Any, args: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(BadRequest) as info:
        fn(args)
    return info.value.code, info.value.message


KEYS_MSG = "'keys' must be a non-empty array of strings"
KEY_MSG = f"a key must be a string of 1 to {MAX_KEY_LEN} chars"


def test_parse_heads() -> None:
    assert parse_heads({"keys": ["req/a", "req/b"]}) == (["req/a", "req/b"], {})
    assert parse_heads({"keys": ["req/a"], "expect": {"req/a": RID}}) == (["req/a"], {"req/a": RID})
    assert parse_heads({"keys": ["k" * MAX_KEY_LEN] * MAX_KEYS})[0][0] == "k" * MAX_KEY_LEN
    # expect alone asks for its keys, in its order; with keys, extra expected keys are ignored
    assert parse_heads({"expect": {"req/b": RID, "req/a": RID}}) == (
        ["req/b", "req/a"],
        {"req/b": RID, "req/a": RID},
    )
    assert parse_heads({"keys": ["req/a"], "expect": {"req/a": RID, "req/b": RID}})[0] == ["req/a"]


@pytest.mark.parametrize(
    "args, error",
    [
        ({}, ("bad_request", KEYS_MSG)),
        ({"keys": []}, ("bad_request", KEYS_MSG)),
        ({"keys": "req/a"}, ("bad_request", KEYS_MSG)),
        ({"keys": ["k"] * (MAX_KEYS + 1)}, ("too_large", "at most 4096 keys per request")),
        ({"keys": [""]}, ("bad_request", KEY_MSG)),
        ({"keys": [1]}, ("bad_request", KEY_MSG)),
        ({"keys": ["k" * (MAX_KEY_LEN + 1)]}, ("bad_request", KEY_MSG)),
        (
            {"keys": ["req/a"], "expect": [RID]},
            ("bad_request", "'expect' must be a map of key to id"),
        ),
        (
            {"keys": ["req/a"], "expect": {"req/a": RID.hex()}},
            ("bad_request", "expect['req/a'] must be 32 raw bytes"),
        ),
        (
            {"keys": ["req/a"], "expect": {"req/a": RID[:31]}},
            ("bad_request", "expect['req/a'] must be 32 raw bytes"),
        ),
        ({"keys": ["req/a"], "expect": {"": RID}}, ("bad_request", KEY_MSG)),
        ({"expect": {}}, ("bad_request", KEYS_MSG)),
        (
            {"expect": {f"k{i}": RID for i in range(MAX_KEYS + 1)}},
            ("too_large", "at most 4096 keys per request"),
        ),
    ],
)
def test_parse_heads_errors(args: dict[str, Any], error: tuple[str, str]) -> None:
    assert bad(parse_heads, args) == error


def test_parse_heads_short() -> None:
    assert [parse_heads_short(a) for a in ({}, {"short": False}, {"short": True})] == [
        False,
        False,
        True,
    ]
    assert bad(parse_heads_short, {"short": 1}) == ("bad_request", "'short' must be true or false")


def test_parse_get() -> None:
    assert parse_get({"ids": [RID, RID]}) == [RID, RID]
    assert len(parse_get({"ids": [RID] * MAX_IDS})) == MAX_IDS


@pytest.mark.parametrize(
    "args, error",
    [
        ({}, ("bad_request", "'ids' must be a non-empty array of ids")),
        ({"ids": []}, ("bad_request", "'ids' must be a non-empty array of ids")),
        ({"ids": RID}, ("bad_request", "'ids' must be a non-empty array of ids")),
        ({"ids": [RID] * (MAX_IDS + 1)}, ("too_large", "at most 4096 ids per request")),
        ({"ids": [RID.hex()]}, ("bad_request", "id must be 32 raw bytes")),
        ({"ids": [RID + b"\x00"]}, ("bad_request", "id must be 32 raw bytes")),
    ],
)
def test_parse_get_errors(args: dict[str, Any], error: tuple[str, str]) -> None:
    assert bad(parse_get, args) == error


def test_parse_put_defaults_and_values() -> None:
    assert parse_put({"key": "req/a", "body": None}) == ("req/a", "fact", [], None)
    assert parse_put({"key": "req/a", "kind": "plan", "parents": [RID], "body": {"x": 1}}) == (
        "req/a",
        "plan",
        [RID],
        {"x": 1},
    )


PARENTS_MSG = "'parents' must be an array of at most 256 ids"
KIND_MSG = "'kind' must be a string of 1 to 64 chars"


@pytest.mark.parametrize(
    "args, error",
    [
        ({"body": 1}, ("bad_request", KEY_MSG)),
        ({"key": 5, "body": 1}, ("bad_request", KEY_MSG)),
        ({"key": "req/a", "kind": "", "body": 1}, ("bad_request", KIND_MSG)),
        ({"key": "req/a", "kind": "k" * 65, "body": 1}, ("bad_request", KIND_MSG)),
        ({"key": "req/a", "kind": 3, "body": 1}, ("bad_request", KIND_MSG)),
        ({"key": "req/a", "parents": RID, "body": 1}, ("bad_request", PARENTS_MSG)),
        ({"key": "req/a", "parents": [RID] * 257, "body": 1}, ("bad_request", PARENTS_MSG)),
        (
            {"key": "req/a", "parents": [RID[:8]], "body": 1},
            ("bad_request", "parent must be 32 raw bytes"),
        ),
        ({"key": "req/a"}, ("bad_request", "'body' is required")),
    ],
)
def test_parse_put_errors(args: dict[str, Any], error: tuple[str, str]) -> None:
    assert bad(parse_put, args) == error


def test_parse_subscribe() -> None:
    assert parse_subscribe({}) is None
    assert parse_subscribe({"keys": ["req/a"]}) == ["req/a"]
    assert bad(parse_subscribe, {"keys": []}) == ("bad_request", KEYS_MSG)
    assert bad(parse_subscribe, {"keys": [None]}) == ("bad_request", KEY_MSG)
    assert bad(parse_subscribe, {"keys": ["k"] * (MAX_KEYS + 1)}) == (
        "too_large",
        "at most 4096 keys per request",
    )


# -- docs/PROTOCOL.md: the worked example is the code's own output -----------------------------


def doc_vectors() -> dict[str, bytes]:
    """The `name: hex` lines of the worked example in docs/PROTOCOL.md."""
    text = (REPO / "docs" / "PROTOCOL.md").read_text()
    block = text.split("<!-- The block below is read by tests/protocol/test_messages.py", 1)[1]
    block = block.split("```text\n", 1)[1].split("```", 1)[0]
    vectors = {}
    for line in block.splitlines():
        name, _, value = line.partition(": ")
        vectors[name] = bytes.fromhex(value)
    return vectors


def test_protocol_doc_worked_example_matches_the_code() -> None:
    doc = doc_vectors()
    cluster = doc["cluster"].decode()
    planner = Identity("planner", SigningKey(doc["planner_seed"]))
    reqs = Identity("reqs", SigningKey(doc["reqs_seed"]))
    got: dict[str, bytes] = {"cluster": cluster.encode(), "prologue": prologue(cluster)}
    for name, identity in (("planner", planner), ("reqs", reqs)):
        seed = bytes(identity.signing_key)
        got[f"{name}_seed"] = seed
        got[f"{name}_ed25519_public"] = identity.public_key
        got[f"{name}_x25519_private"] = identity.noise_private
        got[f"{name}_x25519_public"] = crypto_sign_ed25519_pk_to_curve25519(identity.public_key)
        # The doc's recipe for the conversion: SHA-512 of the seed, first half, clamped.
        clamped = bytearray(hashlib.sha512(seed).digest()[:32])
        clamped[0] &= 248
        clamped[31] = (clamped[31] & 127) | 64
        assert bytes(clamped) == identity.noise_private
        assert crypto_scalarmult_base(identity.noise_private) == got[f"{name}_x25519_public"]
    e_i, e_r = doc["initiator_ephemeral_private"], doc["responder_ephemeral_private"]
    got["initiator_ephemeral_private"], got["responder_ephemeral_private"] = e_i, e_r

    client = HandshakeState(
        "IK", True, prologue(cluster), s=planner.noise_private, e=e_i, rs=got["reqs_x25519_public"]
    )
    owner = HandshakeState("IK", False, prologue(cluster), s=reqs.noise_private, e=e_r)
    got["frame_handshake_1"] = encode_frame(client.write_message(b""))
    owner.read_message(doc["frame_handshake_1"][2:])
    assert owner.remote_static == got["planner_x25519_public"]
    got["frame_handshake_2"] = encode_frame(owner.write_message(b""))
    client.read_message(doc["frame_handshake_2"][2:])
    got["handshake_hash"] = client.get_handshake_hash()
    assert owner.get_handshake_hash() == got["handshake_hash"]
    c1, c2 = client.split()
    o1, o2 = owner.split()

    got["request_ping"] = encode_request(1, "ping", {})
    [got["chunk_ping"]] = split_message(got["request_ping"])
    got["frame_request_ping"] = encode_frame(c1.encrypt_with_ad(b"", got["chunk_ping"]))
    assert o1.decrypt_with_ad(b"", doc["frame_request_ping"][2:]) == doc["chunk_ping"]
    got["response_ping"] = encode_response(1, True, {"agent": "reqs", "time": 1700000000.5})
    [chunk] = split_message(got["response_ping"])
    got["frame_response_ping"] = encode_frame(o2.encrypt_with_ad(b"", chunk))
    assert c2.decrypt_with_ad(b"", doc["frame_response_ping"][2:]) == chunk

    body = {"qty": 3, "sku": "A-1"}
    got["request_put"] = encode_request(
        2, "put", {"key": "req/order-17", "kind": "fact", "parents": [], "body": body}
    )
    record = make_record(
        reqs.signing_key,
        key="req/order-17",
        owner="reqs",
        seq=1,
        parents=[],
        kind="fact",
        body=body,
    )
    got["record_body_raw"] = record.body_raw
    got["record_signed_fields"] = pack(record.to_wire()[:8])
    got["record_id"] = record.id
    assert hashlib.blake2b(doc["record_signed_fields"], digest_size=32).digest() == record.id
    got["record_signature"] = record.signature
    SigningKey(doc["reqs_seed"]).verify_key.verify(doc["record_id"], doc["record_signature"])
    got["record_wire"] = pack(record.to_wire())
    got["response_put"] = encode_response(2, True, {"id": record.id, "seq": 1})
    got["request_heads"] = encode_request(
        3, "heads", {"keys": ["req/order-17"], "expect": {"req/order-17": bytes(32)}}
    )
    got["response_heads"] = encode_response(
        3, True, {"heads": [["req/order-17", record.id, 1]], "records": [record.to_wire()]}
    )
    got["response_error"] = encode_error(
        4, "not_owner", "reqs does not own 'inv/a' (owner: inventory)"
    )
    items = [
        {"key": "req/order-18", "kind": "fact", "parents": [], "body": {"qty": 1}},
        {"key": "req/order-17", "kind": "fact", "parents": [record.id], "body": {"qty": 4}},
    ]
    got["request_put_many"] = encode_request(5, "put_many", {"items": items})
    batch = [
        make_record(reqs.signing_key, owner="reqs", seq=seq, **item)
        for seq, item in enumerate(items, start=2)
    ]
    got["response_put_many"] = encode_response(5, True, {"puts": [[r.id, r.seq] for r in batch]})
    got["response_error_item"] = encode_error(
        6, "not_owner", "item 1: reqs does not own 'inv/a' (owner: inventory)", 1
    )
    assert list(doc) == list(got)
    for name in got:
        assert doc[name].hex() == got[name].hex(), name
    # The example request parses as the owner would parse it: the body kept as sent.
    assert parse_put(decode_request(doc["request_put"]).args) == (
        "req/order-17",
        "fact",
        [],
        RawValue(doc["record_body_raw"]),
    )
    assert record_from_wire(unpack(doc["record_wire"])) == record
    assert parse_put_many(decode_request(doc["request_put_many"]).args) == [
        (item["key"], "fact", item["parents"], RawValue(pack(item["body"]))) for item in items
    ]


def test_parse_subscribe_every() -> None:
    from planfence_net.protocol.messages import MAX_EVERY, parse_subscribe_every

    assert parse_subscribe_every({}) == 1
    assert parse_subscribe_every({"every": 4}) == 4
    message = f"'every' must be an integer from 1 to {MAX_EVERY}"
    for value in (0, -1, True, 1.5, "2", MAX_EVERY + 1):
        assert bad(parse_subscribe_every, {"every": value}) == ("bad_request", message)


@pytest.mark.parametrize(
    "value",
    [
        [1, "heads", {"keys": ["req/a"], "expect": {"req/a": RID}, "short": True}],
        [2, "heads", {"expect": {"req/a": RID, "req/b": RID}, "junk": "x", "n": 3}],
        [3, "get", {"ids": [RID, RID]}],
        [4, "ping", {}],
        [5, "put", {"key": "req/a", "kind": "fact", "parents": [], "body": {"x": 1.5}}],
        [6, "heads", {"keys": "req/a"}],  # a scalar where an array belongs
        [7, "heads", {"keys": [["nested"]]}],
        [8, "heads", {"junk": [1, 2]}],  # unknown argument, not a scalar
        [9, "heads", {"keys": ["k" * (4 * MAX_KEY_LEN + 1)]}],  # over the reader's scalar cap
        [10, "heads", {"keys": ["k"] * (MAX_KEYS + 1)}],
        [11, "heads", {"expect": {1: RID}}],  # a non-string map key
        [12, "nosuchop", {}],
        [True, "ping", {}],
        [13, "ping", {}, "extra"],
        [14, "heads", {"expect": {f"k{i}": RID for i in range(5000)}}],  # over PLAIN_MAX too
        [15, "put_many", {"items": [{"key": "req/a", "body": 1}]}],  # raw bodies: careful
        [16, "put_many", {"items": [[1]]}],
    ],
)
def test_the_fast_path_reads_what_the_careful_reader_reads(value: list[Any]) -> None:
    """decode_request (fast path first) and the careful reader alone agree on every request,
    in the request read or in the error (code, message, req_id)."""
    data = pack(value)

    def outcome(read: Any) -> Any:
        try:
            return read()
        except BadRequest as exc:
            return (exc.code, exc.message, exc.req_id)

    careful = outcome(lambda: _RequestReader(data).read(REQUESTS))
    assert outcome(lambda: decode_request(data)) == careful
    assert (read_plain(data, REQUESTS, MAX_ARGS, 4 * MAX_KEY_LEN) is not None) == (
        type(value[0]) is int and value[0] <= 4
    )  # well formed, no raw body: it takes them


# -- screening a request from its first bytes ---------------------------------------------------

_NAMES = st.sampled_from(
    [
        "keys",
        "expect",
        "short",
        "ids",
        "key",
        "kind",
        "body",
        "parents",
        "items",
        "every",
        "group",
        "seq",
        "junk",
    ]
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(),
    st.text(max_size=8),
    st.binary(max_size=40),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
_REQUESTS = st.one_of(
    st.tuples(
        st.integers(0, 2**31),
        st.sampled_from([*OPS, "nosuchop"]),
        st.dictionaries(_NAMES, _VALUES, max_size=5),
    ).map(list),
    _VALUES,
)


def _outcome(read: Any) -> Any:
    try:
        return read()
    except BadRequest as exc:
        return (exc.code, exc.message, exc.req_id)


@given(value=_REQUESTS, tail=st.binary(max_size=3), cut=st.integers(1, 400))
@settings(max_examples=400, deadline=None)
def test_a_request_refused_from_its_first_bytes_is_refused_whole_alike(
    value: Any, tail: bytes, cut: int
) -> None:
    """Whatever screen_request refuses from a prefix, decode_request refuses too (same code,
    message and req_id) once the whole has arrived; a request it would serve is never refused
    from any prefix of it."""
    data = pack(value) + tail
    if cut >= len(data):
        return
    screened = screen_request(data[:cut])
    whole = _outcome(lambda: decode_request(data))
    if screened is not None:
        assert (screened.code, screened.message, screened.req_id) == whole
    assert isinstance(whole, tuple) or screened is None


def test_the_empty_array_floods_are_refused_from_their_first_chunk() -> None:
    count = 16 * 1024 * 1024 - 100
    flood = b"\xdd" + count.to_bytes(4, "big") + b"\x90" * 65000
    junk = screen_request(b"\x93\x01\xa5heads\x82\xa4keys\x91\xa5req/a\xa4junk" + flood)
    keys = screen_request(b"\x93\x02\xa5heads\x81\xa4keys" + flood)
    body = screen_request(b"\x93\x03\xa3put\x82\xa3key\xa5req/a\xa4body" + flood)
    assert junk is not None and (junk.code, junk.req_id) == ("bad_request", 1)
    assert keys is not None and (keys.code, keys.message, keys.req_id) == (
        "too_large",
        f"at most {MAX_KEYS} keys per request",
        2,
    )
    assert body is None  # a put's body may be long: only the whole decides
