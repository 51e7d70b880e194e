"""Run every torture fault against real owner processes, each group under a time bound.

The groups: kill -9 rounds (`crash`), store damage (`damage`), disk full (`diskfull`),
when the module is present, the resource attacks (`resources`), and partitions on separate
network stacks (`partition`, skipped without root). A group that overruns its
bound or fails unexpectedly becomes one row saying so; the others still run.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path

import anyio

from . import FaultResult, crash, damage, diskfull, format_table, partition

Group = Callable[[Path], Awaitable[list[FaultResult]]]
BOUND = 300.0  # seconds per group, beyond the kill -9 rounds' own share
SECONDS_PER_ROUND = 5.0


def groups(*, quick: bool, rounds: int | None) -> list[tuple[str, Group, float]]:
    """(name, run, time bound) of every group this installation has."""
    crash_rounds = rounds or (crash.QUICK_ROUNDS if quick else crash.ROUNDS)
    found: list[tuple[str, Group, float]] = [
        (
            "kill -9",
            lambda d: crash.run(d, quick=quick, rounds=crash_rounds),
            BOUND + crash_rounds * SECONDS_PER_ROUND,
        ),
        ("store damage", lambda d: damage.run(d, quick=quick), BOUND),
        ("disk full", lambda d: diskfull.run(d, quick=quick), BOUND),
    ]
    try:
        resources = importlib.import_module(f"{__package__}.resources")
    except ModuleNotFoundError:
        return found
    found.append(("resource limits", lambda d: resources.run(d, quick=quick), BOUND))
    found.append(("partition", lambda d: partition.run(d, quick=quick), BOUND))
    return found


async def run_suite(
    *,
    quick: bool,
    rounds: int | None = None,
    only: Collection[str] | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> list[FaultResult]:
    """Every group (or those named in `only`), each in a fresh temporary folder; returns all
    rows in order."""
    rows: list[FaultResult] = []
    for name, group, bound in groups(quick=quick, rounds=rounds):
        if only is not None and name not in only:
            continue
        progress(f"{name} ...")
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="planfence-torture-") as workdir:
            try:
                with anyio.fail_after(bound):
                    rows += await group(Path(workdir))
            except TimeoutError:
                rows.append(FaultResult(name, 0, 0, 0, f"timed out after {bound:g} s"))
            except Exception as exc:  # one broken group must not hide the others' rows
                rows.append(FaultResult(name, 0, 0, 0, f"failed: {exc!r}"[:160]))
        progress(f"{name}: {time.monotonic() - started:.1f} s")
    return rows


def main(argv: list[str] | None = None) -> int:
    """`scripts/torture [--quick] [--rounds N]`: print the table; exit 0 when all held."""
    parser = argparse.ArgumentParser(prog="scripts/torture", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a few rounds, seconds")
    parser.add_argument("--rounds", type=int, default=None, help="kill -9 rounds")
    args = parser.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    rows = anyio.run(lambda: run_suite(quick=args.quick, rounds=args.rounds, progress=progress))
    print(format_table(rows))
    return 0 if all(r.held or r.outcome.startswith("skipped") for r in rows) else 1
