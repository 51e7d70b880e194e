"""Reply sizes decided before replies are built, and the bytes held for peers not reading.

A `get` or a `heads` with expected ids names records; their encoded sizes are read from the
store first (`Store.sizes`), duplicates collapse, and only the records that fit in one
reply are loaded: the rest are listed as `omitted` for the client to ask again. Large
replies then take their size from one `ByteBudget` shared by every session until they are
sent, so peers that never read cannot make the owner hold more than the budget; large
requests likewise take theirs from another until they have been answered.
"""

from __future__ import annotations

from typing import Any

import anyio

from ..core.errors import PlanfenceError
from ..core.records import wire_size_bound
from ..protocol.messages import BadRequest, RawValue, pack, unpack

ID_ENTRY = 2 + 32  # an id in a reply: bin 8 header and 32 bytes
# Room for everything in a reply but its records and omitted ids: the array, req_id, ok,
# map keys and array headers (a generous upper bound).
ENVELOPE = 256
# A reply holding one record of encoded size n takes at most n + ONE_RECORD bytes.
ONE_RECORD = ENVELOPE + ID_ENTRY
SMALL_REPLY = 64 * 1024  # replies this small are never held back by the budget


def fit_records(sizes: list[tuple[bytes, int]], room: int) -> tuple[list[bytes], list[bytes]]:
    """Split records (id, encoded size), in the order asked, into those that fit in `room`
    bytes together with the ids of the rest, and those omitted. A record is never split."""
    chosen: list[bytes] = []
    omitted: list[bytes] = []
    used = ID_ENTRY * len(sizes)  # as if every id were omitted: an upper bound
    for rid, size in sizes:
        if not omitted and used + size <= room:
            chosen.append(rid)
            used += size
        else:
            omitted.append(rid)
    return chosen, omitted


def check_readable(
    key: str, owner: str, kind: str, parents: list[bytes], body: Any, max_message: int
) -> None:
    """Refuse (BadRequest) a put whose record could not be read back in one reply of
    `max_message` bytes ("too_large"), or whose body is not one valid msgpack value
    ("bad_request"; a body is decoded only for this check, on the owner's own session)."""
    raw = body.data if isinstance(body, RawValue) else pack(body)
    size = wire_size_bound(key, owner, kind, parents, len(raw)) + ONE_RECORD
    if size > max_message:
        raise BadRequest(
            "too_large",
            f"a record of {size} bytes could not be read back "
            f"in one reply of at most {max_message} bytes",
        )
    try:
        unpack(raw)
    except PlanfenceError as exc:
        raise BadRequest("bad_request", f"body: {exc}") from None


def rows_size(rows: list[list[Any]]) -> int:
    """An upper bound of the encoded size of `heads` rows [key, id | nil, seq], without
    encoding them (the reply encodes them once)."""
    return 5 + sum(1 + 5 + len(row[0].encode()) + 2 + 32 + 9 for row in rows)


def unique(items: list[bytes]) -> list[bytes]:
    """`items` without repeats, first occurrences in order."""
    return list(dict.fromkeys(items))


class ByteBudget:
    """Bytes of large messages the daemon holds at once, over all sessions: requests
    received and not yet answered, or replies being built or waiting to be sent.

    `wait_reserve(n)` waits until `n` bytes are free (n is clamped to the capacity, so one
    message can always proceed alone); `release(n)` gives them back. Messages under
    SMALL_REPLY take nothing: a ping is never held back by someone else's large ones.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self.waits = 0
        self._freed = anyio.Event()

    async def wait_reserve(self, size: int) -> int:
        """Reserve room for `size` bytes; returns what to pass to `release`."""
        if size < SMALL_REPLY:
            return 0
        size = min(size, self.capacity)
        while self.used + size > self.capacity:
            self.waits += 1
            await self._freed.wait()
        self.used += size
        return size

    def release(self, size: int) -> None:
        if size:
            self.used -= size
            self._freed.set()
            self._freed = anyio.Event()
