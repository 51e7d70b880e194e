"""The cluster roster: who is a member, where each owner listens, and who owns which keys.

The roster is a TOML file:

    cluster = "planfence-demo"

    [[agents]]
    name = "reqs"
    address = "127.0.0.1:7402"
    public_key = "<64 hex chars: Ed25519 public key>"
    owns = ["req/*"]

Agent names are letters, digits, '_', '.' and '-' (they name key and store files), checked
when the roster is read. Ownership patterns are shell-style (`fnmatch`, case-sensitive). Exactly one agent may own a
key; a key matched by no pattern has no owner, a key matched by two is a roster error.
"""

from __future__ import annotations

import fnmatch
import functools
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nacl.bindings import crypto_sign_ed25519_pk_to_curve25519

from .errors import ConfigError


@functools.lru_cache(maxsize=256)
def _matcher(patterns: tuple[str, ...]) -> Callable[[str], re.Match[str] | None]:
    """One compiled regex for an agent's patterns (fnmatch semantics, case-sensitive): an
    owner checks thousands of keys per request, so the patterns are not re-read per key."""
    if not patterns:
        return lambda key: None
    return re.compile("|".join(fnmatch.translate(p) for p in patterns)).match


OWNER_CACHE = 65536  # keys whose owner is remembered
# An agent's name becomes part of file names (keys/NAME.key, data/NAME.sqlite) and of keys
# (NAME:*): letters, digits, '_', '.', '-', starting with a letter or digit, so it can
# never be a path separator, '..' or a hidden file.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_name(name: object, where: str = "agent name") -> str:
    """`name` if it is a valid agent name (see NAME); raises ConfigError in one line."""
    if not isinstance(name, str) or NAME.fullmatch(name) is None:
        shown = repr(name)[:80]
        raise ConfigError(
            f"{where} {shown} is not a valid agent name: use up to 64 letters, digits, "
            f"'_', '.' or '-', starting with a letter or digit"
        )
    return name


@dataclass(frozen=True, slots=True)
class Agent:
    """One roster member."""

    name: str
    host: str
    port: int
    public_key: bytes  # Ed25519
    owns: tuple[str, ...]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def noise_key(self) -> bytes:
        """The agent's Noise static public key: the X25519 form of its Ed25519 key."""
        return crypto_sign_ed25519_pk_to_curve25519(self.public_key)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "address": self.address,
            "public_key": self.public_key.hex(),
            "owns": list(self.owns),
        }


@dataclass(frozen=True, slots=True)
class Roster:
    """An immutable roster with ownership and key lookups."""

    cluster: str
    agents: tuple[Agent, ...]
    # key -> owner, filled by owner_of: matching every pattern costs ~8 us a key, and the
    # gate and the owner ask for the same keys on every request
    _owners: dict[str, str | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        names = [a.name for a in self.agents]
        if len(set(names)) != len(names):
            raise ConfigError("roster: agent names must be unique")
        keys = [a.public_key for a in self.agents]
        if len(set(keys)) != len(keys):
            raise ConfigError("roster: two agents share a public key")

    def agent(self, name: str) -> Agent:
        """The agent called `name`; raises ConfigError if there is none."""
        for agent in self.agents:
            if agent.name == name:
                return agent
        raise ConfigError(f"no agent {name!r} in the roster (agents: {', '.join(self.names)})")

    @property
    def names(self) -> list[str]:
        return [a.name for a in self.agents]

    def owner_of(self, key: str) -> str | None:
        """The name of the one agent owning `key`, or None when no pattern matches.

        Raises ConfigError when two agents' patterns both match.
        """
        try:
            return self._owners[key]
        except KeyError:
            pass
        owners = [a.name for a in self.agents if _matcher(a.owns)(key) is not None]
        if len(owners) > 1:
            raise ConfigError(f"roster: key {key!r} is owned by several agents: {owners}")
        if len(self._owners) >= OWNER_CACHE:  # keys come from peers: bound the memory
            self._owners.clear()
        owner = self._owners[key] = owners[0] if owners else None
        return owner

    def public_key_of(self, name: str) -> bytes | None:
        """An agent's Ed25519 public key, or None if it is not a member."""
        for agent in self.agents:
            if agent.name == name:
                return agent.public_key
        return None

    def agent_by_noise_key(self, noise_key: bytes) -> Agent | None:
        """The member whose Noise static key is `noise_key`, or None."""
        for agent in self.agents:
            if agent.noise_key == noise_key:
                return agent
        return None

    def to_toml_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "agents": [a.to_json() for a in self.agents]}


def _check_point(public_key: bytes, where: str) -> None:
    """Raise ConfigError unless `public_key` is an Ed25519 point libsodium can convert to the
    agent's Noise key (libsodium raises a bare RuntimeError for one that is not)."""
    try:
        crypto_sign_ed25519_pk_to_curve25519(public_key)
    except RuntimeError:
        raise ConfigError(f"{where}: 'public_key' is not a valid Ed25519 public key") from None


def parse_address(text: str) -> tuple[str, int]:
    """Split "HOST:PORT" (IPv6 as "[::1]:PORT"); raises ConfigError with the offending text."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"bad address {text!r}: expected HOST:PORT")
    return host, int(port)


def roster_from_dict(data: dict[str, Any], source: str = "roster") -> Roster:
    """Build a Roster from parsed TOML; raises ConfigError naming the bad field."""
    cluster = data.get("cluster")
    if not isinstance(cluster, str) or not cluster:
        raise ConfigError(f"{source}: 'cluster' must be a non-empty string")
    raw_agents = data.get("agents")
    if not isinstance(raw_agents, list) or not raw_agents:
        raise ConfigError(f"{source}: needs at least one [[agents]] table")
    agents = []
    for i, raw in enumerate(raw_agents):
        where = f"{source}: agents[{i}]"
        try:
            name, address, key_hex, owns = (
                raw["name"],
                raw["address"],
                raw["public_key"],
                raw.get("owns", []),
            )
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"{where}: missing field {exc}") from None
        check_name(name, f"{where}: 'name'")
        try:
            public_key = bytes.fromhex(key_hex)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: 'public_key' must be hex") from None
        if len(public_key) != 32:
            raise ConfigError(f"{where}: 'public_key' must be 32 bytes")
        _check_point(public_key, f"{where} ({name})")
        if not isinstance(owns, list) or not all(isinstance(p, str) and p for p in owns):
            raise ConfigError(f"{where}: 'owns' must be a list of patterns")
        host, port = parse_address(address) if isinstance(address, str) else ("", -1)
        if port < 0:
            raise ConfigError(f"{where}: 'address' must be HOST:PORT")
        agents.append(Agent(name, host, port, public_key, tuple(owns)))
    return Roster(cluster, tuple(agents))


def load_roster(path: Path) -> Roster:
    """Read a roster TOML file; raises ConfigError when missing or invalid."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"no roster at {path} (run `planfence cluster init` first)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    return roster_from_dict(data, str(path))
