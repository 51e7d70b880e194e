"""One direction of a packet-level link, as a pure model: IP packets in at "now", packets out
(sans-IO), as Mahimahi's `mm-delay D mm-link UP DOWN` moves them.

    link = PacketLink(Schedule(trace, offset_ms), delay_ms=30, loss=0.01, rng=Random(seed))
    kept = link.push(now_ms, packet)     # False: dropped (loss, or the queue is full)
    for packet in link.poll(now_ms):     # every packet whose time has come, in order
        ...
    link.next_event_ms()                 # when to poll next (None: idle)

Unlike `traces.link.Link` (bytes of a relayed TCP stream), this link sees the packets the
kernel sends: the TCP handshake, slow start, retransmissions and the reverse direction's
ACKs all cross it and pay for it, which is what a relay cannot charge. Model:
- Each packet is charged its length + 4 bytes (the packet-information header mm-link
  counts); each trace line is an opportunity of `BYTES_PER_OPPORTUNITY` = 1504 bytes. A
  packet arriving at ms `a` uses opportunities at ms > `a` only, a large one spans several,
  several small ones share one, and bytes of an opportunity the queue cannot use are lost.
- A packet departs at the opportunity that serves its last byte and comes out `delay_ms`
  later.
- Loss is real: a packet is dropped with probability `loss` (seeded) when it arrives, and TCP
  resends it as it would on a lossy link. A full queue (`queue_bytes`) drops too (drop-tail).
- Without a schedule (no trace) packets depart at arrival: delay and loss only.
Time is integer milliseconds, injected, never decreasing.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

from .link import BYTES_PER_OPPORTUNITY, DEFAULT_QUEUE_BYTES, check_link
from .mmlink import Schedule

PACKET_HEADER = 4  # mm-link's per-packet charge beyond the IP packet


@dataclass(frozen=True, slots=True)
class PacketCounts:
    packets_in: int
    packets_out: int
    dropped_loss: int
    dropped_queue: int
    bytes_out: int


class PacketLink:
    """One direction of a packet-level link (module docstring). One event loop drives it."""

    def __init__(
        self,
        schedule: Schedule | None,
        *,
        delay_ms: int = 0,
        loss: float = 0.0,
        rng: random.Random | None = None,
        queue_bytes: int = DEFAULT_QUEUE_BYTES,
    ) -> None:
        check_link(delay_ms, loss)
        self.schedule = schedule
        self.delay_ms = delay_ms
        self.loss = loss
        self.rng = rng if rng is not None else random.Random(0)
        self.queue_bytes = queue_bytes
        self.queue: deque[tuple[bytes, int]] = deque()  # (packet, bytes of it served)
        self.queued = 0
        self.next = 0  # global index of the next opportunity (while the queue is not empty)
        self.now = 0
        self.delayed: deque[tuple[int, bytes]] = deque()  # (release ms, packet), in order
        self.packets_in = self.packets_out = self.bytes_out = 0
        self.dropped_loss = self.dropped_queue = 0

    def push(self, now_ms: int, packet: bytes) -> bool:
        """Queue `packet`, arrived at `now_ms`; False when it was dropped."""
        self._advance(now_ms)
        self.packets_in += 1
        if self.loss and self.rng.random() < self.loss:
            self.dropped_loss += 1
            return False
        if self.schedule is None:
            self.delayed.append((now_ms + self.delay_ms, packet))
            return True
        if self.queued + len(packet) > self.queue_bytes:
            self.dropped_queue += 1
            return False
        if not self.queue:
            self.next = self.schedule.index_after(now_ms)
        self.queue.append((packet, 0))
        self.queued += len(packet)
        return True

    def poll(self, now_ms: int) -> list[bytes]:
        """Serve every opportunity up to `now_ms`; the packets out by then, in order."""
        self._advance(now_ms)
        out = []
        while self.delayed and self.delayed[0][0] <= now_ms:
            packet = self.delayed.popleft()[1]
            self.packets_out += 1
            self.bytes_out += len(packet)
            out.append(packet)
        return out

    def next_event_ms(self) -> int | None:
        """The earliest ms at which `poll` may return a packet; None while idle."""
        times = [self.delayed[0][0]] if self.delayed else []
        if self.queue and self.schedule is not None:
            packet, served = self.queue[0]
            left = len(packet) + PACKET_HEADER - served
            last = self.next + (left + BYTES_PER_OPPORTUNITY - 1) // BYTES_PER_OPPORTUNITY - 1
            times.append(self.schedule.time_of(last) + self.delay_ms)
        return min(times) if times else None

    def counts(self) -> PacketCounts:
        return PacketCounts(
            self.packets_in, self.packets_out, self.dropped_loss, self.dropped_queue, self.bytes_out
        )

    def _advance(self, now_ms: int) -> None:
        if now_ms < self.now:
            raise ValueError(f"time went backwards: {now_ms} < {self.now}")
        self.now = now_ms
        schedule, queue = self.schedule, self.queue
        while queue and schedule is not None:
            t = schedule.time_of(self.next)
            if t > now_ms:
                return
            budget = BYTES_PER_OPPORTUNITY
            while budget and queue:
                packet, served = queue[0]
                take = min(budget, len(packet) + PACKET_HEADER - served)
                budget -= take
                if served + take == len(packet) + PACKET_HEADER:
                    queue.popleft()
                    self.queued -= len(packet)
                    self.delayed.append((t + self.delay_ms, packet))
                else:
                    queue[0] = (packet, served + take)
            self.next += 1  # what is left of this opportunity's budget is lost with it
