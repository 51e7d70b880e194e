"""Record fetches in flight in one process, so executors that miss the same records at once
ask the owners once.

When a declared key changes, every executor of a process replans onto the same new plan at
about the same moment, and every one misses the same records. `Flights` remembers which ids
some runner is already asking the owners for: a runner claims the ids nobody is fetching,
waits for the flights of the others, and asks again itself only for what those flights did not
find. Records are immutable and named by their hash, so a record another runner fetched and
verified is exactly the one this runner would have fetched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import anyio


@dataclass(frozen=True, slots=True)
class Claim:
    """A runner's part of a fetch: `mine` to ask the owners for (then `Flights.land`), and
    the flights of other runners to wait for (`others`), which carry the rest of the ids."""

    mine: tuple[bytes, ...]
    flight: anyio.Event
    others: tuple[anyio.Event, ...]


class Flights:
    """Ids some runner is fetching, each with the event set when its fetch ends."""

    __slots__ = ("_pending", "joined", "flown")

    def __init__(self) -> None:
        self._pending: dict[bytes, anyio.Event] = {}
        self.joined = 0  # ids a runner waited for instead of asking
        self.flown = 0  # ids a runner asked the owners for

    def claim(self, ids: Sequence[bytes]) -> Claim:
        """Take every id of `ids` no runner is fetching; the others are waited for. Every
        claim must be `land`ed, also when the fetch fails or is cancelled."""
        flight = anyio.Event()
        mine: list[bytes] = []
        others: dict[int, anyio.Event] = {}
        for rid in ids:
            event = self._pending.get(rid)
            if event is None:
                self._pending[rid] = flight
                mine.append(rid)
            else:
                others[id(event)] = event
        self.flown += len(mine)
        self.joined += len(ids) - len(mine)
        return Claim(tuple(mine), flight, tuple(others.values()))

    def land(self, claim: Claim) -> None:
        """The fetch of `claim.mine` ended (found or not): wake whoever waits for it."""
        for rid in claim.mine:
            if self._pending.get(rid) is claim.flight:
                del self._pending[rid]
        claim.flight.set()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def statistics(self) -> dict[str, int]:
        return {"in_flight": self.in_flight, "flown": self.flown, "joined": self.joined}
