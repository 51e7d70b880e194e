"""Tests of planfence_net.protocol.noise: published test vectors byte for byte, then failure behaviour.

The vectors ship with the tests in `tests/data/noise/` (where they come from and under which
licence: `tests/data/README.md`).
"""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planfence_net.core.errors import HandshakeError, LocalProtocolError, RemoteProtocolError
from planfence_net.protocol import noise
from planfence_net.protocol.noise import (
    MAX_MESSAGE_LEN,
    TAG_LEN,
    CipherState,
    HandshakeState,
    x25519_public_key,
)
from support.cluster import REPO

VECTOR_FILES = ("snow-25519-ChaChaPoly-BLAKE2b.json", "cacophony-25519-ChaChaPoly-BLAKE2b.json")
VECTORS_DIR = REPO / "tests" / "data" / "noise"
HANDSHAKE_LENGTHS = {"NN": 2, "NK": 2, "XX": 3, "IK": 2}
SUPPORTED_NAMES = {f"Noise_{p}_25519_ChaChaPoly_BLAKE2b": p for p in HANDSHAKE_LENGTHS}

# Fixed keys for the unit tests (any 32 bytes are a valid X25519 private key).
INITIATOR_STATIC = bytes(range(1, 33))
RESPONDER_STATIC = bytes(range(101, 133))


# -- helpers ------------------------------------------------------------------------------------


@functools.cache
def selected_vectors(file_name: str) -> tuple[dict[str, Any], ...]:
    """Every vector in `file_name` whose protocol_name is exactly one we implement."""
    vectors = json.loads((VECTORS_DIR / file_name).read_text(encoding="utf-8"))["vectors"]
    return tuple(v for v in vectors if v["protocol_name"] in SUPPORTED_NAMES)


def optional_key(vector: dict[str, Any], field: str) -> bytes | None:
    return bytes.fromhex(vector[field]) if field in vector else None


def make_pair(
    pattern: str, prologue: bytes = b"prologue", responder_prologue: bytes | None = None
) -> tuple[HandshakeState, HandshakeState]:
    """An initiator and a responder with fixed static keys, as the pattern needs them."""
    responder_public = x25519_public_key(RESPONDER_STATIC)
    needs_rs = pattern in ("NK", "IK")
    initiator = HandshakeState(
        pattern,
        True,
        prologue,
        s=INITIATOR_STATIC if pattern in ("XX", "IK") else None,
        rs=responder_public if needs_rs else None,
    )
    responder = HandshakeState(
        pattern,
        False,
        prologue if responder_prologue is None else responder_prologue,
        s=RESPONDER_STATIC if pattern != "NN" else None,
    )
    return initiator, responder


def run_handshake(
    initiator: HandshakeState, responder: HandshakeState
) -> tuple[CipherState, CipherState, CipherState, CipherState]:
    """Complete the handshake with empty payloads; return (i_send, i_recv, r_send, r_recv)."""
    writer, reader = initiator, responder
    while not initiator.complete:
        assert reader.read_message(writer.write_message(b"")) == b""
        writer, reader = reader, writer
    assert responder.complete
    i_send, i_recv = initiator.split()
    r_recv, r_send = responder.split()
    return i_send, i_recv, r_send, r_recv


# -- test vectors -------------------------------------------------------------------------------


@pytest.mark.parametrize("file_name", VECTOR_FILES)
def test_vector_file_has_every_supported_protocol(file_name: str) -> None:
    names = sorted(v["protocol_name"] for v in selected_vectors(file_name))
    assert names == sorted(SUPPORTED_NAMES), f"{file_name}: selected {names}"


@pytest.fixture(params=["cryptography", "pynacl", "warming"])
def chachapoly(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs with both ChaChaPoly implementations: `cryptography`'s (the default),
    PyNaCl's (`few_messages()`, for short-lived processes), and PyNaCl's switching to
    `cryptography`'s mid-stream (`fast_after(3)`, for owners)."""
    monkeypatch.setattr(noise, "_chachapoly", None)
    monkeypatch.setattr(noise, "_warm_calls_left", 0)
    monkeypatch.setattr(noise, "_REFUSED", noise._REFUSED)
    if request.param == "pynacl":
        noise.few_messages()
    elif request.param == "warming":
        noise.fast_after(3)
    return str(request.param)


@pytest.mark.parametrize("protocol_name", sorted(SUPPORTED_NAMES))
@pytest.mark.parametrize("file_name", VECTOR_FILES)
def test_vector(file_name: str, protocol_name: str, chachapoly: str) -> None:
    vectors = [v for v in selected_vectors(file_name) if v["protocol_name"] == protocol_name]
    assert vectors, f"{file_name} has no vector named {protocol_name}"
    for vector in vectors:
        check_vector(vector)


def check_vector(vector: dict[str, Any]) -> None:
    """Replay a vector: every ciphertext byte for byte, every payload decrypted by the reader."""
    pattern = SUPPORTED_NAMES[vector["protocol_name"]]
    initiator = HandshakeState(
        pattern,
        True,
        bytes.fromhex(vector["init_prologue"]),
        s=optional_key(vector, "init_static"),
        e=optional_key(vector, "init_ephemeral"),
        rs=optional_key(vector, "init_remote_static"),
    )
    responder = HandshakeState(
        pattern,
        False,
        bytes.fromhex(vector["resp_prologue"]),
        s=optional_key(vector, "resp_static"),
        e=optional_key(vector, "resp_ephemeral"),
        rs=optional_key(vector, "resp_remote_static"),
    )
    messages = vector["messages"]
    handshake_length = HANDSHAKE_LENGTHS[pattern]
    assert len(messages) > handshake_length, "vector has no transport messages"

    for index, message in enumerate(messages[:handshake_length]):
        assert not initiator.complete and not responder.complete
        writer, reader = (initiator, responder) if index % 2 == 0 else (responder, initiator)
        payload, expected = bytes.fromhex(message["payload"]), bytes.fromhex(message["ciphertext"])
        assert writer.write_message(payload).hex() == expected.hex(), f"handshake message {index}"
        assert reader.read_message(expected) == payload
    assert initiator.complete and responder.complete

    assert initiator.get_handshake_hash() == responder.get_handshake_hash()
    if "handshake_hash" in vector:
        assert initiator.get_handshake_hash().hex() == vector["handshake_hash"]
    if "init_static" in vector:
        assert responder.remote_static == x25519_public_key(bytes.fromhex(vector["init_static"]))
    if "resp_static" in vector:
        assert initiator.remote_static == x25519_public_key(bytes.fromhex(vector["resp_static"]))

    i_send, i_recv = initiator.split()
    r_recv, r_send = responder.split()
    for index, message in enumerate(messages[handshake_length:], start=handshake_length):
        send, receive = (i_send, r_recv) if index % 2 == 0 else (r_send, i_recv)
        payload, expected = bytes.fromhex(message["payload"]), bytes.fromhex(message["ciphertext"])
        assert send.encrypt_with_ad(b"", payload).hex() == expected.hex(), f"transport {index}"
        assert receive.decrypt_with_ad(b"", expected) == payload


def test_both_chachapolys_refuse_a_changed_byte_as_a_remote_protocol_error(
    chachapoly: str,
) -> None:
    send, receive = noise.CipherState(), noise.CipherState()
    send.initialize_key(bytes(range(32)))
    receive.initialize_key(bytes(range(32)))
    sealed = bytearray(send.encrypt_with_ad(b"", b"heads"))
    sealed[0] ^= 1
    with pytest.raises(RemoteProtocolError, match="decryption failed"):
        receive.decrypt_with_ad(b"", bytes(sealed))
    sealed[0] ^= 1
    assert receive.decrypt_with_ad(b"", bytes(sealed)) == b"heads"  # n was not moved on
    made = type(receive._aead).__module__  # our own object: which implementation it is
    assert made.startswith("cryptography" if chachapoly == "cryptography" else "planfence_net")


def test_a_warming_key_in_use_switches_to_cryptography_after_the_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`fast_after(n)`: PyNaCl's cipher for the process's first n calls, then every key,
    those in use too, calls `cryptography`'s directly; the bytes never change, and a bad
    message is refused alike before and after."""
    monkeypatch.setattr(noise, "_chachapoly", None)
    monkeypatch.setattr(noise, "_REFUSED", noise._REFUSED)
    plain = noise.CipherState()
    plain.initialize_key(bytes(range(32)))  # `cryptography`'s from the first call
    noise.fast_after(4)
    send, receive = noise.CipherState(), noise.CipherState()
    send.initialize_key(bytes(range(32)))
    receive.initialize_key(bytes(range(32)))
    for n in range(6):
        sealed = send.encrypt_with_ad(b"", b"heads %d" % n)
        assert sealed == plain.encrypt_with_ad(b"", b"heads %d" % n)
        if n in (0, 5):  # before and after the switch
            with pytest.raises(RemoteProtocolError, match="decryption failed"):
                receive.decrypt_with_ad(b"", bytes([sealed[0] ^ 1]) + sealed[1:])
        assert receive.decrypt_with_ad(b"", sealed) == b"heads %d" % n
    for state in (send, receive):
        method = state._aead.encrypt  # our own object's attribute: no wrapper left
        assert type(method.__self__).__module__.startswith("cryptography")  # type: ignore[attr-defined]
    later = noise.CipherState()
    later.initialize_key(bytes(32))
    assert type(later._aead).__module__.startswith("cryptography")


# -- handshake behaviour ------------------------------------------------------------------------


@settings(derandomize=True, max_examples=40, deadline=None)
@given(
    pattern=st.sampled_from(sorted(HANDSHAKE_LENGTHS)),
    prologue=st.binary(max_size=80),
    payloads=st.lists(st.binary(max_size=300), min_size=3, max_size=3),
)
def test_round_trip_with_random_ephemerals(
    pattern: str, prologue: bytes, payloads: list[bytes]
) -> None:
    initiator, responder = make_pair(pattern, prologue)
    writer, reader = initiator, responder
    for index in range(HANDSHAKE_LENGTHS[pattern]):
        assert reader.read_message(writer.write_message(payloads[index])) == payloads[index]
        writer, reader = reader, writer
    assert initiator.complete and responder.complete
    assert initiator.get_handshake_hash() == responder.get_handshake_hash()
    i_send, i_recv = initiator.split()
    r_recv, r_send = responder.split()
    assert r_recv.decrypt_with_ad(b"ad", i_send.encrypt_with_ad(b"ad", payloads[0])) == payloads[0]
    assert i_recv.decrypt_with_ad(b"", r_send.encrypt_with_ad(b"", payloads[1])) == payloads[1]


@pytest.mark.parametrize(
    ("pattern", "message_index", "byte_index"),
    [
        ("NN", 1, -1),  # payload tag of message 2
        ("NN", 1, 0),  # responder ephemeral of message 2
        ("IK", 0, 40),  # encrypted initiator static key of message 1
        ("IK", 0, -1),  # payload tag of message 1
        ("XX", 2, 5),  # encrypted initiator static key of message 3
    ],
)
def test_tampered_handshake_message_raises_handshake_error(
    pattern: str, message_index: int, byte_index: int
) -> None:
    initiator, responder = make_pair(pattern)
    writer, reader = initiator, responder
    for _ in range(message_index):
        reader.read_message(writer.write_message(b"hello"))
        writer, reader = reader, writer
    message = bytearray(writer.write_message(b"hello"))
    message[byte_index] ^= 0x01
    with pytest.raises(HandshakeError, match="decryption failed"):
        reader.read_message(bytes(message))
    with pytest.raises(LocalProtocolError, match="already failed"):
        reader.write_message(b"")


def test_prologue_mismatch_fails_at_first_encrypted_payload() -> None:
    initiator, responder = make_pair("NN", b"one", responder_prologue=b"two")
    responder.read_message(initiator.write_message(b""))  # message 1 carries no encryption
    with pytest.raises(HandshakeError, match="decryption failed"):
        initiator.read_message(responder.write_message(b""))


def test_short_handshake_message_is_rejected_before_decrypting() -> None:
    initiator, responder = make_pair("IK")
    message = initiator.write_message(b"")
    assert len(message) == 32 + 48 + 16  # e, encrypted s, empty payload tag
    with pytest.raises(HandshakeError, match="wrong length"):
        responder.read_message(message[:-1])


def test_low_order_ephemeral_raises_handshake_error() -> None:
    _, responder = make_pair("NK")
    with pytest.raises(HandshakeError, match="low-order"):
        responder.read_message(bytes(32) + bytes(TAG_LEN))


def test_ik_responder_learns_initiator_static_after_message_1() -> None:
    initiator, responder = make_pair("IK")
    assert responder.remote_static is None
    assert initiator.remote_static == x25519_public_key(RESPONDER_STATIC)
    responder.read_message(initiator.write_message(b""))
    assert responder.remote_static == x25519_public_key(INITIATOR_STATIC)
    assert not responder.complete


def test_xx_initiator_learns_responder_static_after_message_2() -> None:
    initiator, responder = make_pair("XX")
    responder.read_message(initiator.write_message(b""))
    assert initiator.remote_static is None
    initiator.read_message(responder.write_message(b""))
    assert initiator.remote_static == x25519_public_key(RESPONDER_STATIC)


def test_out_of_turn_calls_raise_local_protocol_error() -> None:
    initiator, responder = make_pair("XX")
    with pytest.raises(LocalProtocolError, match="not our turn to write"):
        responder.write_message(b"")
    with pytest.raises(LocalProtocolError, match="not our turn to read"):
        initiator.read_message(bytes(32))
    run_handshake(initiator, responder)
    with pytest.raises(LocalProtocolError, match="already complete"):
        initiator.write_message(b"")


def test_split_before_complete_raises_local_protocol_error() -> None:
    initiator, responder = make_pair("NN")
    with pytest.raises(LocalProtocolError, match="before the handshake completed"):
        initiator.split()
    responder.read_message(initiator.write_message(b""))
    with pytest.raises(LocalProtocolError, match="before the handshake completed"):
        responder.split()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"pattern": "KK", "initiator": True}, "unsupported handshake pattern"),
        ({"pattern": "IK", "initiator": True, "s": INITIATOR_STATIC}, "needs the peer's"),
        ({"pattern": "XX", "initiator": False}, "needs our static key"),
        ({"pattern": "NN", "initiator": True, "e": bytes(31)}, "e must be 32 bytes"),
        ({"pattern": "XX", "initiator": True, "s": INITIATOR_STATIC, "rs": bytes(32)}, "rs must"),
    ],
)
def test_bad_construction_raises_local_protocol_error(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(LocalProtocolError, match=match):
        HandshakeState(prologue=b"", **kwargs)


def test_oversize_handshake_payload_is_refused_without_changing_state() -> None:
    initiator, responder = make_pair("NN")
    largest = MAX_MESSAGE_LEN - 32  # message 1 is e plus the unencrypted payload
    with pytest.raises(LocalProtocolError, match="exceeds a Noise message"):
        initiator.write_message(bytes(largest + 1))
    message = initiator.write_message(bytes(largest))
    assert len(message) == MAX_MESSAGE_LEN
    assert responder.read_message(message) == bytes(largest)


def test_oversize_handshake_message_raises_handshake_error() -> None:
    _, responder = make_pair("NN")
    with pytest.raises(HandshakeError, match="wrong length"):
        responder.read_message(bytes(MAX_MESSAGE_LEN + 1))


# -- transport behaviour ------------------------------------------------------------------------


def test_tampered_transport_message_raises_remote_protocol_error() -> None:
    i_send, _, _, r_recv = run_handshake(*make_pair("XX"))
    ciphertext = i_send.encrypt_with_ad(b"", b"transport payload")
    tampered = bytearray(ciphertext)
    tampered[3] ^= 0x80
    with pytest.raises(RemoteProtocolError, match="decryption failed") as caught:
        r_recv.decrypt_with_ad(b"", bytes(tampered))
    assert type(caught.value) is RemoteProtocolError  # not HandshakeError after the handshake
    # Spec 5.1: a failed decryption does not advance the nonce, so the genuine message still reads.
    assert r_recv.decrypt_with_ad(b"", ciphertext) == b"transport payload"


def test_transport_wrong_associated_data_raises_remote_protocol_error() -> None:
    i_send, _, _, r_recv = run_handshake(*make_pair("NN"))
    with pytest.raises(RemoteProtocolError, match="decryption failed"):
        r_recv.decrypt_with_ad(b"other", i_send.encrypt_with_ad(b"ad", b"x"))


def test_transport_size_limits() -> None:
    i_send, _, _, r_recv = run_handshake(*make_pair("NN"))
    largest = MAX_MESSAGE_LEN - TAG_LEN
    with pytest.raises(LocalProtocolError, match="exceeds a Noise message"):
        i_send.encrypt_with_ad(b"", bytes(largest + 1))
    ciphertext = i_send.encrypt_with_ad(b"", bytes(largest))
    assert len(ciphertext) == MAX_MESSAGE_LEN
    assert r_recv.decrypt_with_ad(b"", ciphertext) == bytes(largest)
    with pytest.raises(RemoteProtocolError, match="exceeds 65535"):
        r_recv.decrypt_with_ad(b"", bytes(MAX_MESSAGE_LEN + 1))
    with pytest.raises(RemoteProtocolError, match="shorter than the tag"):
        r_recv.decrypt_with_ad(b"", bytes(TAG_LEN - 1))


def test_nonce_exhaustion_raises_local_protocol_error() -> None:
    i_send, _, _, r_recv = run_handshake(*make_pair("NN"))
    i_send.set_nonce(2**64 - 2)
    r_recv.set_nonce(2**64 - 2)
    assert r_recv.decrypt_with_ad(b"", i_send.encrypt_with_ad(b"", b"last")) == b"last"
    with pytest.raises(LocalProtocolError, match="nonce exhausted"):
        i_send.encrypt_with_ad(b"", b"one too many")
    with pytest.raises(LocalProtocolError, match="nonce exhausted"):
        r_recv.decrypt_with_ad(b"", bytes(TAG_LEN))


def test_cipher_state_without_key_passes_data_through() -> None:
    cipher = CipherState()
    assert not cipher.has_key()
    assert cipher.encrypt_with_ad(b"ad", b"plain") == b"plain"
    assert cipher.decrypt_with_ad(b"ad", b"plain") == b"plain"
