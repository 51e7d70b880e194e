"""Request and response messages (msgpack), sans-IO.

    request   [req_id: int, op: str, args: map]
    response  [req_id: int, ok: bool, result_or_error: map]
    error     {"code": str, "message": str}

This module holds the message values, their encoding, the response decoder and the argument
parsers: a parser turns a request's args into checked values or raises BadRequest, which the
owner sends back as a typed error. Limits (keys per request, ids per request) live here.
Reading a request off the wire (each op's argument schema, the careful one-pass reader) is
`requestread`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import msgpack

from ..core.errors import RemoteProtocolError
from ..core.records import ID_LEN, MAX_PARENTS

OPS = ("ping", "heads", "get", "put", "put_many", "subscribe", "ack", "synced", "stats")
MAX_KEYS = 4096
MAX_IDS = 4096
MAX_KEY_LEN = 512
KEYS_TOO_MANY = ("too_large", f"at most {MAX_KEYS} keys per request")
IDS_TOO_MANY = ("too_large", f"at most {MAX_IDS} ids per request")
# A put_many's items, and their bodies' bytes together: both refused before they are read
# (the count from the array's header, the bytes as each body is reached).
MAX_PUT_ITEMS = 4096
MAX_PUT_BYTES = 8 * 1024 * 1024
PUT_ITEMS_TOO_MANY = ("too_large", f"at most {MAX_PUT_ITEMS} items per put_many")
PUT_BYTES_TOO_MANY = ("too_large", f"at most {MAX_PUT_BYTES} bytes of bodies per put_many")


class BadRequest(RemoteProtocolError):
    """A request that cannot be served; carries the error code sent back to the peer and,
    when the request got that far, its req_id; `item`: the index of the put_many item that
    caused it (None for the request as a whole)."""

    def __init__(
        self, code: str, message: str, req_id: int | None = None, item: int | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.req_id = req_id
        self.item = item

    def of_item(self, item: int) -> BadRequest:
        """This error, as caused by put_many item `item` (its message says which)."""
        return BadRequest(self.code, f"item {item}: {self.message}", self.req_id, item)


@dataclass(frozen=True, slots=True)
class Request:
    req_id: int
    op: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Response:
    req_id: int
    ok: bool
    result: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RawValue:
    """One msgpack value exactly as it arrived, not decoded (a put's body: its bytes become
    the record's body, so a float32 stays a float32 and map order stays as sent)."""

    data: bytes


_PACKERS = threading.local()  # one Packer per thread: packb builds a new one per call


def pack(value: Any) -> bytes:
    """`value` as msgpack (`msgpack.packb(value, use_bin_type=True)`)."""
    try:
        packer = _PACKERS.packer
    except AttributeError:
        packer = _PACKERS.packer = msgpack.Packer(use_bin_type=True)
    packed: bytes = packer.pack(value)  # resets itself, also when it raises
    return packed


def unpack(data: bytes) -> Any:
    """Decode msgpack; raises RemoteProtocolError for anything that is not one valid value."""
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (
        ValueError,
        TypeError,
        msgpack.ExtraData,
        msgpack.FormatError,
        msgpack.StackError,
    ) as exc:
        raise RemoteProtocolError(f"invalid msgpack: {exc}") from None


def encode_request(req_id: int, op: str, args: dict[str, Any]) -> bytes:
    return pack([req_id, op, args])


def encode_response(req_id: int, ok: bool, result: dict[str, Any]) -> bytes:
    return pack([req_id, ok, result])


# The response envelope around parts already encoded. An owner that answers a request in the
# socket's callback keeps the answer to a repeated request by the request's bytes after its
# req_id, and gives it again with the asker's req_id: `split_req_id` and `encode_ok_response`
# cut and join those bytes without decoding or encoding the rest.
_UINT_SIZES = {0xCC: 2, 0xCD: 3, 0xCE: 5, 0xCF: 9}  # msgpack uint 8/16/32/64: size with tag
_ARRAY3, _TRUE = b"\x93", b"\xc3"


def split_req_id(data: bytes) -> tuple[bytes, bytes] | None:
    """(the req_id's encoding, the encoding of the rest) of an encoded request
    [req_id, op, args] whose req_id is a non-negative integer in one of the formats msgpack
    writes them in (positive fixint, uint 8 to 64): `data` is the array's one byte, then
    these two. None for anything else, a non-negative integer in a signed format included
    (the request's decoder judges it; an owner then keeps no answer). Nothing after the
    req_id is read.

    The few bytes are read here rather than by `msgpack.Unpacker`, which splits alike
    (tests/protocol/test_envelope.py) at four times the cost: about 1 us more per request,
    where an owner spends about 17 us of CPU on a whole heads (48k heads/s on 0.84 cores,
    `scripts/bench-latency`)."""
    if len(data) < 2 or data[0] != 0x93:
        return None
    first = data[1]
    size = 1 if first <= 0x7F else _UINT_SIZES.get(first)
    if size is None or len(data) < 1 + size:
        return None
    return data[1 : 1 + size], data[1 + size :]


def encode_ok_response(req_id: bytes, result: bytes) -> bytes:
    """`encode_response(r, True, m)` from `pack(r)` and `pack(m)` (the same bytes)."""
    return b"".join((_ARRAY3, req_id, _TRUE, result))


def encode_error(req_id: int | None, code: str, message: str, item: int | None = None) -> bytes:
    """An error response; `req_id` None (a request too broken to name one) is sent as -1.
    `item` (a put_many item's index) is sent as the error's "item" when given."""
    error: dict[str, Any] = {"code": code, "message": message}
    if item is not None:
        error["item"] = item
    return pack([req_id if req_id is not None else -1, False, error])


def decode_response(data: bytes) -> Response:
    """Parse a response; raises RemoteProtocolError when malformed."""
    value = unpack(data)
    if (
        not isinstance(value, list)
        or len(value) != 3
        or not _is_int(value[0])
        or not isinstance(value[1], bool)
        or not isinstance(value[2], dict)
    ):
        raise RemoteProtocolError("a response is [req_id: int, ok: bool, result: map]")
    return Response(value[0], value[1], value[2])


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _key_list(args: dict[str, Any], name: str = "keys") -> list[str]:
    keys = args.get(name)
    if not isinstance(keys, list) or not keys:
        raise BadRequest("bad_request", f"'{name}' must be a non-empty array of strings")
    if len(keys) > MAX_KEYS:
        raise BadRequest(*KEYS_TOO_MANY)
    for key in keys:
        _check_key(key)
    return keys


def _check_key(key: Any) -> str:
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_LEN:
        raise BadRequest("bad_request", f"a key must be a string of 1 to {MAX_KEY_LEN} chars")
    return key


def _check_id(value: Any, what: str = "id") -> bytes:
    if not isinstance(value, bytes) or len(value) != ID_LEN:
        raise BadRequest("bad_request", f"{what} must be {ID_LEN} raw bytes")
    return value


def parse_heads(args: dict[str, Any]) -> tuple[list[str], dict[str, bytes]]:
    """`heads` args: {"keys": [...], "expect": {key: id}} (expect optional), or
    {"expect": {key: id}} alone, which asks for the keys of `expect` in its order (a client
    expecting an id for every key sends each key once)."""
    expect = args.get("expect", {})
    if not isinstance(expect, dict):
        raise BadRequest("bad_request", "'expect' must be a map of key to id")
    keys = _key_list(args) if "keys" in args or not expect else list(expect)
    if len(keys) > MAX_KEYS:
        raise BadRequest(*KEYS_TOO_MANY)
    if not _plain_expect(expect):  # the loop names the first bad entry
        for key, rid in expect.items():
            _check_key(key)
            _check_id(rid, f"expect[{key!r}]")
    return keys, expect


def _plain_expect(expect: dict[Any, Any]) -> bool:
    """True when every entry of `expect` is a key of 1 to MAX_KEY_LEN chars and an id: the
    checks of `_check_key` and `_check_id`, for all entries at once."""
    return all(type(key) is str and 0 < len(key) <= MAX_KEY_LEN for key in expect) and all(
        type(rid) is bytes and len(rid) == ID_LEN for rid in expect.values()
    )


def parse_heads_short(args: dict[str, Any]) -> bool:
    """`heads` option "short": answer a key whose head is its expected id with [key, seq]."""
    short = args.get("short", False)
    if not isinstance(short, bool):
        raise BadRequest("bad_request", "'short' must be true or false")
    return short


def parse_get(args: dict[str, Any]) -> list[bytes]:
    """`get` args: {"ids": [id, ...]}."""
    ids = args.get("ids")
    if not isinstance(ids, list) or not ids:
        raise BadRequest("bad_request", "'ids' must be a non-empty array of ids")
    if len(ids) > MAX_IDS:
        raise BadRequest(*IDS_TOO_MANY)
    return [_check_id(rid) for rid in ids]


def parse_put(args: dict[str, Any]) -> tuple[str, str, list[bytes], Any]:
    """`put` args: {"key", "kind", "parents", "body"}."""
    key = _check_key(args.get("key"))
    kind = args.get("kind", "fact")
    if not isinstance(kind, str) or not kind or len(kind) > 64:
        raise BadRequest("bad_request", "'kind' must be a string of 1 to 64 chars")
    parents = args.get("parents", [])
    if not isinstance(parents, list) or len(parents) > MAX_PARENTS:
        raise BadRequest("bad_request", f"'parents' must be an array of at most {MAX_PARENTS} ids")
    if "body" not in args:
        raise BadRequest("bad_request", "'body' is required")
    return key, kind, [_check_id(p, "parent") for p in parents], args["body"]


def parse_put_many(args: dict[str, Any]) -> list[tuple[str, str, list[bytes], Any]]:
    """`put_many` args: {"items": [{"key", "kind", "parents", "body"}, ...]}: 1 to
    MAX_PUT_ITEMS items, each read as a `put`'s args (no "head"). An error of one item is
    raised with its index (`BadRequest.item`)."""
    items = args.get("items")
    if not isinstance(items, list) or not items:
        raise BadRequest("bad_request", "'items' must be a non-empty array of maps")
    if len(items) > MAX_PUT_ITEMS:
        raise BadRequest(*PUT_ITEMS_TOO_MANY)
    parsed = []
    for index, item in enumerate(items):
        try:
            if not isinstance(item, dict):
                raise BadRequest("bad_request", "an item must be a map")
            if "head" in item:
                raise BadRequest("bad_request", "put_many has no 'head': use put")
            parsed.append(parse_put(item))
        except BadRequest as exc:
            raise exc.of_item(index) from None
    return parsed


def parse_put_head(args: dict[str, Any]) -> bytes | None:
    """`put` option "head": write only if the key's head is this id (b"": no record yet);
    None when absent (no condition)."""
    head = args.get("head")
    if head is None or head == b"":
        return None if head is None else b""
    return _check_id(head, "'head'")


def parse_subscribe(args: dict[str, Any]) -> list[str] | None:
    """`subscribe` args: {"keys": [...]} or {} for every key the owner has."""
    if "keys" not in args:
        return None
    return _key_list(args)


MAX_EVERY = 4096  # rows a subscription gathers before a push: bounded memory per subscription


def parse_subscribe_every(args: dict[str, Any]) -> int:
    """`subscribe` option "every": push after every K dirty updates (default 1)."""
    every = args.get("every", 1)
    if not _is_int(every) or not 1 <= every <= MAX_EVERY:
        raise BadRequest("bad_request", f"'every' must be an integer from 1 to {MAX_EVERY}")
    return int(every)


MAX_GROUP_LEN = 128


def _group(args: dict[str, Any]) -> str:
    group = args.get("group")
    if not isinstance(group, str) or not group or len(group) > MAX_GROUP_LEN:
        raise BadRequest("bad_request", f"'group' must be a string of 1 to {MAX_GROUP_LEN} chars")
    return group


def parse_subscribe_group(args: dict[str, Any]) -> str | None:
    """`subscribe` option "group": the sync group whose pushes the subscriber acknowledges."""
    return _group(args) if "group" in args else None


def parse_subscribe_records(args: dict[str, Any]) -> bool:
    """`subscribe` option "records": pushes also carry the pushed rows' records (as many as
    fit in the owner's push budget; default false)."""
    records = args.get("records", False)
    if not isinstance(records, bool):
        raise BadRequest("bad_request", "'records' must be true or false")
    return records


def parse_ack(args: dict[str, Any]) -> tuple[str, int]:
    """`ack` args: {"group": name, "seq": n}: every push of the group up to seq n is applied."""
    seq = args.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise BadRequest("bad_request", "'seq' must be a non-negative integer")
    return _group(args), seq


def parse_synced(args: dict[str, Any]) -> tuple[str, list[str]]:
    """`synced` args: {"group": name, "keys": [...]}: wait until the group has every update."""
    return _group(args), _key_list(args)
