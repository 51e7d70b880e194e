"""Mahimahi `mm-link` trace files and the looping opportunity schedule they describe (sans-IO).

A trace file holds one non-negative integer per line: the millisecond at which one 1500-byte
delivery opportunity happens (repeat a value for several opportunities in one ms). Values never
decrease, empty lines are invalid, the file is not empty and its last value is > 0
(Mahimahi's `mm-link` format; `traces/README.md`). The trace loops with period = last value: on
wrap-around the time base advances by `last`, so opportunity `i` of pass `p` happens at
`p * last + t[i]`.

`Schedule` maps a trace onto the shaper's clock: shaper time 0 is trace time `offset_ms`
(the trace phase). Everything here is pure: no clock, no files except `read_trace`.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from planfence_net.core.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Trace:
    """A parsed trace: `timestamps` are the opportunity times (ms) of one pass, non-decreasing."""

    source: str
    timestamps: tuple[int, ...]

    @property
    def opportunities(self) -> int:
        """Number of delivery opportunities in one pass (= lines in the file)."""
        return len(self.timestamps)

    @property
    def period_ms(self) -> int:
        """Loop period: the last timestamp (not last + 1), as mm-link does."""
        return self.timestamps[-1]


def parse_trace(text: str, source: str) -> Trace:
    """Parse mm-link trace text strictly; `source` names the file in error messages.

    A final newline is optional. Raises ConfigError naming `source` and the 1-based line for an
    empty line, a line that is not a plain decimal integer, a value smaller than the previous
    one, a last value of 0, and for an empty file.
    """
    if not text:
        raise ConfigError(
            f"bad trace file {source}: the file is empty (a trace needs at least one line)"
        )
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    values: list[int] = []
    previous = 0
    for lineno, line in enumerate(lines, start=1):
        if not line:
            raise ConfigError(f"bad trace file {source}, line {lineno}: empty line")
        if not (line.isascii() and line.isdigit()):
            raise ConfigError(
                f"bad trace file {source}, line {lineno}: {line!r} is not a non-negative integer"
            )
        value = int(line)
        if value < previous:
            raise ConfigError(
                f"bad trace file {source}, line {lineno}: {value} is smaller than the previous "
                f"value {previous} (timestamps must not decrease)"
            )
        values.append(value)
        previous = value
    if previous == 0:
        raise ConfigError(
            f"bad trace file {source}, line {len(lines)}: the last value is 0 "
            "(it is the loop period and must be > 0)"
        )
    return Trace(source=source, timestamps=tuple(values))


def read_trace(path: Path) -> Trace:
    """Read and parse the trace at `path`; ConfigError if it cannot be read or parsed."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read trace file {path}: {exc.strerror or exc}") from exc
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"bad trace file {path}, line {line}: not ASCII text") from exc
    return parse_trace(text, str(path))


@dataclass(frozen=True, slots=True)
class Schedule:
    """A looping trace on the shaper clock: shaper ms `t` is trace ms `t + offset_ms`.

    Opportunities are numbered by a global index `k` over all passes (pass `k // n`, line
    `k % n`). `time_of(k)` may be negative for indices before the start phase; callers only use
    indices from `index_after(now)` with `now >= 0`.
    """

    trace: Trace
    offset_ms: int = 0

    def __post_init__(self) -> None:
        if self.offset_ms < 0:
            raise ConfigError(f"trace offset must be >= 0 ms, got {self.offset_ms}")

    def time_of(self, k: int) -> int:
        """Shaper time (ms) of the opportunity with global index `k`."""
        ts = self.trace.timestamps
        n = len(ts)
        return (k // n) * self.trace.period_ms + ts[k % n] - self.offset_ms

    def index_after(self, t: int) -> int:
        """Global index of the first opportunity strictly after shaper time `t` (ms)."""
        ts = self.trace.timestamps
        period = self.trace.period_ms
        trace_t = t + self.offset_ms
        passes = trace_t // period
        # Every opportunity of an earlier pass is at most passes * period <= trace_t, and the
        # last one of this pass is at (passes + 1) * period > trace_t, so the answer is here.
        return passes * len(ts) + bisect_right(ts, trace_t - passes * period)

    def count_between(self, start: int, end: int) -> int:
        """Number of opportunities with shaper time in (start, end], in ms."""
        return self.index_after(end) - self.index_after(start)

    def wait_after(self, t: int) -> int:
        """Milliseconds from `t` to the first opportunity strictly after `t` (always >= 1)."""
        return self.time_of(self.index_after(t)) - t
