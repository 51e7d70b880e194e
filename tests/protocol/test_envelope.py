"""The response envelope around parts already encoded (`split_req_id`, `encode_ok_response`),
against msgpack itself: the bytes an owner cuts and joins by hand are msgpack's own."""

from __future__ import annotations

from typing import Any

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from planfence_net.protocol.messages import (
    encode_ok_response,
    encode_request,
    encode_response,
    pack,
    split_req_id,
)

_IDS = st.integers(-(2**63), 2**64 - 1)  # every integer msgpack encodes
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    _IDS,
    st.floats(allow_nan=False),
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
_MAPS = st.dictionaries(st.text(max_size=8), _VALUES, max_size=5)


@given(req_id=_IDS, result=_MAPS)
@settings(max_examples=300, deadline=None)
def test_an_ok_response_from_encoded_parts_is_encode_responses_bytes(
    req_id: int, result: dict[str, Any]
) -> None:
    assert encode_ok_response(pack(req_id), pack(result)) == encode_response(req_id, True, result)


@given(req_id=_IDS, op=st.text(max_size=10), args=_MAPS)
@settings(max_examples=300, deadline=None)
def test_a_request_splits_at_the_end_of_its_non_negative_req_id(
    req_id: int, op: str, args: dict[str, Any]
) -> None:
    data = encode_request(req_id, op, args)
    expected = (pack(req_id), pack(op) + pack(args)) if req_id >= 0 else None
    assert split_req_id(data) == expected


def _msgpack_split(data: bytes) -> tuple[bytes, bytes] | None:
    """The same split by msgpack's Unpacker: the oracle `split_req_id` is held to."""
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(data)
    try:
        if unpacker.read_array_header() != 3:
            return None
        req_id = unpacker.unpack()
    except (msgpack.OutOfData, ValueError):
        return None
    if type(req_id) is not int or req_id < 0 or 0xD0 <= data[1] <= 0xD3:
        return None  # (msgpack writes a non-negative integer unsigned: signed is not split)
    end = unpacker.tell()
    return data[1:end], data[end:]


@given(
    data=st.one_of(
        st.binary(max_size=24),
        st.binary(max_size=12).map(lambda tail: b"\x93" + tail),
        st.tuples(_IDS, st.binary(max_size=4)).map(lambda p: b"\x93" + pack(p[0])[:-1] + p[1]),
    )
)
@settings(max_examples=500, deadline=None)
def test_any_bytes_split_as_msgpacks_unpacker_splits_them(data: bytes) -> None:
    """Arrays of three whose first value is cut short, negative, or no integer at all are
    not split; the rest (never read) may be anything."""
    assert split_req_id(data) == _msgpack_split(data)


def test_only_a_non_negative_req_id_is_split_off() -> None:
    for req_id in (0, 5, 127, 128, 300, 70000, 2**33):
        data = encode_request(req_id, "heads", {"keys": ["req/x"]})
        head, rest = split_req_id(data) or (b"", b"")
        assert (
            data == b"\x93" + head + rest
            and rest == encode_request(0, "heads", {"keys": ["req/x"]})[2:]
        )
    assert split_req_id(encode_request(-1, "heads", {})) is None
    assert split_req_id(b"\x92\x01") is None and split_req_id(b"") is None
    assert split_req_id(b"\x93\xcd\x01") is None  # a uint 16 cut short
    assert split_req_id(b"\x93\xd0\x05\xa4ping\x80") is None  # 5 as an int 8
