"""What an owner daemon lets one peer hold, and the pure helpers that enforce it.

Wire-level caps (frame, message, keys per request, key length, put body, put_many items
and bytes) live in the protocol core (`framing`, `messages`, `records`). The limits here are
the daemon's own: how many connections, handshakes, sessions and subscriptions it keeps, how
many pushes it queues for a subscriber, how many reply bytes it holds for peers that do not
read, and how often it logs events a stranger can cause. Every one has a default that a busy
cluster never meets.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..core.errors import ConfigError

# File descriptors kept free for the store (SQLite database, WAL, shared memory), the log
# and the listener, whatever the connection limit says.
RESERVED_DESCRIPTORS = 64
DEFAULT_CONNECTIONS = 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """An owner daemon's resource limits (see docs/FAULTS.md, "Resource limits")."""

    # Open TCP connections, authenticated or not. None: 1024, or fewer when the descriptor
    # limit (RLIMIT_NOFILE) is lower, so accept() meets this limit before running out.
    max_connections: int | None = None
    # Places at the door (owners/admission.py): connections that named a roster member in
    # their first handshake message, not yet proven by a valid transport message...
    max_handshakes: int = 64
    # ...and strangers, which have not named one yet: at a limit the oldest is closed.
    max_strangers: int = 256
    strangers_per_address: int = 128  # an IPv6 source counted by its /64
    stranger_timeout: float = 3.0  # seconds from accept to a first message naming a member
    sessions_per_peer: int = 64  # proven sessions of one roster member
    first_message_timeout: float = 5.0  # seconds from handshake to the first valid message
    requests_per_session: int = 64  # in flight; at the cap the session is not read
    subscriptions_per_session: int = 16
    queued_push_bytes: int = 1024 * 1024  # unsent pushes of one session before it is dropped
    # records one push carries for a subscriber that asked for them (at most a quarter of
    # `queued_push_bytes` and of the message cap); a record beyond it goes as its row only
    push_record_bytes: int = 256 * 1024
    reply_budget: int = 128 * 1024 * 1024  # bytes of large replies held at once, all sessions
    request_budget: int = 64 * 1024 * 1024  # bytes of large requests held at once
    large_messages: int = 4  # messages over one chunk being received at once, all sessions
    message_stall: float = 10.0  # seconds a large message may pause while others wait
    send_timeout: float = 60.0  # seconds one reply may wait for the peer to read it
    stranger_burst: int = 50  # log events strangers can cause: burst, then `stranger_rate`/s
    stranger_rate: float = 10.0

    def for_descriptors(self, soft_limit: int | None = None) -> Limits:
        """These limits with `max_connections` decided: as configured, or else 1024 lowered
        to fit the process's descriptor limit (RLIMIT_NOFILE, or `soft_limit`)."""
        if self.max_connections is not None:
            return self
        if soft_limit is None:
            soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        fit = (
            DEFAULT_CONNECTIONS
            if soft_limit == resource.RLIM_INFINITY
            else max(1, min(DEFAULT_CONNECTIONS, soft_limit - RESERVED_DESCRIPTORS))
        )
        return replace(
            self,
            max_connections=fit,
            max_handshakes=min(self.max_handshakes, fit),
            max_strangers=min(self.max_strangers, fit),
        )

    @classmethod
    def parse(cls, settings: list[str]) -> Limits:
        """Limits from `NAME=VALUE` strings (the `--limit` option); raises ConfigError
        naming the setting that is unknown or not a positive number."""
        values: dict[str, Any] = {}
        for setting in settings:
            name, _, text = setting.partition("=")
            name = _OLD_NAMES.get(name, name)
            if name not in _NUMBERS:
                raise ConfigError(f"unknown limit {name!r} (known: {', '.join(_NUMBERS)})")
            try:
                value = _NUMBERS[name](text)
            except ValueError:
                value = 0
            if value <= 0:
                raise ConfigError(f"limit {name} must be a positive number, not {text!r}")
            values[name] = value
        return cls(**values)


_NUMBERS: dict[str, Callable[[str], float]] = {
    name: float if isinstance(getattr(Limits(), name), float) else int
    for name in Limits.__dataclass_fields__
}
# Names `--limit` accepted before durations were called timeouts; still read, never listed.
_OLD_NAMES = {
    "stranger_deadline": "stranger_timeout",
    "first_message_deadline": "first_message_timeout",
    "send_deadline": "send_timeout",
}


class RateLimit:
    """A token bucket over `clock` (seconds; `time.monotonic` unless a test injects one):
    `allow()` says whether one more event may be logged; `suppressed` counts the refusals
    since the last allowed event."""

    def __init__(
        self, burst: int, rate: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.burst, self.rate = burst, rate
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self.suppressed = 0
        self.suppressed_total = 0

    def allow(self) -> bool:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.rate)
        self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        self.suppressed += 1
        self.suppressed_total += 1
        return False

    def take_suppressed(self) -> int:
        """The refusals since the last call (logged with the next allowed event)."""
        count, self.suppressed = self.suppressed, 0
        return count
