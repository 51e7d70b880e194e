"""One direction of a shaped link, as a pure model: bytes in at "now", releases out (sans-IO).

The caller injects time as integer milliseconds on the shaper clock (non-decreasing) and never
needs to call at any particular moment: every call first serves all opportunities up to "now"
in one batch, so a late timer wake-up loses no capacity (`SEMANTICS.md` §7.8).

Model, per direction, reproducing `mm-delay D mm-link` (`SEMANTICS.md` §1, §2, §7):

- The byte stream of each connection (`tag`) is cut into chunks of at most `MSS` = 1448
  payload bytes, the payload of a full TCP segment with timestamps. Bytes arriving while the
  last queued chunk of the same connection is still waiting and not full are appended to it,
  as a TCP sender coalesces a send buffer into full segments.
- Each chunk is charged its payload + `CHUNK_OVERHEAD` = 56 B: 20 B IPv4 + 32 B TCP with the
  timestamp option + the 4 B packet-info header mm-link counts. Each opportunity carries
  `BYTES_PER_OPPORTUNITY` = 1504 B, mm-link's figure, so a full chunk uses exactly one
  opportunity, as a full packet does in mm-link. Several small chunks share an opportunity; a
  large one spans several; bytes of an opportunity the queue cannot use are lost.
  Reverse-direction ACKs are not charged (a relay never sees them).
- A chunk arriving at ms `a` can only use opportunities at ms > `a`. It departs at the
  opportunity that serves its last byte and is released at departure + `delay_ms`.
- Loss: each chunk is lost with probability `loss` (seeded `random.Random`); TCP would resend
  it, so a lost chunk is released `loss_penalty_ms` later (default: max(200 ms, 2 × delay),
  Linux's minimum RTO or one base RTT if longer). A connection's bytes stay in order: a chunk
  is never released before an earlier chunk of the same connection (head-of-line blocking).
- End of stream is a zero-payload chunk (a FIN, charged 56 B) so it follows the data.
- Without a schedule (profile `loopback`) chunks depart at arrival: delay and loss only.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter, deque
from dataclasses import dataclass

from planfence_net.traces.mmlink import Schedule

DEFAULT_QUEUE_BYTES = 256 * 1024  # about 0.4 s of queueing at 5 Mbit/s

MSS = 1448
CHUNK_OVERHEAD = 56
BYTES_PER_OPPORTUNITY = 1504


def check_link(delay_ms: int, loss: float) -> None:
    """Raise ValueError unless `delay_ms` >= 0 and `loss` is in [0, 1): one direction's
    settings, for this model and the packet-level one (`packetlink`)."""
    if delay_ms < 0:
        raise ValueError(f"delay_ms must be >= 0, got {delay_ms}")
    if not 0.0 <= loss < 1.0:
        raise ValueError(f"loss must be in [0, 1), got {loss}")


@dataclass(frozen=True, slots=True)
class Release:
    """A chunk leaving the link: `data` is empty for end of stream; times are shaper ms."""

    tag: int
    data: bytes
    arrival_ms: int
    departure_ms: int
    release_ms: int
    lost: bool


@dataclass(frozen=True, slots=True)
class LinkStatistics:
    """Counters of one direction. Bytes are payload bytes; `queued_bytes` is the bottleneck
    queue now, `queued_bytes_max` its peak; queueing delay = departure - arrival of a chunk (ms).
    """

    bytes_in: int
    bytes_out: int
    chunks_out: int
    chunks_lost: int
    queued_bytes: int
    queued_bytes_max: int
    queue_delay_mean_ms: float
    queue_delay_median_ms: float
    queue_delay_max_ms: int


class _Chunk:
    __slots__ = ("tag", "data", "arrival_ms", "served", "eof")

    def __init__(self, tag: int, data: bytes, arrival_ms: int, eof: bool = False) -> None:
        self.tag = tag
        self.data = bytearray(data)
        self.arrival_ms = arrival_ms
        self.served = 0  # bytes of the charge already carried by earlier opportunities
        self.eof = eof

    @property
    def charge(self) -> int:
        return len(self.data) + CHUNK_OVERHEAD


class Link:
    """One direction of a shaped link. Not thread-safe; one event loop drives it.

    `push`, `push_eof` and `poll` take `now_ms`, which must never decrease between calls.
    """

    def __init__(
        self,
        schedule: Schedule | None,
        *,
        delay_ms: int = 0,
        loss: float = 0.0,
        rng: random.Random | None = None,
        loss_penalty_ms: int | None = None,
    ) -> None:
        check_link(delay_ms, loss)
        self._schedule = schedule
        self._delay_ms = delay_ms
        self._loss = loss
        self._rng = rng if rng is not None else random.Random(0)
        self._penalty_ms = max(200, 2 * delay_ms) if loss_penalty_ms is None else loss_penalty_ms
        self._queue: deque[_Chunk] = deque()
        self._next = 0  # global index of the next opportunity to process (queue non-empty)
        self._now = 0
        self._queued_bytes = 0
        self._queued_bytes_max = 0
        self._delayed: list[tuple[int, int, Release]] = []  # heap of (release_ms, seq, release)
        self._delayed_bytes = 0
        self._seq = 0
        self._last_release: dict[int, int] = {}
        self._bytes_in = 0
        self._bytes_out = 0
        self._chunks_out = 0
        self._chunks_lost = 0
        self._delays: Counter[int] = Counter()

    @property
    def queued_bytes(self) -> int:
        """Payload bytes waiting for the bottleneck (not yet departed)."""
        return self._queued_bytes

    @property
    def delayed_bytes(self) -> int:
        """Payload bytes that departed and wait out the one-way delay (or were not polled)."""
        return self._delayed_bytes

    def push(self, now_ms: int, tag: int, data: bytes) -> None:
        """Queue `data` of connection `tag`, arrived at `now_ms`."""
        self._advance(now_ms)
        self._bytes_in += len(data)
        view = memoryview(data)
        tail = self._queue[-1] if self._queue else None
        if tail is not None and tail.tag == tag and not tail.eof and tail.served == 0:
            room = MSS - len(tail.data)
            if room > 0:
                tail.data += view[:room]
                self._queued_bytes += len(view[:room])
                view = view[room:]
                self._queued_bytes_max = max(self._queued_bytes_max, self._queued_bytes)
        for start in range(0, len(view), MSS):
            self._enqueue(now_ms, _Chunk(tag, bytes(view[start : start + MSS]), now_ms))

    def push_eof(self, now_ms: int, tag: int) -> None:
        """Queue the end of connection `tag`'s stream behind its data."""
        self._advance(now_ms)
        self._enqueue(now_ms, _Chunk(tag, b"", now_ms, eof=True))

    def poll(self, now_ms: int) -> list[Release]:
        """Serve every opportunity up to `now_ms`; return chunks released by then, in order."""
        self._advance(now_ms)
        out: list[Release] = []
        while self._delayed and self._delayed[0][0] <= now_ms:
            release = heapq.heappop(self._delayed)[2]
            self._delayed_bytes -= len(release.data)
            self._bytes_out += len(release.data)
            if not release.data:
                self._last_release.pop(release.tag, None)
            out.append(release)
        return out

    def rephase(self, now_ms: int, phase_ms: int) -> None:
        """Replay the trace from trace time `phase_ms` at `now_ms` on (the same trace, a new
        offset); queued bytes wait for the first opportunity after now at the new phase."""
        self._advance(now_ms)
        if self._schedule is None:
            return
        trace = self._schedule.trace
        self._schedule = Schedule(trace, (phase_ms - now_ms) % trace.period_ms)
        if self._queue:
            self._next = self._schedule.index_after(now_ms)

    def forget(self, tag: int) -> None:
        """Drop the ordering state of a finished connection (its queued bytes still drain)."""
        self._last_release.pop(tag, None)

    def next_event_ms(self) -> int | None:
        """Earliest ms at which `poll` may return something new; None while the link is idle."""
        candidates: list[int] = []
        if self._delayed:
            candidates.append(self._delayed[0][0])
        if self._queue and self._schedule is not None:
            head = self._queue[0]
            remaining = head.charge - head.served
            last = self._next + (remaining + BYTES_PER_OPPORTUNITY - 1) // BYTES_PER_OPPORTUNITY - 1
            candidates.append(self._schedule.time_of(last) + self._delay_ms)
        return min(candidates) if candidates else None

    def statistics(self) -> LinkStatistics:
        """Counters since the link was made; delays are exact (kept as a histogram of ms)."""
        count = sum(self._delays.values())
        mean = sum(ms * n for ms, n in self._delays.items()) / count if count else 0.0
        return LinkStatistics(
            bytes_in=self._bytes_in,
            bytes_out=self._bytes_out,
            chunks_out=self._chunks_out,
            chunks_lost=self._chunks_lost,
            queued_bytes=self._queued_bytes,
            queued_bytes_max=self._queued_bytes_max,
            queue_delay_mean_ms=mean,
            queue_delay_median_ms=_median(self._delays, count),
            queue_delay_max_ms=max(self._delays, default=0),
        )

    def _enqueue(self, now_ms: int, chunk: _Chunk) -> None:
        if self._schedule is None:
            self._depart(chunk, now_ms)
            return
        if not self._queue:
            # Opportunities up to now passed unused; the chunk may use only later ones.
            self._next = self._schedule.index_after(now_ms)
        self._queue.append(chunk)
        self._queued_bytes += len(chunk.data)
        self._queued_bytes_max = max(self._queued_bytes_max, self._queued_bytes)

    def _advance(self, now_ms: int) -> None:
        if now_ms < self._now:
            raise ValueError(f"time went backwards: {now_ms} < {self._now}")
        self._now = now_ms
        schedule = self._schedule
        if schedule is None:
            return
        queue = self._queue
        while queue:
            t = schedule.time_of(self._next)
            if t > now_ms:
                return
            budget = BYTES_PER_OPPORTUNITY
            while budget and queue:
                head = queue[0]
                take = min(budget, head.charge - head.served)
                head.served += take
                budget -= take
                if head.served == head.charge:
                    queue.popleft()
                    self._queued_bytes -= len(head.data)
                    self._depart(head, t)
            self._next += 1  # whatever budget is left is lost with this opportunity

    def _depart(self, chunk: _Chunk, departure_ms: int) -> None:
        lost = self._loss > 0.0 and self._rng.random() < self._loss
        release_ms = departure_ms + self._delay_ms + (self._penalty_ms if lost else 0)
        release_ms = max(release_ms, self._last_release.get(chunk.tag, 0))
        self._last_release[chunk.tag] = release_ms
        release = Release(
            tag=chunk.tag,
            data=bytes(chunk.data),
            arrival_ms=chunk.arrival_ms,
            departure_ms=departure_ms,
            release_ms=release_ms,
            lost=lost,
        )
        heapq.heappush(self._delayed, (release_ms, self._seq, release))
        self._delayed_bytes += len(release.data)
        self._seq += 1
        self._chunks_out += 1
        self._chunks_lost += lost
        self._delays[departure_ms - chunk.arrival_ms] += 1


def _median(histogram: Counter[int], count: int) -> float:
    """Median of the values in `histogram` (value -> count); 0.0 when empty."""
    if not count:
        return 0.0
    lower_rank, upper_rank = (count - 1) // 2, count // 2
    lower = upper = None
    seen = 0
    for value in sorted(histogram):
        seen += histogram[value]
        if lower is None and seen > lower_rank:
            lower = value
        if seen > upper_rank:
            upper = value
            break
    assert lower is not None and upper is not None
    return (lower + upper) / 2
