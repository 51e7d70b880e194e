"""Agent identities: an Ed25519 seed in a 0600 key file, and its X25519 (Noise) form."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from nacl.bindings import crypto_sign_ed25519_sk_to_curve25519
from nacl.signing import SigningKey

from .errors import ConfigError


@dataclass(frozen=True, slots=True)
class Identity:
    """An agent's signing key and the Noise static key derived from it."""

    name: str
    signing_key: SigningKey

    @property
    def public_key(self) -> bytes:
        """Ed25519 public key."""
        return bytes(self.signing_key.verify_key)

    @property
    def noise_private(self) -> bytes:
        """X25519 private key (libsodium's ed25519-to-curve25519 conversion)."""
        full = bytes(self.signing_key) + self.public_key
        return crypto_sign_ed25519_sk_to_curve25519(full)


def generate_key_file(path: Path) -> SigningKey:
    """Write a fresh seed as one line of hex with mode 0600.

    Raises ConfigError when the file already exists (a key is never overwritten).
    """
    key = SigningKey.generate()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ConfigError(f"key file {path} already exists; refusing to overwrite it") from None
    with os.fdopen(fd, "w") as f:
        f.write(bytes(key).hex() + "\n")
    return key


def load_identity(name: str, path: Path) -> Identity:
    """Load an agent's key file. Raises ConfigError if missing, unreadable by us, malformed
    or accessible by others."""
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(
                f"key file {path} is accessible by group or others "
                f"(mode {stat.S_IMODE(mode):o}); run: chmod 600 {path}"
            )
        text = path.read_text().strip()
    except FileNotFoundError:
        raise ConfigError(f"no key file for agent {name!r} at {path}") from None
    except PermissionError:
        # Typical in a container whose user is not the one who made the cluster folder.
        raise ConfigError(
            f"cannot read key file {path}: permission denied for uid "
            f"{os.getuid()}; run as the user who made the cluster (in "
            "docker-compose.yml: PLANFENCE_UID and PLANFENCE_GID)"
        ) from None
    try:
        seed = bytes.fromhex(text)
    except ValueError:
        raise ConfigError(f"key file {path} must hold a 32-byte seed as hex") from None
    if len(seed) != 32:
        raise ConfigError(f"key file {path} must hold a 32-byte seed as hex")
    return Identity(name, SigningKey(seed))
