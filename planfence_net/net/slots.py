"""Slots for large incoming messages, shared by all sessions of one owner; sans-IO.

A message longer than one chunk (64 KiB) is held until its last chunk arrives: up to 16 MiB.
Unbounded across sessions, that let a roster member open its 64 sessions and send all but
the last chunk of a 16 MiB message on each: 1 GiB held. An owner gives a slot to each of at
most `count` such messages at a time; a session whose message finds none stops reading
until one is free, first come, first served. A holder waits for nothing but its own peer,
so slots come free unless a peer stalls in the middle of a message: a holder that has sent
no chunk for `stall` seconds while another session waits is reported by `stalled`, and the
session layer closes it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable

Granted = Callable[[], None]


class MessageSlots:
    """At most `count` large messages being received at once (module docstring)."""

    def __init__(self, count: int, stall: float) -> None:
        self.count = count
        self.stall = stall
        self.waits = 0  # messages that had to wait for a slot
        self.evicted = 0  # holders closed for stalling while others waited
        self._holders: dict[Hashable, float] = {}  # holder -> time of its last chunk
        self._waiting: deque[tuple[Hashable, Granted]] = deque()

    def take(self, holder: Hashable, now: float, granted: Granted) -> bool:
        """A slot for `holder` at once (True), or a place in the queue (False): `granted()`
        is called when a slot is given to it."""
        if len(self._holders) < self.count:
            self._holders[holder] = now
            return True
        self.waits += 1
        self._waiting.append((holder, granted))
        return False

    def touch(self, holder: Hashable, now: float) -> None:
        """`holder` received a chunk at `now`."""
        if holder in self._holders:
            self._holders[holder] = now

    def give_back(self, holder: Hashable, now: float) -> None:
        """`holder` is done at `now` (its message is whole, or its session ended): its slot
        goes to the first waiter, or it leaves the queue. Giving back twice does nothing."""
        if self._holders.pop(holder, None) is None:
            self._waiting = deque(w for w in self._waiting if w[0] is not holder)
            return
        while self._waiting and len(self._holders) < self.count:
            waiter, granted = self._waiting.popleft()
            self._holders[waiter] = now  # its stall clock starts now
            granted()

    def waiting(self, holder: Hashable) -> bool:
        return any(w[0] is holder for w in self._waiting)

    def stalled(self, now: float) -> list[Hashable]:
        """Holders that received no chunk for `stall` seconds, while someone waits."""
        if not self._waiting:
            return []
        return [h for h, last in self._holders.items() if now - last >= self.stall]

    @property
    def held(self) -> int:
        return len(self._holders)
