"""Who keeps a place at the door while not yet proven: members first (pure, no I/O).

A connection the owner accepted is a **stranger** until its IK message 1 names a roster
member, then a **claimant** until its first valid transport message proves it (anyone who
captured a member's message 1 can replay it, so a claim is not yet a proof). Strangers cost
the owner a descriptor and a task; they are bounded by their own limits, never by the places
of claimants (`max_handshakes`), so connections that send nothing cannot keep a member's
handshake out:

    max_strangers          strangers at once, all addresses
    strangers_per_address  strangers from one source address
    max_handshakes         claimants at once
    max_connections        connections of any kind

At a limit the **oldest** stranger (of that address, for the per-address cap) loses its
place and the newcomer is admitted: an attacker holding idle connections can only push out
its own, and a member's connection, which names its key in its first message, is a stranger
for one round trip. A newcomer is refused only when every connection is proven or claimed.
A claim over `max_handshakes` pushes out the oldest claimant. The door closes whatever this
module evicts and applies the stranger deadline (`Limits.stranger_timeout`).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from .limits import Limits


def source_of(remote: str) -> str:
    """The source a per-address cap counts for `remote` (HOST:PORT): an IPv4 address as it
    is, an IPv6 address by its /64 (one host is given a whole /64); "?" when unknown."""
    host = remote.rpartition(":")[0].strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host or "?"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


class Place:
    """One unproven connection's place: its source address, the door's handle for closing
    it (`closer`, e.g. its cancel scope) and, once it lost its place, why (`evicted`)."""

    __slots__ = ("address", "closer", "claimed", "evicted")

    def __init__(self, address: str, closer: Any) -> None:
        self.address = address
        self.closer = closer
        self.claimed = False
        self.evicted = ""


class Admission:
    """The places of strangers and claimants under `limits` (module docstring)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.strangers: dict[Place, None] = {}  # oldest first
        self.by_address: dict[str, dict[Place, None]] = {}
        self.claimants: dict[Place, None] = {}  # oldest first

    def arrive(
        self, address: str, closer: Any, connections: int
    ) -> tuple[Place | None, Place | None, str]:
        """Admit a newcomer from `address` while `connections` are open (this one not
        counted): (its place or None when refused, the place evicted for it or None, the
        limit that was reached or "")."""
        evicted, reason = None, ""
        mine = self.by_address.get(address, {})
        if len(mine) >= self.limits.strangers_per_address:
            evicted = next(iter(mine))
            reason = f"{self.limits.strangers_per_address} strangers from {address}"
        elif len(self.strangers) >= self.limits.max_strangers:
            evicted = next(iter(self.strangers))
            reason = f"{self.limits.max_strangers} strangers"
        elif connections >= (self.limits.max_connections or 0):
            reason = f"{self.limits.max_connections} connections open"
            if not self.strangers:
                return None, None, reason
            evicted = next(iter(self.strangers))
        if evicted is not None:
            self.leave(evicted)
            evicted.evicted = reason
        place = Place(address, closer)
        self.strangers[place] = None
        self.by_address.setdefault(address, {})[place] = None
        return place, evicted, reason

    def claim(self, place: Place) -> Place | None:
        """`place` named a roster member: it becomes a claimant. Returns the oldest claimant
        evicted for it when `max_handshakes` were held, else None."""
        self._forget_stranger(place)
        place.claimed = True
        evicted = None
        if len(self.claimants) >= self.limits.max_handshakes:
            evicted = next(iter(self.claimants))
            self.leave(evicted)
            evicted.evicted = f"{self.limits.max_handshakes} handshakes in progress"
        self.claimants[place] = None
        return evicted

    def leave(self, place: Place) -> None:
        """`place` is proven or closed: it holds nothing any more (idempotent)."""
        self._forget_stranger(place)
        self.claimants.pop(place, None)

    @property
    def unproven(self) -> int:
        return len(self.strangers) + len(self.claimants)

    def _forget_stranger(self, place: Place) -> None:
        if place in self.strangers:
            del self.strangers[place]
            mine = self.by_address[place.address]
            del mine[place]
            if not mine:
                del self.by_address[place.address]
