"""Noise Protocol Framework, revision 34, sans-IO: `Noise_{NN,NK,XX,IK}_25519_ChaChaPoly_BLAKE2b`.

The objects mirror the spec (https://noiseprotocol.org/noise.html) so that a reviewer can hold
the two side by side: the crypto functions of section 4, `CipherState` (5.1), `SymmetricState`
(5.2), `HandshakeState` (5.3) and the handshake patterns of section 7. Method names follow the
spec in snake case (`MixKey` is `mix_key`). No PSK modes, no deferred patterns, no rekey.

ChaChaPoly is the `cryptography` package's ChaCha20Poly1305 (the same IETF construction as
libsodium's, a quarter of PyNaCl's per-call cost, which a transport message pays twice),
imported at the first key; a process that sends a handful of messages and exits calls
`few_messages()` first and uses PyNaCl's (already imported for X25519) instead of paying the
import, and a long-lived one that may stay idle (an owner) calls `fast_after(calls)`: PyNaCl's
until it has made that many calls, `cryptography`'s from then on. This module does no I/O: it takes bytes and returns bytes. It is also the one place
where the crypto libraries' exceptions are translated into planfence errors:

* `HandshakeError`: a handshake message is too short or long, fails to decrypt or carries an
  unusable public key.
* `RemoteProtocolError`: a transport message fails to decrypt or is too long.
* `LocalProtocolError`: our misuse (wrong turn, `split()` too early, a message over
  `MAX_MESSAGE_LEN`, an exhausted nonce, a missing or malformed key).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

import nacl.bindings
import nacl.exceptions
import nacl.utils

from planfence_net.core.errors import HandshakeError, LocalProtocolError, RemoteProtocolError

DHLEN: Final = 32
HASHLEN: Final = 64
BLOCKLEN: Final = 128  # documents the suite; hmac takes it from hashlib.blake2b itself
KEYLEN: Final = 32
TAG_LEN: Final = 16
MAX_MESSAGE_LEN: Final = 65535
MAX_NONCE: Final = 2**64 - 1  # spec 5.1: reserved, so a CipherState uses 0 .. 2^64-2


# -- Section 4: crypto functions ----------------------------------------------------------------


def x25519_public_key(private: bytes) -> bytes:
    """Return the X25519 public key of a 32-byte private key; LocalProtocolError if not 32 bytes."""
    _check_key_length("private key", private)
    return nacl.bindings.crypto_scalarmult_base(bytes(private))


def _check_key_length(what: str, key: bytes) -> None:
    if len(key) != DHLEN:  # PyNaCl would raise its own TypeError
        raise LocalProtocolError(f"{what} must be {DHLEN} bytes, got {len(key)}")


def _dh(private: bytes, public: bytes) -> bytes:
    """DH(key_pair, public_key). libsodium refuses low-order points (all-zero result)."""
    try:
        return nacl.bindings.crypto_scalarmult(private, public)
    except nacl.exceptions.CryptoError as exc:
        raise HandshakeError("X25519 with the peer's public key failed (low-order point)") from exc


def _nonce(n: int) -> bytes:
    """ChaChaPoly nonce: 32 bits of zeros followed by the 64-bit little-endian counter
    (read as one 96-bit little-endian number: n << 32)."""
    return (n << 32).to_bytes(12, "little")


def _hash(data: bytes) -> bytes:
    return hashlib.blake2b(data).digest()


def _hmac_hash(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.blake2b).digest()


def _hkdf(chaining_key: bytes, input_key_material: bytes) -> tuple[bytes, bytes]:
    """HKDF(chaining_key, input_key_material, 2) of spec 4.3; the only arity this suite needs."""
    temp_key = _hmac_hash(chaining_key, input_key_material)
    output1 = _hmac_hash(temp_key, b"\x01")
    output2 = _hmac_hash(temp_key, output1 + b"\x02")
    return output1, output2


# -- ChaChaPoly: one object per key ------------------------------------------------------------


class Aead(Protocol):
    """ChaCha20-Poly1305 (IETF) with one key: `cryptography`'s ChaCha20Poly1305 interface."""

    def encrypt(self, nonce: bytes, data: bytes, associated_data: bytes | None) -> bytes: ...

    def decrypt(self, nonce: bytes, data: bytes, associated_data: bytes | None) -> bytes: ...


class _NaclChaChaPoly:
    """The same cipher through PyNaCl's checked bindings (~4 us a call against ~1, no import)."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        self._key = key

    def encrypt(self, nonce: bytes, data: bytes, associated_data: bytes | None) -> bytes:
        return nacl.bindings.crypto_aead_chacha20poly1305_ietf_encrypt(
            bytes(data), associated_data or b"", nonce, self._key
        )

    def decrypt(self, nonce: bytes, data: bytes, associated_data: bytes | None) -> bytes:
        return nacl.bindings.crypto_aead_chacha20poly1305_ietf_decrypt(
            bytes(data), associated_data or b"", nonce, self._key
        )


class _WarmingChaChaPoly:
    """PyNaCl's cipher until this process has made `fast_after`'s number of calls; then the
    methods of this key are `cryptography`'s (every key switches at its next call, and no
    wrapper stays between the caller and the faster cipher)."""

    __slots__ = ("_key", "encrypt", "decrypt")

    def __init__(self, key: bytes) -> None:
        self._key = key
        self.encrypt: Callable[[bytes, bytes, bytes | None], bytes] = self._encrypt
        self.decrypt: Callable[[bytes, bytes, bytes | None], bytes] = self._decrypt

    def _encrypt(self, nonce: bytes, data: bytes, associated_data: bytes | None) -> bytes:
        if _warmed():
            return self._switch().encrypt(nonce, data, associated_data)
        return nacl.bindings.crypto_aead_chacha20poly1305_ietf_encrypt(
            bytes(data), associated_data or b"", nonce, self._key
        )

    def _decrypt(self, nonce: bytes, data: bytes, associated_data: bytes | None) -> bytes:
        if _warmed():
            return self._switch().decrypt(nonce, data, associated_data)
        return nacl.bindings.crypto_aead_chacha20poly1305_ietf_decrypt(
            bytes(data), associated_data or b"", nonce, self._key
        )

    def _switch(self) -> Aead:
        fast = _cipher_for(self._key)
        self.encrypt, self.decrypt = fast.encrypt, fast.decrypt
        return fast


# how to make the Aead for a key (None: `cryptography`'s, imported at the first key)
_chachapoly: Callable[[bytes], Aead] | None = None
# what an Aead's decrypt raises for a bad message (`cryptography`'s added at its import)
_REFUSED: tuple[type[Exception], ...] = (nacl.exceptions.CryptoError,)
_warm_calls_left = 0  # PyNaCl calls before `_WarmingChaChaPoly` keys switch (fast_after)


def few_messages() -> None:
    """Use PyNaCl's ChaChaPoly in this process from now on: for a process that sends a
    handful of messages and exits (the one-shot CLI, the hook run in-process), where
    importing `cryptography` (~10 ms) costs more than its faster calls save (~3 us a
    message). The same cipher: the bytes on the wire do not change."""
    global _chachapoly
    _chachapoly = _NaclChaChaPoly


def fast_after(calls: int) -> None:
    """Use PyNaCl's ChaChaPoly until this process has made `calls` encryptions and
    decryptions, then `cryptography`'s, imported then, for every key (those in use too):
    for a long-lived process that may stay idle, as most owners do (an idle owner never
    maps `cryptography`'s ~9 MiB), and may serve many messages when busy (after `calls`,
    each call is ~3 us cheaper). The same cipher: the bytes on the wire do not change."""
    global _chachapoly, _warm_calls_left
    _chachapoly = _WarmingChaChaPoly
    _warm_calls_left = calls


def _warmed() -> bool:
    """Count one call of a warming key; True once `fast_after`'s calls are made."""
    global _warm_calls_left, _chachapoly
    _warm_calls_left -= 1
    if _warm_calls_left > 0:
        return False
    if _chachapoly is _WarmingChaChaPoly:
        _chachapoly = None  # keys made from now on are `cryptography`'s at once
    return True


def _cipher_for(key: bytes) -> Aead:
    global _chachapoly, _REFUSED
    if _chachapoly is None:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

        _chachapoly = ChaCha20Poly1305
        _REFUSED = (*_REFUSED, InvalidTag)
    return _chachapoly(key)


# -- Section 5.1: CipherState -------------------------------------------------------------------


class CipherState:
    """A key `k` (or none) and a nonce `n`; encrypts and decrypts with ChaChaPoly.

    `error` is the exception raised when decryption fails or a received message is too long:
    `RemoteProtocolError` for transport messages, `HandshakeError` inside a handshake.
    """

    def __init__(self, error: type[RemoteProtocolError] = RemoteProtocolError) -> None:
        self._k: bytes | None = None
        self._aead: Aead | None = None  # ChaChaPoly with k, made once per key
        self._n = 0
        self._error = error

    def initialize_key(self, key: bytes | None) -> None:
        """Set k = key (None means empty) and n = 0."""
        if key is not None and len(key) != KEYLEN:
            raise LocalProtocolError(f"cipher key must be {KEYLEN} bytes, got {len(key)}")
        self._k = key
        if key is None:
            self._aead = None
        else:
            self._aead = _cipher_for(bytes(key))
        self._n = 0

    def has_key(self) -> bool:
        """True if k is non-empty."""
        return self._k is not None

    def set_nonce(self, nonce: int) -> None:
        """Set n = nonce (0 .. 2^64-1); for resumption and tests."""
        if not 0 <= nonce <= MAX_NONCE:
            raise LocalProtocolError(f"nonce {nonce} is outside 0 .. 2^64-1")
        self._n = nonce

    def encrypt_with_ad(self, ad: bytes, plaintext: bytes) -> bytes:
        """Return ENCRYPT(k, n++, ad, plaintext), or plaintext unchanged if k is empty.

        Raises LocalProtocolError if the result would exceed MAX_MESSAGE_LEN or the nonce is
        exhausted.
        """
        aead = self._aead
        if len(plaintext) + (TAG_LEN if aead is not None else 0) > MAX_MESSAGE_LEN:
            raise LocalProtocolError(f"plaintext of {len(plaintext)} bytes exceeds a Noise message")
        if aead is None:
            return bytes(plaintext)
        if self._n == MAX_NONCE:
            raise LocalProtocolError("nonce exhausted: this cipher state must not send again")
        ciphertext = aead.encrypt(_nonce(self._n), plaintext, ad)
        self._n += 1
        return ciphertext

    def decrypt_with_ad(self, ad: bytes, ciphertext: bytes) -> bytes:
        """Return DECRYPT(k, n++, ad, ciphertext), or ciphertext unchanged if k is empty.

        Raises `error` (see the class) if the message is too long, too short or fails
        authentication; n is then not incremented. LocalProtocolError if the nonce is exhausted.
        """
        if len(ciphertext) > MAX_MESSAGE_LEN:
            raise self._error(f"message of {len(ciphertext)} bytes exceeds {MAX_MESSAGE_LEN}")
        aead = self._aead
        if aead is None:
            return bytes(ciphertext)
        if self._n == MAX_NONCE:
            raise LocalProtocolError("nonce exhausted: this cipher state must not receive again")
        if len(ciphertext) < TAG_LEN:
            raise self._error(f"ciphertext of {len(ciphertext)} bytes is shorter than the tag")
        try:
            plaintext = aead.decrypt(_nonce(self._n), ciphertext, ad)
        except Exception as exc:
            if not isinstance(exc, _REFUSED):  # read now: a warming key may have switched
                raise
            raise self._error("decryption failed: forged, corrupted or out of order") from exc
        self._n += 1
        return plaintext


# -- Section 5.2: SymmetricState ----------------------------------------------------------------


class SymmetricState:
    """Chaining key `ck`, handshake hash `h` and a CipherState that raises HandshakeError."""

    def __init__(self, protocol_name: bytes) -> None:
        self.cipher_state = CipherState(error=HandshakeError)
        self.ck = b""
        self.h = b""
        self.initialize_symmetric(protocol_name)

    def initialize_symmetric(self, protocol_name: bytes) -> None:
        """h = protocol_name zero-padded to HASHLEN (or its hash if longer); ck = h; k empty."""
        if len(protocol_name) <= HASHLEN:
            self.h = protocol_name.ljust(HASHLEN, b"\x00")
        else:
            self.h = _hash(protocol_name)
        self.ck = self.h
        self.cipher_state.initialize_key(None)

    def mix_key(self, input_key_material: bytes) -> None:
        """ck, temp_k = HKDF(ck, ikm, 2); k = temp_k truncated to 32 bytes (HASHLEN is 64)."""
        self.ck, temp_k = _hkdf(self.ck, input_key_material)
        self.cipher_state.initialize_key(temp_k[:KEYLEN])

    def mix_hash(self, data: bytes) -> None:
        """h = HASH(h || data)."""
        self.h = _hash(self.h + data)

    def get_handshake_hash(self) -> bytes:
        """Return h (HASHLEN bytes); a channel binding once the handshake is complete."""
        return self.h

    def encrypt_and_hash(self, plaintext: bytes) -> bytes:
        """Encrypt with h as associated data, then mix the ciphertext into h."""
        ciphertext = self.cipher_state.encrypt_with_ad(self.h, plaintext)
        self.mix_hash(ciphertext)
        return ciphertext

    def decrypt_and_hash(self, ciphertext: bytes) -> bytes:
        """Decrypt with h as associated data, then mix the ciphertext into h; HandshakeError."""
        plaintext = self.cipher_state.decrypt_with_ad(self.h, ciphertext)
        self.mix_hash(ciphertext)
        return plaintext

    def split(self) -> tuple[CipherState, CipherState]:
        """Return (c1, c2): c1 encrypts initiator to responder, c2 responder to initiator."""
        temp_k1, temp_k2 = _hkdf(self.ck, b"")
        c1, c2 = CipherState(), CipherState()
        c1.initialize_key(temp_k1[:KEYLEN])
        c2.initialize_key(temp_k2[:KEYLEN])
        return c1, c2


# -- Section 7: handshake patterns --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HandshakePattern:
    """Pre-message tokens of each side, then the message patterns (even index: initiator)."""

    initiator_pre: tuple[str, ...]
    responder_pre: tuple[str, ...]
    messages: tuple[tuple[str, ...], ...]


PATTERNS: Final[dict[str, HandshakePattern]] = {
    "NN": HandshakePattern((), (), (("e",), ("e", "ee"))),
    "NK": HandshakePattern((), ("s",), (("e", "es"), ("e", "ee"))),
    "XX": HandshakePattern((), (), (("e",), ("e", "ee", "s", "es"), ("s", "se"))),
    "IK": HandshakePattern((), ("s",), (("e", "es", "s", "ss"), ("e", "ee", "se"))),
}


# -- Section 5.3: HandshakeState ----------------------------------------------------------------


class HandshakeState:
    """One side of a Noise handshake, protocol `Noise_{pattern}_25519_ChaChaPoly_BLAKE2b`.

    `s` and `e` are 32-byte X25519 private keys (`e` only for test vectors; otherwise a fresh one
    is generated), `rs` is the peer's static public key for patterns that pre-share it. Missing
    or malformed keys raise LocalProtocolError. Sides alternate `write_message`/`read_message`,
    the initiator first, until `complete`; then `split()` gives the transport cipher states.
    After a HandshakeError the handshake is dead and every further call raises.
    """

    def __init__(
        self,
        pattern: str,
        initiator: bool,
        prologue: bytes,
        s: bytes | None = None,
        e: bytes | None = None,
        rs: bytes | None = None,
    ) -> None:
        if pattern not in PATTERNS:
            raise LocalProtocolError(f"unsupported handshake pattern {pattern!r}")
        self._pattern = PATTERNS[pattern]
        self._initiator = initiator
        self._s, self._e, self._rs = s, e, rs
        self._re: bytes | None = None
        self._message_index = 0
        self._failed = False
        self._check_keys()
        self._symmetric = SymmetricState(f"Noise_{pattern}_25519_ChaChaPoly_BLAKE2b".encode())
        self._symmetric.mix_hash(bytes(prologue))
        # Spec 5.3: pre-message keys are hashed, the initiator's first. Only "s" occurs here.
        if "s" in self._pattern.initiator_pre:
            self._symmetric.mix_hash(self._static_public(of_initiator=True))
        if "s" in self._pattern.responder_pre:
            self._symmetric.mix_hash(self._static_public(of_initiator=False))

    def _check_keys(self) -> None:
        own_pre, peer_pre = self._pattern.initiator_pre, self._pattern.responder_pre
        if not self._initiator:
            own_pre, peer_pre = peer_pre, own_pre
        own_messages = self._pattern.messages[0 if self._initiator else 1 :: 2]
        peer_messages = self._pattern.messages[1 if self._initiator else 0 :: 2]
        if self._s is None and ("s" in own_pre or any("s" in m for m in own_messages)):
            raise LocalProtocolError("this handshake pattern needs our static key s")
        if self._rs is None and "s" in peer_pre:
            raise LocalProtocolError("this handshake pattern needs the peer's static key rs")
        if self._rs is not None and any("s" in m for m in peer_messages):
            # Spec 5.3: rs must be empty when the peer sends its static key in a message.
            raise LocalProtocolError("rs must not be given: the peer sends its static key")
        for name, key in (("s", self._s), ("e", self._e), ("rs", self._rs)):
            if key is not None:
                _check_key_length(name, key)

    def _static_public(self, of_initiator: bool) -> bytes:
        if of_initiator == self._initiator:
            assert self._s is not None  # guaranteed by _check_keys
            return x25519_public_key(self._s)
        assert self._rs is not None  # guaranteed by _check_keys
        return bytes(self._rs)

    @property
    def complete(self) -> bool:
        """True once the last handshake message has been written or read."""
        return self._message_index == len(self._pattern.messages)

    @property
    def remote_static(self) -> bytes | None:
        """The peer's static public key once received or given as `rs`, else None."""
        return None if self._rs is None else bytes(self._rs)

    def get_handshake_hash(self) -> bytes:
        """Return h; identical on both sides and final once `complete` is true."""
        return self._symmetric.get_handshake_hash()

    def split(self) -> tuple[CipherState, CipherState]:
        """Return (c1, c2), c1 for initiator-to-responder; LocalProtocolError if not complete."""
        if not self.complete:
            raise LocalProtocolError("split() before the handshake completed")
        return self._symmetric.split()

    def _check_turn(self, writing: bool) -> tuple[str, ...]:
        if self._failed:
            raise LocalProtocolError("the handshake already failed")
        if self.complete:
            raise LocalProtocolError("the handshake is already complete")
        initiator_turn = self._message_index % 2 == 0
        if writing != (initiator_turn == self._initiator):
            raise LocalProtocolError(f"not our turn to {'write' if writing else 'read'}")
        return self._pattern.messages[self._message_index]

    def _overhead(self, tokens: tuple[str, ...]) -> int:
        """Bytes of the next message besides the payload, tracking when k becomes non-empty."""
        has_key, length = self._symmetric.cipher_state.has_key(), 0
        for token in tokens:
            if token == "e":
                length += DHLEN
            elif token == "s":
                length += DHLEN + (TAG_LEN if has_key else 0)
            else:
                has_key = True
        return length + (TAG_LEN if has_key else 0)

    def _mix_dh(self, token: str) -> None:
        """ee, es, se, ss: MixKey(DH(...)); the first letter names the initiator's key."""
        own, peer = (token[0], token[1]) if self._initiator else (token[1], token[0])
        private = self._e if own == "e" else self._s
        public = self._re if peer == "e" else self._rs
        assert private is not None and public is not None  # the pattern sent them earlier
        self._symmetric.mix_key(_dh(private, public))

    def write_message(self, payload: bytes) -> bytes:
        """Return the next handshake message carrying `payload`.

        Raises LocalProtocolError out of turn or if the message would exceed MAX_MESSAGE_LEN
        (the state is then unchanged); HandshakeError if a DH with the peer's key fails.
        """
        tokens = self._check_turn(writing=True)
        if self._overhead(tokens) + len(payload) > MAX_MESSAGE_LEN:
            raise LocalProtocolError(f"payload of {len(payload)} bytes exceeds a Noise message")
        message = bytearray()
        try:
            for token in tokens:
                if token == "e":
                    if self._e is None:
                        self._e = nacl.utils.random(DHLEN)
                    e_public = x25519_public_key(self._e)
                    message += e_public
                    self._symmetric.mix_hash(e_public)
                elif token == "s":
                    s_public = self._static_public(of_initiator=self._initiator)
                    message += self._symmetric.encrypt_and_hash(s_public)
                else:
                    self._mix_dh(token)
            message += self._symmetric.encrypt_and_hash(payload)
        except HandshakeError:
            self._failed = True
            raise
        self._message_index += 1
        return bytes(message)

    def read_message(self, message: bytes) -> bytes:
        """Process the peer's next handshake message and return its payload.

        Raises LocalProtocolError out of turn; HandshakeError if the message is too short or too
        long, fails to decrypt or carries an unusable public key (the handshake is then dead).
        """
        tokens = self._check_turn(writing=False)
        if not self._overhead(tokens) <= len(message) <= MAX_MESSAGE_LEN:
            self._failed = True
            raise HandshakeError(f"handshake message of {len(message)} bytes has the wrong length")
        rest = bytes(message)
        try:
            for token in tokens:
                if token == "e":
                    self._re, rest = rest[:DHLEN], rest[DHLEN:]
                    self._symmetric.mix_hash(self._re)
                elif token == "s":
                    length = DHLEN + (TAG_LEN if self._symmetric.cipher_state.has_key() else 0)
                    self._rs, rest = self._symmetric.decrypt_and_hash(rest[:length]), rest[length:]
                else:
                    self._mix_dh(token)
            payload = self._symmetric.decrypt_and_hash(rest)
        except HandshakeError:
            self._failed = True
            raise
        self._message_index += 1
        return payload
