"""Immutable, signed, content-addressed records (docs/PROTOCOL.md section 8).

A record's id is the BLAKE2b-256 hash of a fixed-order msgpack array of every field but the
signature. The body is hashed as the exact msgpack bytes it was written with (`body_raw`),
so decoding and re-encoding a body (map order, int widths) can never change an id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from .errors import RecordError

ID_LEN = 32
RECORD_FORMAT = "pf1"
MAX_PARENTS = 256


@dataclass(frozen=True, slots=True)
class Record:
    """One immutable public version of a semantic key."""

    key: str
    owner: str
    seq: int
    parents: tuple[bytes, ...]
    kind: str
    body_raw: bytes
    signature: bytes
    id: bytes

    @property
    def size(self) -> int:
        """Size of the encoded body in bytes."""
        return len(self.body_raw)

    @property
    def body(self) -> Any:
        """The body as a decoded msgpack value."""
        return msgpack.unpackb(self.body_raw, raw=False)

    def to_wire(self) -> list[Any]:
        """The record as a msgpack-ready array: the signed fields followed by the signature."""
        return [
            *_signed_fields(self.key, self.owner, self.seq, self.parents, self.kind, self.body_raw),
            self.signature,
        ]

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly view; ids are lowercase hex."""
        return {
            "id": self.id.hex(),
            "key": self.key,
            "owner": self.owner,
            "seq": self.seq,
            "parents": [p.hex() for p in self.parents],
            "kind": self.kind,
            "body": self.body,
            "size": self.size,
            "signature": self.signature.hex(),
        }


def _signed_fields(
    key: str, owner: str, seq: int, parents: tuple[bytes, ...], kind: str, body_raw: bytes
) -> list[Any]:
    return [RECORD_FORMAT, key, owner, seq, list(parents), kind, body_raw, len(body_raw)]


def record_id(
    key: str, owner: str, seq: int, parents: tuple[bytes, ...], kind: str, body_raw: bytes
) -> bytes:
    """BLAKE2b-256 over the canonical msgpack array of the signed fields."""
    canonical: bytes = msgpack.packb(
        _signed_fields(key, owner, seq, parents, kind, body_raw), use_bin_type=True
    )
    return hashlib.blake2b(canonical, digest_size=ID_LEN).digest()


def encode_body(body: Any) -> bytes:
    """Encode a body value as msgpack; raises RecordError for values msgpack cannot encode."""
    try:
        encoded: bytes = msgpack.packb(body, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise RecordError("format", f"body cannot be encoded as msgpack: {exc}") from exc
    return encoded


def make_record(
    signing_key: SigningKey,
    *,
    key: str,
    owner: str,
    seq: int,
    parents: tuple[bytes, ...] | list[bytes],
    kind: str,
    body: Any = None,
    body_raw: bytes | None = None,
) -> Record:
    """Create and sign a record as `owner`. The caller is responsible for `seq` ordering.

    The body is `body` encoded as msgpack, or `body_raw` taken as is when given (the bytes
    a client sent: encoding them again could change them, e.g. a float32 into a float64).
    """
    parents = tuple(parents)
    _check_shape(key, owner, seq, parents, kind)
    if body_raw is None:
        body_raw = encode_body(body)
    rid = record_id(key, owner, seq, parents, kind, body_raw)
    signature = signing_key.sign(rid).signature
    return Record(key, owner, seq, parents, kind, body_raw, signature, rid)


def wire_size_bound(
    key: str, owner: str, kind: str, parents: tuple[bytes, ...] | list[bytes], body_len: int
) -> int:
    """An upper bound of the encoded wire form of a record with these fields and a body of
    `body_len` bytes, whatever its seq (used to refuse a record that could not be read back)."""
    fixed = msgpack.packb(
        [RECORD_FORMAT, key, owner, 2**64 - 1, list(parents), kind, b"", 2**64 - 1, bytes(64)],
        use_bin_type=True,
    )
    return len(fixed) + 4 + body_len  # bin 8 header of the empty body grows to bin 32


def _check_shape(key: Any, owner: Any, seq: Any, parents: Any, kind: Any) -> None:
    if not isinstance(key, str) or not key:
        raise RecordError("format", "key must be a non-empty string")
    if not isinstance(owner, str) or not owner:
        raise RecordError("format", "owner must be a non-empty string")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise RecordError("format", "seq must be a positive integer")
    if not isinstance(kind, str) or not kind:
        raise RecordError("format", "kind must be a non-empty string")
    if not isinstance(parents, tuple) or len(parents) > MAX_PARENTS:
        raise RecordError("format", f"parents must be a list of at most {MAX_PARENTS} ids")
    for parent in parents:
        if not isinstance(parent, bytes) or len(parent) != ID_LEN:
            raise RecordError("format", "every parent must be a 32-byte record id")


PARENTS_FIELD = 4  # the one field of a record's wire array that is itself an array


def wire_from_bytes(data: bytes) -> list[Any]:
    """The wire array of one record encoded as msgpack in `data`, read field by field so
    that nothing a record cannot hold is built (16 MiB of nested empty arrays would be a
    million lists): 9 fields, each a scalar except `parents`, an array of at most
    MAX_PARENTS scalars. Raises RecordError("format") for anything else; `record_from_wire`
    checks the fields themselves."""
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max(len(data), 1))
    unpacker.feed(data)
    try:
        if unpacker.read_array_header() != 9:
            raise RecordError("format", "a record must be an array of 9 fields")
        fields: list[Any] = []
        for index in range(9):
            if index != PARENTS_FIELD:
                fields.append(_scalar(unpacker, data))
                continue
            count = unpacker.read_array_header()
            if count > MAX_PARENTS:
                raise RecordError("format", f"a record has at most {MAX_PARENTS} parents")
            fields.append([_scalar(unpacker, data) for _ in range(count)])
    except (ValueError, msgpack.OutOfData, msgpack.StackError) as exc:
        raise RecordError("format", f"not a record: {str(exc) or type(exc).__name__}") from None
    if unpacker.tell() != len(data):
        raise RecordError("format", "trailing bytes after the record")
    return fields


def _scalar(unpacker: msgpack.Unpacker, data: bytes) -> Any:
    """The next value, refused from its first byte when it is an array or map."""
    position = unpacker.tell()
    if position < len(data) and (
        0x80 <= data[position] <= 0x9F or data[position] in (0xDC, 0xDD, 0xDE, 0xDF)
    ):
        raise RecordError("format", "an array or map where a record field belongs")
    return unpacker.unpack()


def record_from_wire(value: Any) -> Record:
    """Parse a wire array into a Record, recomputing its id.

    Raises RecordError("format", ...) for anything that is not a well-formed record. The
    signature and ownership are not checked here: see `verify`.
    """
    if not isinstance(value, (list, tuple)) or len(value) != 9:
        raise RecordError("format", "a record must be an array of 9 fields")
    fmt, key, owner, seq, parents, kind, body_raw, size, signature = value
    if fmt != RECORD_FORMAT:
        raise RecordError("format", f"unknown record format {fmt!r}")
    if not isinstance(parents, (list, tuple)):
        raise RecordError("format", "parents must be an array")
    parents = tuple(parents)
    _check_shape(key, owner, seq, parents, kind)
    if not isinstance(body_raw, bytes) or size != len(body_raw):
        raise RecordError("format", "body must be bytes whose length equals size")
    if not isinstance(signature, bytes) or len(signature) != 64:
        raise RecordError("format", "signature must be 64 bytes")
    rid = record_id(key, owner, seq, parents, kind, body_raw)
    return Record(key, owner, seq, parents, kind, body_raw, signature, rid)


# Signatures already found good, as (public key, record id, signature): Ed25519 verification
# is deterministic, so a long-lived process (the workspace owner answering hook calls, which
# reads the same plan lineage on every call) checks each one once. Bounded: cleared when full.
GOOD_SIGNATURES = 65536
_GOOD_SIGNATURES: set[tuple[bytes, bytes, bytes]] = set()


def verify(
    record: Record,
    *,
    public_key_of: Callable[[str], bytes | None],
    owner_of: Callable[[str], str | None],
    expected_id: bytes | None = None,
) -> None:
    """Check a record: its id, its owner's Ed25519 signature, and that its owner owns its key.

    `public_key_of(agent)` gives an agent's Ed25519 public key from the roster (None if unknown);
    `owner_of(key)` gives the agent owning a key. When `expected_id` is given the record must
    have exactly that id. Raises RecordError naming the failed check; returns None when valid.
    """
    rid = record_id(
        record.key, record.owner, record.seq, record.parents, record.kind, record.body_raw
    )
    if rid != record.id or (expected_id is not None and rid != expected_id):
        raise RecordError("id", f"record for {record.key!r} does not hash to its id")
    public_key = public_key_of(record.owner)
    if public_key is None:
        raise RecordError("owner", f"record owner {record.owner!r} is not in the roster")
    signed = (public_key, rid, record.signature)
    if signed not in _GOOD_SIGNATURES:
        try:
            VerifyKey(public_key).verify(rid, record.signature)
        except BadSignatureError as exc:
            raise RecordError(
                "signature", f"bad signature on record for {record.key!r} by {record.owner!r}"
            ) from exc
        if len(_GOOD_SIGNATURES) >= GOOD_SIGNATURES:
            _GOOD_SIGNATURES.clear()
        _GOOD_SIGNATURES.add(signed)
    owner = owner_of(record.key)
    if owner != record.owner:
        raise RecordError(
            "owner",
            f"{record.owner!r} does not own key {record.key!r} (owner: {owner or 'nobody'})",
        )
