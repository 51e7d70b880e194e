"""Request and response messages (msgpack), sans-IO.

    request   [req_id: int, op: str, args: map]
    response  [req_id: int, ok: bool, result_or_error: map]
    error     {"code": str, "message": str}

Argument parsers turn a request's args into checked values or raise BadRequest, which the
owner sends back as a typed error. Limits (keys per request, ids per request) live here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from .errors import RemoteProtocolError
from .plainread import read_plain
from .records import ID_LEN, MAX_PARENTS

OPS = ("ping", "heads", "get", "put", "subscribe", "ack", "synced", "stats")
MAX_KEYS = 4096
MAX_IDS = 4096
MAX_KEY_LEN = 512
MAX_ARGS = 64  # entries in a request's args map
MAX_SCALAR = 4 * MAX_KEY_LEN  # bytes of the longest str or bin the reader decodes (a key)
BAD_SHAPE = "a request is [req_id: int, op: str, args: map]"
TRAILING = "trailing bytes after the request"
KEYS_TOO_MANY = ("too_large", f"at most {MAX_KEYS} keys per request")
IDS_TOO_MANY = ("too_large", f"at most {MAX_IDS} ids per request")


class BadRequest(RemoteProtocolError):
    """A request that cannot be served; carries the error code sent back to the peer and,
    when the request got that far, its req_id."""

    def __init__(self, code: str, message: str, req_id: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.req_id = req_id


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


def pack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def unpack(data: bytes) -> Any:
    """Decode msgpack; raises RemoteProtocolError for anything that is not one valid value."""
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError,
            msgpack.StackError) as exc:
        raise RemoteProtocolError(f"invalid msgpack: {exc}") from None


def encode_request(req_id: int, op: str, args: dict[str, Any]) -> bytes:
    return pack([req_id, op, args])


# -- the request reader ---------------------------------------------------------------------
#
# A request is read once, in one pass, and only what its op uses is decoded. Where a scalar
# belongs (an argument the op does not use, a key, an id, an element of `keys`) an array or
# map is refused at once, from its first byte: skipping it could mean walking millions of
# nested values. Arrays are checked against their cap from their header before any element
# exists, strings and byte strings longer than a key are skipped without being built, and a
# put's body is kept as its bytes. So the memory and time a request costs are bounded by its
# op's limits, not by what the sender packed into it.


@dataclass(frozen=True, slots=True)
class Array:
    """An argument that is an array (or, with `of_pairs`, a map) of scalars, at most `cap`
    long; a longer one is refused with `error` (code, message) before its elements are read."""

    cap: int
    error: tuple[str, str]
    of_pairs: bool = False


SCALAR, RAW = "scalar", "raw"
ArgKind = Array | str
Schema = dict[str, dict[str, ArgKind]]

REQUESTS: Schema = {
    "ping": {}, "stats": {},
    "heads": {"keys": Array(MAX_KEYS, KEYS_TOO_MANY),
              "expect": Array(MAX_KEYS, ("too_large", f"at most {MAX_KEYS} expected ids"),
                              of_pairs=True), "short": SCALAR},
    "get": {"ids": Array(MAX_IDS, IDS_TOO_MANY)},
    "put": {"key": SCALAR, "kind": SCALAR, "body": RAW,
            "parents": Array(MAX_PARENTS, ("bad_request", f"'parents' must be an array of at "
                                                          f"most {MAX_PARENTS} ids"))},
    "subscribe": {"keys": Array(MAX_KEYS, KEYS_TOO_MANY), "every": SCALAR, "group": SCALAR},
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
    if plain is not None:
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
        self.unpacker = msgpack.Unpacker(raw=False, max_str_len=MAX_SCALAR,
                                         max_bin_len=MAX_SCALAR, max_ext_len=MAX_SCALAR,
                                         max_buffer_size=max(len(data), 1))
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
            name = self.scalar("args") if _is_str(self.peek()) else None
            if not isinstance(name, str):
                raise ValueError("argument names must be strings")
            kind = kinds.get(name)
            if kind is None:  # an argument this op does not use: dropped
                if _is_array(self.peek()) or _is_map(self.peek()):
                    raise self.fail("bad_request", f"unknown argument {name!r}: only a "
                                                   f"string, id or number is ignored")
                self.scalar(name)
            elif kind == RAW:
                start = self.unpacker.tell()
                self.unpacker.skip()
                args[name] = RawValue(self.data[start:self.unpacker.tell()])
            elif kind == SCALAR:
                args[name] = self.scalar(name)
            else:
                assert isinstance(kind, Array)
                args[name] = self.array(name, kind)
        return args

    def array(self, name: str, kind: Array) -> Any:
        head = self.peek()
        if not (_is_map(head) if kind.of_pairs else _is_array(head)):
            if _is_array(head) or _is_map(head):
                raise self.fail("bad_request", f"{name!r} must be "
                                               f"{'a map' if kind.of_pairs else 'an array'}")
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
        head = self.peek()
        if _is_array(head) or _is_map(head):
            where = f"in {name!r}" if name else "there"
            raise self.fail("bad_request", f"an array or map {where} where a string, id or "
                                           f"number belongs")
        if _scalar_length(self.data, self.unpacker.tell(), head) > MAX_SCALAR:
            self.unpacker.skip()
            return INVALID
        return self.unpacker.unpack()

    def end(self) -> None:
        if self.unpacker.tell() != len(self.data):
            raise ValueError(TRAILING)


def _is_array(head: int) -> bool:
    return 0x90 <= head <= 0x9F or head in (0xDC, 0xDD)


def _is_map(head: int) -> bool:
    return 0x80 <= head <= 0x8F or head in (0xDE, 0xDF)


def _is_str(head: int) -> bool:
    return 0xA0 <= head <= 0xBF or head in (0xD9, 0xDA, 0xDB)


def _is_int_type(head: int) -> bool:
    return head <= 0x7F or head >= 0xE0 or 0xCC <= head <= 0xD3


_LENGTH_BYTES = {0xD9: 1, 0xDA: 2, 0xDB: 4, 0xC4: 1, 0xC5: 2, 0xC6: 4, 0xC7: 1, 0xC8: 2,
                 0xC9: 4}


def _scalar_length(data: bytes, position: int, head: int) -> int:
    """Payload length of the str, bin or ext starting at `position` (0 for other scalars)."""
    if 0xA0 <= head <= 0xBF:
        return head & 0x1F
    size = _LENGTH_BYTES.get(head)
    if size is None:
        return 0
    return int.from_bytes(data[position + 1:position + 1 + size], "big")


def request_id_of(data: bytes) -> int | None:
    """The req_id of a request, also of a malformed one when its first element is an
    integer (so its error can be addressed); else None."""
    try:
        return decode_request(data).req_id
    except BadRequest as exc:
        return exc.req_id


def encode_response(req_id: int, ok: bool, result: dict[str, Any]) -> bytes:
    return pack([req_id, ok, result])


def encode_error(req_id: int | None, code: str, message: str) -> bytes:
    """An error response; `req_id` None (a request too broken to name one) is sent as -1."""
    return pack([req_id if req_id is not None else -1, False,
                 {"code": code, "message": message}])


def decode_response(data: bytes) -> Response:
    """Parse a response; raises RemoteProtocolError when malformed."""
    value = unpack(data)
    if (not isinstance(value, list) or len(value) != 3 or not _is_int(value[0])
            or not isinstance(value[1], bool) or not isinstance(value[2], dict)):
        raise RemoteProtocolError("a response is [req_id: int, ok: bool, result: map]")
    return Response(value[0], value[1], value[2])


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _key_list(args: dict[str, Any], name: str = "keys") -> list[str]:
    keys = args.get(name)
    if not isinstance(keys, list) or not keys:
        raise BadRequest("bad_request", f"'{name}' must be a non-empty array of strings")
    if len(keys) > MAX_KEYS:
        raise BadRequest("too_large", f"at most {MAX_KEYS} keys per request")
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
        raise BadRequest("too_large", f"at most {MAX_KEYS} keys per request")
    for key, rid in expect.items():
        _check_key(key)
        _check_id(rid, f"expect[{key!r}]")
    return keys, expect


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
        raise BadRequest("too_large", f"at most {MAX_IDS} ids per request")
    return [_check_id(rid) for rid in ids]


def parse_put(args: dict[str, Any]) -> tuple[str, str, list[bytes], Any]:
    """`put` args: {"key", "kind", "parents", "body"}."""
    key = _check_key(args.get("key"))
    kind = args.get("kind", "fact")
    if not isinstance(kind, str) or not kind or len(kind) > 64:
        raise BadRequest("bad_request", "'kind' must be a string of 1 to 64 chars")
    parents = args.get("parents", [])
    if not isinstance(parents, list) or len(parents) > MAX_PARENTS:
        raise BadRequest("bad_request", f"'parents' must be an array of at most "
                                        f"{MAX_PARENTS} ids")
    if "body" not in args:
        raise BadRequest("bad_request", "'body' is required")
    return key, kind, [_check_id(p, "parent") for p in parents], args["body"]


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


def parse_ack(args: dict[str, Any]) -> tuple[str, int]:
    """`ack` args: {"group": name, "seq": n}: every push of the group up to seq n is applied."""
    seq = args.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise BadRequest("bad_request", "'seq' must be a non-negative integer")
    return _group(args), seq


def parse_synced(args: dict[str, Any]) -> tuple[str, list[str]]:
    """`synced` args: {"group": name, "keys": [...]}: wait until the group has every update."""
    return _group(args), _key_list(args)
