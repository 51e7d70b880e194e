"""The fast path of the request reader, sans-IO: small, well-formed requests in one C call.

`requestread.decode_request` reads a request value by value, so that no request can make the
owner build more than its op's limits allow; that costs about 10 us per element in Python (a
heads request for 64 keys took 670 us). Most requests are small and well formed, so this
module first decodes them with msgpack in one call, with the same caps, and checks the
result has exactly the shape the careful reader would accept. Anything else (a put's raw
body, an unknown argument that is not a scalar, a value over a cap, a request larger than
PLAIN_MAX) returns None, and the careful reader reads it, answering with its own errors.
"""

from __future__ import annotations

from typing import Any

import msgpack

PLAIN_MAX = 64 * 1024  # bytes of the largest request decoded in one call
_NESTED = (list, dict)


def read_plain(
    data: bytes, schema: dict[str, dict[str, Any]], max_args: int, max_scalar: int
) -> tuple[int, str, dict[str, Any]] | None:
    """(req_id, op, args) of a small well-formed request, as the careful reader returns
    them; None when the careful reader must decide. `schema` maps op -> argument -> kind:
    "scalar", "raw" or an array kind (`cap`, `of_pairs`); an array of maps (a kind with
    `fields`: put_many's items, whose bodies are raw) is left to the careful reader."""
    if len(data) > PLAIN_MAX:
        return None
    try:
        value = msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=True,
            max_str_len=max_scalar,
            max_bin_len=max_scalar,
            max_ext_len=max_scalar,
        )
    except Exception:  # any msgpack complaint: the careful reader names it
        return None
    if type(value) is not list or len(value) != 3:
        return None
    req_id, op, args = value
    if type(req_id) is not int or type(op) is not str or type(args) is not dict:
        return None
    kinds = schema.get(op)
    if kinds is None or len(args) > max_args:
        return None
    read: dict[str, Any] = {}
    for name, arg in args.items():
        if type(name) is not str:
            return None
        kind = kinds.get(name)
        if kind is None or kind == "scalar":
            if type(arg) in _NESTED:
                return None
            if kind is not None:
                read[name] = arg
        elif kind == "raw" or hasattr(kind, "fields") or not _plain_array(arg, kind):
            return None
        else:
            read[name] = arg
    return req_id, op, read


def _plain_array(arg: Any, kind: Any) -> bool:
    """True when `arg` is what the careful reader makes of an array argument: a list (a
    dict for `of_pairs`) within the cap, of scalars only."""
    if type(arg) is not (dict if kind.of_pairs else list) or len(arg) > kind.cap:
        return False
    items = list(arg.values()) if type(arg) is dict else arg  # keys: str/bytes (strict)
    return not any(type(item) in _NESTED for item in items)
