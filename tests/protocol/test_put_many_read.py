"""Reading a `put_many` request: its items as puts' args, its caps before what exceeds them."""

from __future__ import annotations

from typing import Any

import pytest

from planfence_net.protocol.messages import (
    MAX_PUT_BYTES,
    MAX_PUT_ITEMS,
    BadRequest,
    RawValue,
    pack,
    parse_put_many,
)
from planfence_net.protocol.requestread import decode_request, screen_request

RID = bytes(range(32))


def _refusal(data: bytes) -> tuple[str, str, int | None, int | None]:
    with pytest.raises(BadRequest) as info:
        parse_put_many(decode_request(data).args)
    return (info.value.code, info.value.message, info.value.req_id, info.value.item)


def test_items_are_read_as_puts_with_bodies_kept_as_sent() -> None:
    body = b"\x92\xca\x3f\xc0\x00\x00\x81\xa1b\x01"  # [float32 1.5, {"b": 1}]: not re-encoded
    item = b"\x82\xa3key\xa5req/a\xa4body" + body
    data = b"\x93\x02\xa8put_many\x81\xa5items\x92" + item + pack({"key": "req/b", "body": 2})
    assert parse_put_many(decode_request(data).args) == [
        ("req/a", "fact", [], RawValue(body)),
        ("req/b", "fact", [], RawValue(b"\x02")),
    ]
    items = [{"key": "req/c", "kind": "plan", "parents": [RID], "body": None}]
    request = decode_request(pack([3, "put_many", {"items": items}]))
    assert parse_put_many(request.args) == [("req/c", "plan", [RID], RawValue(b"\xc0"))]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({}, ("bad_request", "'items' must be a non-empty array of maps", None)),
        ({"items": []}, ("bad_request", "'items' must be a non-empty array of maps", None)),
        ({"items": "x"}, ("bad_request", "'items' must be a non-empty array of maps", None)),
        (
            {"items": [{"key": "req/a", "body": 1}, {"key": "", "body": 1}]},
            ("bad_request", "item 1: a key must be a string of 1 to 512 chars", 1),
        ),
        (
            {"items": [{"key": "req/a", "body": 1, "head": RID}]},
            ("bad_request", "item 0: put_many has no 'head': use put", 0),
        ),
    ],
)
def test_an_item_error_names_the_item(args: dict[str, Any], error: tuple[Any, ...]) -> None:
    with pytest.raises(BadRequest) as info:
        parse_put_many(args)
    assert (info.value.code, info.value.message, info.value.item) == error


def test_an_item_that_is_not_a_map_is_refused_before_the_rest_is_read() -> None:
    flood = b"\xdd" + (1_000_000).to_bytes(4, "big") + b"\x90" * 1000
    data = b"\x93\x04\xa8put_many\x81\xa5items\x92\x91" + flood
    assert _refusal(data) == ("bad_request", "item 0 of 'items' must be a map", 4, None)


def test_the_item_count_is_refused_from_the_array_header() -> None:
    header = b"\xdd" + (MAX_PUT_ITEMS + 1).to_bytes(4, "big")
    prefix = b"\x93\x05\xa8put_many\x81\xa5items" + header + b"\x82\xa3key"
    screened = screen_request(prefix)  # the first chunk decides: nothing after it is read
    assert screened is not None
    assert (screened.code, screened.message, screened.req_id) == (
        "too_large",
        f"at most {MAX_PUT_ITEMS} items per put_many",
        5,
    )
    at_cap = pack([6, "put_many", {"items": [{"key": "k", "body": 0}] * MAX_PUT_ITEMS}])
    assert len(parse_put_many(decode_request(at_cap).args)) == MAX_PUT_ITEMS


def test_the_bodies_bytes_are_refused_once_they_pass_the_cap() -> None:
    half = b"x" * (MAX_PUT_BYTES // 2)
    fits = [{"key": "req/a", "body": half[:-8]}, {"key": "req/a", "body": half[:-8]}]
    assert len(parse_put_many(decode_request(pack([7, "put_many", {"items": fits}])).args)) == 2
    over = [*fits, {"key": "req/a", "body": b"x" * 64}]
    data = pack([8, "put_many", {"items": over}])
    assert _refusal(data) == (
        "too_large",
        f"at most {MAX_PUT_BYTES} bytes of bodies per put_many",
        8,
        None,
    )
    # refused from the first bytes that hold the body over the cap, whatever follows
    cut = pack([8, "put_many", {"items": [*over, {"key": "req/a", "body": 1}]}])
    early = screen_request(cut[: len(data) + 4])
    assert early is not None and (early.code, early.req_id) == ("too_large", 8)
