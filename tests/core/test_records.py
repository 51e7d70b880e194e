"""Records and identities, no network: ids, signatures, verification, wire form, key files."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
from pathlib import Path
from typing import Any

import msgpack
import pytest
from nacl.bindings import crypto_scalarmult_base, crypto_sign_ed25519_pk_to_curve25519
from nacl.signing import SigningKey

from planfence_net.core.answers import verifier
from planfence_net.core.errors import ConfigError, RecordError
from planfence_net.core.identity import generate_key_file, load_identity
from planfence_net.core.records import (
    Record,
    encode_body,
    make_record,
    record_from_wire,
    record_id,
    verify,
    wire_from_bytes,
)
from planfence_net.core.roster import roster_from_dict

SEED = bytes(range(32))
KEY = SigningKey(SEED)
OTHER = SigningKey(bytes(range(100, 132)))
# Golden values for SEED: a change of the canonical encoding breaks every stored id.
GOLDEN_ID = "7ac1f4408a04e58a38f5f5f3d308a96cd5306a8a9f39d7a2cb2ed3d4ed95d67e"
GOLDEN_SIG = (
    "ba96e6e6c499c41ada338fb9e2d3ebde33f760011d18d501bc19d6e2cc151119"
    "47c3e42ef0c7c9c27a033904588642d8bfd8036e4777b36a0e7675eab660d308"
)
GOLDEN_WIRE = (
    "99a3706631ac7265712f6f726465722d3137a4726571730190a466616374c40e82a37174790"
    "3a3736b75a3412d310ec440" + GOLDEN_SIG
)

ROSTER = roster_from_dict(
    {
        "cluster": "t",
        "agents": [
            {
                "name": "reqs",
                "address": "127.0.0.1:1",
                "public_key": bytes(KEY.verify_key).hex(),
                "owns": ["req/*"],
            },
            {
                "name": "planner",
                "address": "127.0.0.1:2",
                "public_key": bytes(OTHER.verify_key).hex(),
                "owns": ["plan/*"],
            },
        ],
    }
)


def sample(**overrides: Any) -> Record:
    fields: dict[str, Any] = dict(
        key="req/order-17",
        owner="reqs",
        seq=1,
        parents=[],
        kind="fact",
        body={"qty": 3, "sku": "A-1"},
    )
    fields.update(overrides)
    return make_record(KEY, **fields)


def check(record: Record, **kwargs: Any) -> None:
    verify(record, public_key_of=ROSTER.public_key_of, owner_of=ROSTER.owner_of, **kwargs)


# -- ids ---------------------------------------------------------------------------------------


def test_id_is_blake2b_256_of_the_fixed_order_msgpack_array() -> None:
    record = sample()
    body_raw = msgpack.packb({"qty": 3, "sku": "A-1"}, use_bin_type=True)
    canonical = msgpack.packb(
        ["pf1", "req/order-17", "reqs", 1, [], "fact", body_raw, len(body_raw)], use_bin_type=True
    )
    assert record.id == hashlib.blake2b(canonical, digest_size=32).digest()
    assert record.id.hex() == GOLDEN_ID
    assert record.signature.hex() == GOLDEN_SIG
    assert record.size == 14 and record.body_raw.hex() == "82a371747903a3736b75a3412d31"


def test_id_is_deterministic_and_covers_every_signed_field() -> None:
    base = sample()
    assert sample().id == base.id and sample().signature == base.signature
    parent = sample(seq=9).id
    variants = [
        sample(key="req/order-18"),
        sample(owner="planner"),
        sample(seq=2),
        sample(parents=[parent]),
        sample(kind="plan"),
        sample(body={"qty": 4, "sku": "A-1"}),
    ]
    ids = {v.id for v in variants}
    assert len(ids) == len(variants) and base.id not in ids


def test_record_id_function_matches_make_record() -> None:
    record = sample(parents=[sample(seq=5).id])
    assert (
        record_id(
            record.key, record.owner, record.seq, record.parents, record.kind, record.body_raw
        )
        == record.id
    )


def test_parent_order_is_kept_and_changes_the_id() -> None:
    a, b = sample(seq=2).id, sample(seq=3).id
    ab, ba = sample(seq=4, parents=[a, b]), sample(seq=4, parents=[b, a])
    assert ab.parents == (a, b) and ba.parents == (b, a)
    assert ab.id != ba.id


def test_body_map_order_is_preserved_not_sorted() -> None:
    forward = sample(body={"b": 1, "a": 2})
    backward = sample(body={"a": 2, "b": 1})
    assert list(forward.body) == ["b", "a"] and list(backward.body) == ["a", "b"]
    assert forward.body_raw == bytes.fromhex("82a16201a16102")
    assert forward.id != backward.id


def test_body_bytes_are_hashed_as_written_even_if_reencoding_differs() -> None:
    # A 64-bit encoding of 1 decodes to 1 but re-encodes as one byte: the id keeps the original.
    original = sample()
    wide_body = bytes.fromhex("81a178cf0000000000000001")  # {"x": uint64 1}
    rid = record_id("req/order-17", "reqs", 1, (), "fact", wide_body)
    wire = [
        "pf1",
        "req/order-17",
        "reqs",
        1,
        [],
        "fact",
        wide_body,
        len(wide_body),
        KEY.sign(rid).signature,
    ]
    record = record_from_wire(wire)
    assert record.body == {"x": 1} and record.body_raw == wide_body and record.id == rid
    assert record.id != original.id
    check(record)


def test_to_json_gives_lowercase_hex_ids() -> None:
    parent = sample(seq=1)
    record = sample(seq=2, parents=[parent.id])
    assert record.to_json() == {
        "id": record.id.hex(),
        "key": "req/order-17",
        "owner": "reqs",
        "seq": 2,
        "parents": [parent.id.hex()],
        "kind": "fact",
        "body": {"qty": 3, "sku": "A-1"},
        "size": 14,
        "signature": record.signature.hex(),
    }
    assert record.to_json()["id"] == record.id.hex().lower()


# -- wire form ---------------------------------------------------------------------------------


def test_wire_form_is_the_nine_element_array() -> None:
    record = sample()
    wire = record.to_wire()
    assert wire == [
        "pf1",
        "req/order-17",
        "reqs",
        1,
        [],
        "fact",
        record.body_raw,
        14,
        record.signature,
    ]
    assert msgpack.packb(wire, use_bin_type=True).hex() == GOLDEN_WIRE


def test_wire_round_trip_through_msgpack() -> None:
    record = sample(
        seq=3,
        parents=[sample().id, sample(seq=2).id],
        kind="plan",
        body=[1, "two", {"three": b"\x03"}],
    )
    again = record_from_wire(
        msgpack.unpackb(msgpack.packb(record.to_wire(), use_bin_type=True), raw=False)
    )
    assert again == record
    check(again)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda w: w[:8], "a record must be an array of 9 fields"),
        (lambda w: "not an array", "a record must be an array of 9 fields"),
        (lambda w: ["pf2", *w[1:]], "unknown record format 'pf2'"),
        (lambda w: [*w[:1], "", *w[2:]], "key must be a non-empty string"),
        (lambda w: [*w[:2], 7, *w[3:]], "owner must be a non-empty string"),
        (lambda w: [*w[:3], 0, *w[4:]], "seq must be a positive integer"),
        (lambda w: [*w[:3], True, *w[4:]], "seq must be a positive integer"),
        (lambda w: [*w[:4], "x", *w[5:]], "parents must be an array"),
        (lambda w: [*w[:4], [b"short"], *w[5:]], "every parent must be a 32-byte record id"),
        (
            lambda w: [*w[:4], [bytes(32)] * 257, *w[5:]],
            "parents must be a list of at most 256 ids",
        ),
        (lambda w: [*w[:5], "", *w[6:]], "kind must be a non-empty string"),
        (lambda w: [*w[:6], "text body", *w[7:]], "body must be bytes whose length equals size"),
        (lambda w: [*w[:7], 15, w[8]], "body must be bytes whose length equals size"),
        (lambda w: [*w[:8], b"\x00" * 63], "signature must be 64 bytes"),
    ],
)
def test_malformed_wire_records_fail_the_format_check(mutate: Any, message: str) -> None:
    with pytest.raises(RecordError) as info:
        record_from_wire(mutate(sample().to_wire()))
    assert info.value.what == "format"
    assert str(info.value) == message


def test_unencodable_body_is_a_format_error() -> None:
    with pytest.raises(RecordError) as info:
        encode_body({"x": object()})
    assert info.value.what == "format"
    assert str(info.value).startswith("body cannot be encoded as msgpack: ")


# -- verification ------------------------------------------------------------------------------


def test_verify_accepts_a_good_record_and_its_expected_id() -> None:
    record = sample()
    check(record)
    check(record, expected_id=record.id)


def test_verify_refuses_a_record_whose_fields_do_not_hash_to_its_id() -> None:
    tampered = dataclasses.replace(sample(), seq=2)
    with pytest.raises(RecordError) as info:
        check(tampered)
    assert (info.value.what, str(info.value)) == (
        "id",
        "record for 'req/order-17' does not hash to its id",
    )


def test_verify_refuses_a_record_other_than_the_expected_one() -> None:
    with pytest.raises(RecordError) as info:
        check(sample(), expected_id=sample(seq=2).id)
    assert info.value.what == "id"


def test_verify_refuses_a_bad_signature() -> None:
    record = sample()
    flipped = bytes([record.signature[0] ^ 1]) + record.signature[1:]
    with pytest.raises(RecordError) as info:
        check(dataclasses.replace(record, signature=flipped))
    assert (info.value.what, str(info.value)) == (
        "signature",
        "bad signature on record for 'req/order-17' by 'reqs'",
    )


def test_verify_refuses_a_record_signed_by_another_agents_key() -> None:
    forged = make_record(
        OTHER, key="req/order-17", owner="reqs", seq=1, parents=[], kind="fact", body=1
    )
    with pytest.raises(RecordError) as info:
        check(forged)
    assert info.value.what == "signature"


def test_verify_refuses_an_owner_outside_the_roster() -> None:
    record = sample(owner="mallory")
    with pytest.raises(RecordError) as info:
        check(record)
    assert (info.value.what, str(info.value)) == (
        "owner",
        "record owner 'mallory' is not in the roster",
    )


def test_verify_refuses_a_member_writing_a_key_it_does_not_own() -> None:
    by_planner = make_record(
        OTHER, key="req/order-17", owner="planner", seq=1, parents=[], kind="fact", body=1
    )
    with pytest.raises(RecordError) as info:
        check(by_planner)
    assert (info.value.what, str(info.value)) == (
        "owner",
        "'planner' does not own key 'req/order-17' (owner: reqs)",
    )
    nobody = sample(key="zzz/1")
    with pytest.raises(RecordError) as info:
        check(nobody)
    assert str(info.value) == "'reqs' does not own key 'zzz/1' (owner: nobody)"


# -- identities and key files ------------------------------------------------------------------


def test_generated_key_file_is_0600_hex_seed_and_loads(tmp_path: Path) -> None:
    path = tmp_path / "reqs.key"
    key = generate_key_file(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == bytes(key).hex() + "\n"
    identity = load_identity("reqs", path)
    assert identity.public_key == bytes(key.verify_key)
    # The Noise key is libsodium's Ed25519 -> X25519 conversion of the same key pair.
    assert crypto_scalarmult_base(identity.noise_private) == crypto_sign_ed25519_pk_to_curve25519(
        identity.public_key
    )


def test_generate_key_file_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "reqs.key"
    first = generate_key_file(path)
    with pytest.raises(ConfigError) as info:
        generate_key_file(path)
    assert str(info.value) == f"key file {path} already exists; refusing to overwrite it"
    assert path.read_text() == bytes(first).hex() + "\n"


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660, 0o610, 0o601])
def test_key_file_readable_by_group_or_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "reqs.key"
    generate_key_file(path)
    os.chmod(path, mode)
    with pytest.raises(ConfigError) as info:
        load_identity("reqs", path)
    assert str(info.value) == (
        f"key file {path} is accessible by group or others (mode {mode:o}); run: chmod 600 {path}"
    )


def test_key_file_0400_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "reqs.key"
    key = generate_key_file(path)
    os.chmod(path, 0o400)
    assert load_identity("reqs", path).public_key == bytes(key.verify_key)


def test_missing_and_malformed_key_files(tmp_path: Path) -> None:
    path = tmp_path / "reqs.key"
    with pytest.raises(ConfigError) as info:
        load_identity("reqs", path)
    assert str(info.value) == f"no key file for agent 'reqs' at {path}"
    for text in ("not hex\n", "00" * 31 + "\n"):
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, text.encode())
        os.close(fd)
        with pytest.raises(ConfigError) as info:
            load_identity("reqs", path)
        assert str(info.value) == f"key file {path} must hold a 32-byte seed as hex"


# -- reading a record's wire array from bytes -----------------------------------------------------


def test_wire_from_bytes_reads_what_to_wire_wrote() -> None:
    record = sample(parents=[bytes(32), bytes(range(32))])
    assert wire_from_bytes(msgpack.packb(record.to_wire())) == record.to_wire()
    assert wire_from_bytes(bytes.fromhex(GOLDEN_WIRE)) == msgpack.unpackb(
        bytes.fromhex(GOLDEN_WIRE)
    )


@pytest.mark.parametrize(
    "wire, message",
    [
        (b"\x93\x01\x02\x03", "a record must be an array of 9 fields"),
        (b"\x81\xa1a\x01", "not a record: Unexpected type header on stream"),
        (
            b"\x99\xa3pf1\xdd\x00\x10\x00\x00" + b"\x90" * 8,
            "an array or map where a record field belongs",
        ),
        (
            b"\x99" + b"\x01" * 4 + b"\xdc\x01\x01" + b"\xc4\x00" * 257,
            "a record has at most 256 parents",
        ),
        (
            b"\x99" + b"\x01" * 4 + b"\x91\x90" + b"\x01" * 4,
            "an array or map where a record field belongs",
        ),
        (
            b"\x99" + b"\x01" * 4 + b"\x90" + b"\x01" * 4 + b"\x01",
            "trailing bytes after the record",
        ),
        (b"\x99\x01", "not a record: No more data to unpack."),
    ],
)
def test_wire_from_bytes_refuses_what_no_record_holds_before_building_it(
    wire: bytes, message: str
) -> None:
    with pytest.raises(RecordError) as info:
        wire_from_bytes(wire)
    assert (info.value.what, str(info.value)) == ("format", message)


def test_a_verifier_with_known_records_checks_each_record_once() -> None:
    """A record equal to a known (already verified) one passes without a signature check;
    any other record with the same id, or one not known, is checked in full."""
    record = sample()
    forged = dataclasses.replace(record, signature=bytes(64))  # same id, signature not the owner's
    with pytest.raises(RecordError):
        verifier(ROSTER)(forged)
    # trusted as known (the caller vouches it verified it): not checked again
    verifier(ROSTER, {forged.id: forged})(forged)
    # known under its id, but this one is not the known one: checked, and refused
    with pytest.raises(RecordError) as info:
        verifier(ROSTER, {record.id: record})(forged)
    assert info.value.what == "signature"
    verifier(ROSTER, {record.id: record})(record)
    with pytest.raises(RecordError):
        verifier(ROSTER, {})(forged)
