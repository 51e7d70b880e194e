"""Step 3 of the gate, sans-IO: is one owner's heads answer well formed and honest?

Each requested key must come back exactly once, well typed; a changed key must come with its
record inline, and that record must verify, belong to the answering owner and move the key's
seq forward. `check_answer` raises Malformed naming the first thing wrong.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import ConfigError, RecordError
from .records import ID_LEN, Record, record_from_wire, verify
from .roster import Roster


class ReadOnlyDict(dict):  # type: ignore[type-arg]
    """A dict that refuses to change: one value shared by every warm decision (a gate's
    memoised queries, a decision's evidence) instead of a copy per decision. It equals,
    prints, packs (msgpack) and serialises (JSON) as the plain dict it holds; changing it
    raises TypeError."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("this dict is shared and read-only: copy it with dict(...) to change it")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (dict(self),))


@dataclass(frozen=True, slots=True)
class HeadsQuery:
    """One owner's batched heads request; `expect` holds the frontier ids of its keys.

    The gate's queries are shared by its warm decisions: their `expect` is a ReadOnlyDict,
    and `args` then holds the query's `heads` request args (read-only, built once, what
    `drive.heads_args` returns); None for a query with a plain dict, which may change.
    """

    keys: tuple[str, ...]
    expect: dict[str, bytes]
    args: dict[str, Any] | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if type(self.expect) is ReadOnlyDict:
            object.__setattr__(self, "args", ReadOnlyDict(request_args(self.keys, self.expect)))


def request_args(keys: tuple[str, ...], expect: dict[str, bytes]) -> dict[str, Any]:
    """A heads request's args: `expect` alone when it names every key (each key once), and
    `short` rows for keys still at their expected id (the gate knows those ids). They hold
    `expect` itself (not a copy)."""
    if list(expect) == list(keys):
        return {"expect": expect, "short": True}
    return {"keys": list(keys), "expect": expect, "short": True}


Verify = Callable[[Record], None]  # raises RecordError (or ConfigError) for a bad record


class Malformed(Exception):
    """An owner's answer broke step 3; the message says how."""


@dataclass(frozen=True, slots=True)
class Unchanged:
    """An owner's whole answer when every key of its query is still at the frontier's
    version: `rows` as it sends them ([key, seq], short), `heads` as `check_answer` reads
    them (read-only: `check_answer` returns it as is)."""

    rows: list[list[Any]]
    heads: dict[str, tuple[bytes | None, int]]


def unchanged_answer(query: HeadsQuery, frontier: dict[str, Record]) -> Unchanged | None:
    """The `Unchanged` answer to `query`, or None when one of its keys is not expected at
    the frontier's version (there is then no such answer to compare with)."""
    used = [frontier.get(key) for key in query.keys]
    if len(query.expect) != len(query.keys) or any(
        record is None or query.expect.get(record.key) != record.id for record in used
    ):
        return None
    present = [record for record in used if record is not None]
    rows: list[list[Any]] = [[record.key, record.seq] for record in present]
    return Unchanged(rows, ReadOnlyDict({r.key: (query.expect[r.key], r.seq) for r in present}))


def check_answer(
    owner: str,
    query: HeadsQuery,
    result: object,
    frontier: dict[str, Record],
    verify: Callable[[Record], None],
    unchanged: Unchanged | None = None,
) -> tuple[dict[str, tuple[bytes | None, int]], dict[str, Record]]:
    """Step 3 for one owner: return its heads and its verified changed records.

    `unchanged` (from `unchanged_answer` for the same query and frontier) lets an answer
    that is exactly it be accepted in one comparison: it is what the checks below accept
    and return for an owner whose every key is unchanged (its heads are then `unchanged.heads`
    itself, read-only). Raises Malformed naming the first thing wrong with the answer.
    """
    if not isinstance(result, dict) or not isinstance(result.get("heads"), list):
        raise Malformed("answer is not a map with a 'heads' list")
    if (
        unchanged is not None
        and result["heads"] == unchanged.rows
        and result.get("records", _NO_RECORDS) == []
        and _int_seqs(result["heads"])  # == takes True for 1
    ):
        return unchanged.heads, {}
    heads = _check_heads(query, result["heads"], frontier)
    raw_records = result.get("records", [])
    if not isinstance(raw_records, list):
        raise Malformed("'records' is not a list")
    inline = _check_inline(owner, query, heads, raw_records, frontier, verify)
    for key in query.expect:
        head, _ = heads[key]
        if head != query.expect[key] and key not in inline:
            raise Malformed(f"key {key!r} changed but its record was not sent inline")
    return heads, inline


_NO_RECORDS: list[Any] = []  # an answer without "records" (never changed)


def _int_seqs(rows: list[list[Any]]) -> bool:
    """True when every row's seq is an int (not a bool): a loop, no generator per answer."""
    for row in rows:
        if type(row[1]) is not int:
            return False
    return True


def _check_heads(
    query: HeadsQuery, entries: list[Any], frontier: dict[str, Record]
) -> dict[str, tuple[bytes | None, int]]:
    heads: dict[str, tuple[bytes | None, int]] = {}
    requested = frozenset(query.keys)  # d keys: a tuple scan per row would cost d^2
    for index, entry in enumerate(entries):
        key, head, seq = _check_entry(index, entry, query.expect)
        if key not in requested:
            raise Malformed(f"head for key {key!r} that was not requested")
        if key in heads:
            raise Malformed(f"key {key!r} answered twice")
        used = frontier.get(key)
        if head is None and used is not None:
            raise Malformed(f"no head for key {key!r} although the plan used a version of it")
        if used is not None and head == used.id and seq != used.seq:
            raise Malformed(f"head of {key!r} has seq {seq}, its record has {used.seq}")
        heads[key] = (head, seq)
    absent = [key for key in query.keys if key not in heads]
    if absent:
        raise Malformed(f"requested keys not answered: {', '.join(absent)}")
    return heads


def _check_entry(
    index: int,
    entry: object,
    expect: dict[str, bytes],
) -> tuple[str, bytes | None, int]:
    """One row: [key, id | nil, seq], or [key, seq] meaning "the id you expected"."""
    if not isinstance(entry, (list, tuple)) or len(entry) not in (2, 3):
        raise Malformed(f"head entry {index} is not a [key, id, seq] or [key, seq] array")
    key, head, seq = (entry[0], None, entry[1]) if len(entry) == 2 else entry
    if not isinstance(key, str):
        raise Malformed(f"head entry {index}: key is not a string")
    if len(entry) == 2:
        if key not in expect:
            raise Malformed(
                f"head entry {index} ({key!r}): [key, seq] for a key without an expected id"
            )
        head = expect[key]
    if head is not None and not (isinstance(head, bytes) and len(head) == ID_LEN):
        raise Malformed(f"head entry {index} ({key!r}): id is not {ID_LEN} bytes or nil")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise Malformed(f"head entry {index} ({key!r}): seq is not a non-negative integer")
    return key, head, seq


def _check_inline(
    owner: str,
    query: HeadsQuery,
    heads: dict[str, tuple[bytes | None, int]],
    raw_records: list[Any],
    frontier: dict[str, Record],
    verify: Callable[[Record], None],
) -> dict[str, Record]:
    inline: dict[str, Record] = {}
    by_head = {head: key for key, (head, _) in heads.items() if head is not None}
    for raw in raw_records:
        try:
            record = record_from_wire(raw)
        except RecordError as exc:
            raise Malformed(f"inline record rejected: {exc}") from None
        key = by_head.get(record.id)
        if key is None:
            raise Malformed(f"inline record for {record.key!r} is not the head of any key")
        if key != record.key:
            raise Malformed(f"inline record for {record.key!r} is given as the head of {key!r}")
        if record.owner != owner:
            raise Malformed(f"inline record for {key!r} is by {record.owner!r}, not its owner")
        try:
            verify(record)
        except (RecordError, ConfigError) as exc:
            raise Malformed(f"inline record rejected: {exc}") from None
        if key in inline or query.expect.get(key) == record.id:
            raise Malformed(f"inline record for {key!r} sent twice or for an unchanged key")
        if heads[key][1] != record.seq:
            raise Malformed(f"head of {key!r} has seq {heads[key][1]}, its record {record.seq}")
        if key in frontier and record.seq <= frontier[key].seq:
            raise Malformed(
                f"new record for {key!r} has seq {record.seq}, not above the "
                f"plan's {frontier[key].seq}"
            )
        inline[key] = record
    return inline


def verify_record(roster: Roster, record: Record) -> None:
    """Raise RecordError unless `record` verifies against `roster` (id, signature, owner)."""
    verify(record, public_key_of=roster.public_key_of, owner_of=roster.owner_of)


def verified_records(
    wires: object, verify: Verify, *, bad: Literal["drop", "raise"]
) -> list[Record]:
    """The records in `wires` (a list of wire arrays, as an owner sends them) that parse and
    pass `verify`: the one place records from elsewhere are read.

    `bad` is the policy for anything else: "drop" leaves it out (the gate treats it as never
    received; a `wires` that is not a list holds no records); "raise" raises RecordError for
    the first one (ConfigError from `verify` when the roster cannot decide), for a caller that
    must not act on a partial answer.
    """
    if not isinstance(wires, list):
        if bad == "raise" and wires is not None:
            raise RecordError("format", "'records' is not a list")
        return []
    records = []
    for wire in wires:
        try:
            record = record_from_wire(wire)
            verify(record)
        except (RecordError, ConfigError):  # ConfigError: a key with two owners
            if bad == "raise":
                raise
            continue
        records.append(record)
    return records


def verifier(roster: Roster, known: Mapping[bytes, Record] | None = None) -> Verify:
    """`verify_record` against `roster`, as the one-argument check `verified_records` and the
    gate take. A record equal, field for field, to the one `known` holds under its id (records
    already verified against this roster: an executor's replica) passes without a second
    signature check: the changed record every executor of a process is sent inline, or the
    new plan each of them walks, is then verified once."""
    if known is None:
        return functools.partial(verify_record, roster)

    def verify_once(record: Record) -> None:
        if known.get(record.id) != record:
            verify_record(roster, record)

    return verify_once


def omitted_ids(result: object, asked: list[bytes]) -> list[bytes]:
    """The ids an owner's `get` answer lists as `omitted` (no room for them in its reply), in
    the order asked. Only ids that were asked count: an answer cannot widen a request."""
    listed = result.get("omitted", []) if isinstance(result, dict) else []
    wanted = (
        set(listed)
        if isinstance(listed, list) and all(isinstance(i, bytes) for i in listed)
        else set()
    )
    return [rid for rid in asked if rid in wanted]
