"""Reading requests, sans-IO: each op's argument schema and the careful one-pass reader.

A request is read once, in one pass, and only what its op uses is decoded. Where a scalar
belongs (an argument the op does not use, a key, an id, an element of `keys`) an array or
map is refused at once, from its first byte: skipping it could mean walking millions of
nested values. Arrays are checked against their cap from their header before any element
exists, strings and byte strings longer than a key are skipped without being built, and a
put's body is kept as its bytes. So the memory and time a request costs are bounded by its
op's limits, not by what the sender packed into it.

`decode_request` reads a whole request (small well-formed ones take the fast path,
`plainread`); `screen_request` judges a request from its first bytes. The messages
themselves, their encoding and the argument parsers are `messages`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from ..core.records import MAX_PARENTS
from .messages import (
    IDS_TOO_MANY,
    KEYS_TOO_MANY,
    MAX_IDS,
    MAX_KEY_LEN,
    MAX_KEYS,
    MAX_PUT_BYTES,
    MAX_PUT_ITEMS,
    PUT_BYTES_TOO_MANY,
    PUT_ITEMS_TOO_MANY,
    BadRequest,
    RawValue,
    Request,
)
from .plainread import read_plain

MAX_ARGS = 64  # entries in a request's args map
MAX_SCALAR = 4 * MAX_KEY_LEN  # bytes of the longest str or bin the reader decodes (a key)
BAD_SHAPE = "a request is [req_id: int, op: str, args: map]"
# The req_id an owner answers a request too broken to name one with (messages.encode_error):
# a request naming it is refused, so that no client can take that answer for its own.
UNNAMED_REQ_ID = -1
UNNAMED_TAKEN = f"req_id {UNNAMED_REQ_ID} is the owner's (for requests it cannot read)"
TRAILING = "trailing bytes after the request"


@dataclass(frozen=True, slots=True)
class Array:
    """An argument that is an array (or, with `of_pairs`, a map) of scalars, at most `cap`
    long; a longer one is refused with `error` (code, message) before its elements are read."""

    cap: int
    error: tuple[str, str]
    of_pairs: bool = False


@dataclass(frozen=True, slots=True)
class Items:
    """An argument that is an array of maps (a put_many's items), at most `cap` long, each
    read as a request's args with `fields`; their raw values together at most `raw_cap`
    bytes. Either excess is refused (`error`, `raw_error`) before what exceeds is read."""

    cap: int
    error: tuple[str, str]
    fields: dict[str, Any]
    raw_cap: int
    raw_error: tuple[str, str]


SCALAR, RAW = "scalar", "raw"
ArgKind = Array | Items | str
Schema = dict[str, dict[str, ArgKind]]
_PARENTS = Array(
    MAX_PARENTS, ("bad_request", f"'parents' must be an array of at most {MAX_PARENTS} ids")
)

REQUESTS: Schema = {
    "ping": {},
    "stats": {},
    "heads": {
        "keys": Array(MAX_KEYS, KEYS_TOO_MANY),
        "expect": Array(MAX_KEYS, ("too_large", f"at most {MAX_KEYS} expected ids"), of_pairs=True),
        "short": SCALAR,
    },
    "get": {"ids": Array(MAX_IDS, IDS_TOO_MANY)},
    "put": {
        "key": SCALAR,
        "kind": SCALAR,
        "body": RAW,
        "head": SCALAR,
        "parents": _PARENTS,
    },
    "put_many": {
        "items": Items(
            MAX_PUT_ITEMS,
            PUT_ITEMS_TOO_MANY,
            {"key": SCALAR, "kind": SCALAR, "body": RAW, "head": SCALAR, "parents": _PARENTS},
            MAX_PUT_BYTES,
            PUT_BYTES_TOO_MANY,
        )
    },
    "subscribe": {
        "keys": Array(MAX_KEYS, KEYS_TOO_MANY),
        "every": SCALAR,
        "group": SCALAR,
        "records": SCALAR,
    },
    "ack": {"group": SCALAR, "seq": SCALAR},
    "synced": {"group": SCALAR, "keys": Array(MAX_KEYS, KEYS_TOO_MANY)},
}


class _Invalid:
    """Stands for a value of the wrong wire type; every argument check refuses it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<invalid>"


INVALID = _Invalid()


def decode_request(data: bytes, schema: Schema = REQUESTS) -> Request:
    """Read a request in one pass, decoding only the arguments `schema` names for its op.

    Raises BadRequest ("bad_request", "unknown_op", "too_large"), carrying the req_id once
    the first element was read as an integer. Small well-formed requests take the fast path
    (`plainread`), which returns what this reader would.
    """
    plain = read_plain(data, schema, MAX_ARGS, MAX_SCALAR)
    if plain is not None and plain[0] != UNNAMED_REQ_ID:
        return Request(*plain)
    reader = _RequestReader(data)
    try:
        return reader.read(schema)
    except (ValueError, msgpack.OutOfData, msgpack.StackError) as exc:  # FormatError too
        raise reader.invalid(exc) from None


def screen_request(prefix: bytes, schema: Schema = REQUESTS) -> BadRequest | None:
    """Why a request that begins with `prefix` (and goes on past it) cannot be served, when
    these first bytes already show it; None while they do not. Whatever is refused here,
    `decode_request` refuses too, with the same code, whatever follows the prefix: an owner
    answers a flood of 16 MiB from its first chunk instead of holding it whole."""
    reader = _RequestReader(prefix)
    try:
        reader.read(schema)
    except BadRequest as exc:
        return exc
    except msgpack.OutOfData:  # the prefix ends inside the request: no verdict yet
        return None
    except (ValueError, msgpack.StackError) as exc:
        return reader.invalid(exc)
    # the whole request fits in the prefix, so what follows it is trailing bytes
    return reader.invalid(ValueError(TRAILING))


class _RequestReader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.req_id: int | None = None
        self.raw_left: int | None = None  # bytes raw values may still take (put_many items)
        self.raw_error = ("too_large", "")
        self.unpacker = msgpack.Unpacker(
            raw=False,
            max_str_len=MAX_SCALAR,
            max_bin_len=MAX_SCALAR,
            max_ext_len=MAX_SCALAR,
            max_buffer_size=max(len(data), 1),
        )
        self.unpacker.feed(data)

    def fail(self, code: str, message: str) -> BadRequest:
        return BadRequest(code, message, self.req_id)

    def invalid(self, exc: Exception) -> BadRequest:
        return self.fail("bad_request", f"invalid msgpack: {str(exc) or type(exc).__name__}")

    def peek(self) -> int:
        """The first byte of the next value (its type), without consuming it."""
        position: int = self.unpacker.tell()
        if position >= len(self.data):
            raise msgpack.OutOfData("truncated")
        return self.data[position]

    def read(self, schema: Schema) -> Request:
        head = self.peek()
        if head == 0xC1:
            raise ValueError("0xc1 is not a msgpack type")
        if not _is_array(head):
            raise self.fail("bad_request", BAD_SHAPE)
        length = self.unpacker.read_array_header()
        if length and _is_int_type(self.peek()):
            self.req_id = int(self.unpacker.unpack())
            if self.req_id == UNNAMED_REQ_ID:
                self.req_id = None
                raise self.fail("bad_request", UNNAMED_TAKEN)
        if length != 3 or self.req_id is None:
            raise self.fail("bad_request", BAD_SHAPE)
        if not _is_str(self.peek()):
            raise self.fail("bad_request", BAD_SHAPE)
        op = self.scalar()
        if not isinstance(op, str) or not _is_map(self.peek()):
            raise self.fail("bad_request", BAD_SHAPE)
        if op not in schema:
            raise self.fail("unknown_op", f"unknown op {op!r}")
        args = self.args(schema[op])
        self.end()
        return Request(self.req_id, op, args)

    def args(self, kinds: dict[str, ArgKind]) -> dict[str, Any]:
        entries = self.unpacker.read_map_header()
        if entries > MAX_ARGS:
            raise self.fail("bad_request", f"at most {MAX_ARGS} arguments per request")
        args: dict[str, Any] = {}
        for _ in range(entries):
            position = self.unpacker.tell()
            if position < len(self.data) and 0xA0 <= self.data[position] <= 0xBF:
                name = self.unpacker.unpack()  # a fixstr, as names are
            else:
                name = self.scalar("args") if _is_str(self.peek()) else None
            if not isinstance(name, str):
                raise ValueError("argument names must be strings")
            kind = kinds.get(name)
            if kind is None:  # an argument this op does not use: dropped
                if _is_array(self.peek()) or _is_map(self.peek()):
                    raise self.fail(
                        "bad_request",
                        f"unknown argument {name!r}: only a string, id or number is ignored",
                    )
                self.scalar(name)
            elif kind == RAW:
                args[name] = self.raw()
            elif kind == SCALAR:
                args[name] = self.scalar(name)
            elif isinstance(kind, Items):
                args[name] = self.items(name, kind)
            else:
                assert isinstance(kind, Array)
                args[name] = self.array(name, kind)
        return args

    def raw(self) -> RawValue:
        """The next value as its bytes; refused once raw values exceed `raw_left` bytes."""
        start = self.unpacker.tell()
        self.unpacker.skip()
        end = self.unpacker.tell()
        if self.raw_left is not None:
            self.raw_left -= end - start
            if self.raw_left < 0:
                raise self.fail(*self.raw_error)
        return RawValue(self.data[start:end])

    def items(self, name: str, kind: Items) -> Any:
        """An array of at most `kind.cap` maps, each read as args with `kind.fields`."""
        head = self.peek()
        if not _is_array(head):
            if _is_map(head):
                raise self.fail("bad_request", f"{name!r} must be an array")
            self.scalar(name)
            return INVALID
        count = self.unpacker.read_array_header()
        if count > kind.cap:
            raise self.fail(*kind.error)
        self.raw_left, self.raw_error = kind.raw_cap, kind.raw_error
        items = []
        for index in range(count):
            if not _is_map(self.peek()):
                raise self.fail("bad_request", f"item {index} of {name!r} must be a map")
            items.append(self.args(kind.fields))
        self.raw_left = None
        return items

    def array(self, name: str, kind: Array) -> Any:
        head = self.peek()
        if not (_is_map(head) if kind.of_pairs else _is_array(head)):
            if _is_array(head) or _is_map(head):
                raise self.fail(
                    "bad_request", f"{name!r} must be {'a map' if kind.of_pairs else 'an array'}"
                )
            self.scalar(name)
            return INVALID
        if kind.of_pairs:
            count = self.unpacker.read_map_header()
        else:
            count = self.unpacker.read_array_header()
        if count > kind.cap:
            raise self.fail(*kind.error)
        if kind.of_pairs:
            return {self.scalar(name): self.scalar(name) for _ in range(count)}
        return [self.scalar(name) for _ in range(count)]

    def scalar(self, name: str = "") -> Any:
        """The next value if it is a scalar of at most MAX_SCALAR bytes, INVALID for a longer
        one (skipped without being built); an array or map is refused (BadRequest)."""
        position: int = self.unpacker.tell()
        if position < len(self.data) and self.data[position] in _SHORT:
            return self.unpacker.unpack()  # a fixint, fixstr, nil or bool: nothing to check
        head = self.peek()
        if _is_array(head) or _is_map(head):
            where = f"in {name!r}" if name else "there"
            raise self.fail(
                "bad_request", f"an array or map {where} where a string, id or number belongs"
            )
        if _scalar_length(self.data, self.unpacker.tell(), head) > MAX_SCALAR:
            self.unpacker.skip()
            return INVALID
        return self.unpacker.unpack()

    def end(self) -> None:
        if self.unpacker.tell() != len(self.data):
            raise ValueError(TRAILING)


# First bytes of scalars short enough to decode unchecked: positive and negative fixint,
# fixstr (at most 31 bytes), nil, false, true.
_SHORT = frozenset([*range(0x00, 0x80), *range(0xA0, 0xC0), 0xC0, 0xC2, 0xC3, *range(0xE0, 0x100)])


def _is_array(head: int) -> bool:
    return 0x90 <= head <= 0x9F or head in (0xDC, 0xDD)


def _is_map(head: int) -> bool:
    return 0x80 <= head <= 0x8F or head in (0xDE, 0xDF)


def _is_str(head: int) -> bool:
    return 0xA0 <= head <= 0xBF or head in (0xD9, 0xDA, 0xDB)


def _is_int_type(head: int) -> bool:
    return head <= 0x7F or head >= 0xE0 or 0xCC <= head <= 0xD3


_LENGTH_BYTES = {0xD9: 1, 0xDA: 2, 0xDB: 4, 0xC4: 1, 0xC5: 2, 0xC6: 4, 0xC7: 1, 0xC8: 2, 0xC9: 4}


def _scalar_length(data: bytes, position: int, head: int) -> int:
    """Payload length of the str, bin or ext starting at `position` (0 for other scalars)."""
    if 0xA0 <= head <= 0xBF:
        return head & 0x1F
    size = _LENGTH_BYTES.get(head)
    if size is None:
        return 0
    return int.from_bytes(data[position + 1 : position + 1 + size], "big")


def request_id_of(data: bytes) -> int | None:
    """The req_id of a request, also of a malformed one when its first element is an
    integer (so its error can be addressed); else None."""
    try:
        return decode_request(data).req_id
    except BadRequest as exc:
        return exc.req_id
