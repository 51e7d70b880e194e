"""Generate the project's own `synthetic-lte` traces, reproducibly from a seed.

Model (per direction, independent): delivery opportunities form a Poisson process whose rate
changes every `STEP_MS` = 100 ms. The log of the rate (Mbit/s) follows a seeded mean-reverting
random walk (a discrete Ornstein-Uhlenbeck process):

    x[k+1] = x[k] + THETA * (ln(mean) - x[k]) + SIGMA * z[k],   z[k] ~ N(0, 1)

with THETA = 0.05 (about 2 s to revert), SIGMA = 0.15 (stationary sd of ln(rate) about 0.48)
and the rate clamped to [0.5, 50] Mbit/s. An opportunity carries 1500 B, so the process has
rate / 12 opportunities per ms. Geometric-mean rates: uplink 4 Mbit/s, downlink 8 Mbit/s, in
the range of the Mahimahi LTE traces' 1-s medians. Event times in (0, duration] are rounded up
to whole ms, and a final opportunity at exactly `duration` makes the loop period equal to the
duration. Only `random.Random.random()` is drawn (normal and exponential variates are computed
here), so the output depends only on the seed, not on the Python version's variate algorithms.

    python -m planfence_net.traces.generate [--seed 1] [--seconds 60] [--out traces] [--check]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

from planfence_net.traces.profiles import PROJECT_TRACES

DEFAULT_SEED = 1
DEFAULT_SECONDS = 60
STEP_MS = 100
THETA = 0.05
SIGMA = 0.15
MIN_MBIT, MAX_MBIT = 0.5, 50.0
MEAN_MBIT = {"up": 4.0, "down": 8.0}
BITS_PER_OPPORTUNITY = 1500 * 8


def generate(
    direction: str, *, seed: int = DEFAULT_SEED, seconds: int = DEFAULT_SECONDS
) -> list[int]:
    """Opportunity timestamps (ms, non-decreasing, last = seconds * 1000) for `direction`."""
    if direction not in MEAN_MBIT:
        raise ValueError(f"direction must be 'up' or 'down', got {direction!r}")
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    rng = random.Random(f"synthetic-lte:{direction}:{seed}")
    duration = seconds * 1000
    target = math.log(MEAN_MBIT[direction])
    log_rate = target
    out: list[int] = []
    t = 0.0
    for step_start in range(0, duration, STEP_MS):
        step_end = step_start + STEP_MS
        mbit = min(MAX_MBIT, max(MIN_MBIT, math.exp(log_rate)))
        per_ms = mbit * 1e6 / 1000 / BITS_PER_OPPORTUNITY
        # Poisson within the step; memorylessness lets each step restart at its start.
        t = float(step_start)
        while True:
            t += -math.log(1.0 - rng.random()) / per_ms
            if t > step_end:
                break
            out.append(math.ceil(t))
        log_rate += THETA * (target - log_rate) + SIGMA * _standard_normal(rng)
    if not out or out[-1] < duration:
        out.append(duration)
    return out


def _standard_normal(rng: random.Random) -> float:
    """Box-Muller from two uniform draws."""
    u1, u2 = rng.random(), rng.random()
    return math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)


def render(timestamps: list[int]) -> str:
    """The mm-link file text: one timestamp per line, with a final newline."""
    return "".join(f"{t}\n" for t in timestamps)


def file_texts(seed: int = DEFAULT_SEED, seconds: int = DEFAULT_SECONDS) -> dict[str, str]:
    """File name -> content of both synthetic-lte trace files."""
    return {
        f"synthetic-lte.{direction}": render(generate(direction, seed=seed, seconds=seconds))
        for direction in ("up", "down")
    }


def main(argv: list[str] | None = None) -> int:
    """Write (or with --check, compare) the trace files; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m planfence_net.traces.generate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--seconds", type=int, default=DEFAULT_SECONDS)
    parser.add_argument("--out", type=Path, default=PROJECT_TRACES, help="folder to write to")
    parser.add_argument("--check", action="store_true", help="only compare with the files in --out")
    args = parser.parse_args(argv)
    stale = []
    for name, text in file_texts(args.seed, args.seconds).items():
        path = args.out / name
        if args.check:
            if not path.is_file() or path.read_text(encoding="ascii") != text:
                stale.append(str(path))
            continue
        path.write_text(text, encoding="ascii")
        print(f"wrote {path} ({text.count(chr(10))} opportunities)")
    if stale:
        print(f"differs from a fresh generation: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
