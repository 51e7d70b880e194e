"""`scripts/reproduce`: run the paper reproduction's experiments one at a time, into a folder.

    python -m planfence_net.bench.paper.reproduce --help
    python -m planfence_net.bench.paper.reproduce --quick                 # minutes, a temp dir
    python -m planfence_net.bench.paper.reproduce --out docs/results safety-att-lte

Each run is one `planfence bench EXPERIMENT --profile P --seed S --out OUT/NAME` (or Figure 2,
`python -m planfence_net.bench.paper.figure2`), in a process of its own, one after the other
(a run beside another is a loaded machine). Nothing is written into the checkout unless
`--out` names a folder there: without `--out` the reports go to a new folder under the
system's temporary directory, which is printed. A run whose traces are not on the search path
(`PLANFENCE_TRACES`, then the project's `traces/`) is skipped with one line; a failed run is
reported and the others still run. Exit status 1 when any run failed, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ...core.errors import ConfigError
from ...traces import require_traces

CARRIERS = ("att-lte", "tmobile-lte", "verizon-lte")


@dataclass(frozen=True, slots=True)
class Run:
    """One report: its folder name, the command's arguments after the program, whether it
    takes a `--quick`, its link profile, and what it takes (time full / quick, what it needs)."""

    name: str
    kind: str  # "bench" | "figure2"
    args: tuple[str, ...]
    profile: str
    takes: str

    def argv(self, out: Path, quick: bool, seed: int) -> list[str]:
        """The command line of this run writing into `out / name`."""
        folder = str(out / self.name)
        if self.kind == "figure2":
            reps = "2" if quick else "10"
            return [
                *(sys.executable, "-m", "planfence_net.bench.paper.figure2", self.profile),
                *("--reps", reps, "--seed", str(seed), "--out", folder),
            ]
        return [
            *(sys.executable, "-m", "planfence_net", "bench", *self.args),
            *("--profile", self.profile, "--seed", str(seed), "--out", folder),
            *(["--quick"] if quick else []),
        ]


def _bench(experiment: str, profile: str, takes: str, *extra: str, name: str = "") -> Run:
    return Run(name or f"{experiment}-{profile}", "bench", (experiment, *extra), profile, takes)


TRACES = "needs the Mahimahi traces on PLANFENCE_TRACES"
# Times as measured on this project's 2-core machine while shared (1-minute load 8 to 16);
# full runs scale with their actions (safety: 33x the quick run's, rate: 3x).
RUNS = (
    _bench("safety", "loopback", "9 policies x 330 raced actions; ~10 min, quick ~45 s"),
    _bench(
        "rate",
        "loopback",
        "every safe policy x 4 rates, the paper's workload and the burst ablation; "
        "~3 min, quick ~45 s",
    ),
    _bench("keyspace", "loopback", "allkeys vs planfence, |X| 8 to 128; ~1 min, quick ~15 s"),
    _bench("scope", "loopback", "allkeys vs planfence, d 1 to 8; ~1 min, quick ~10 s"),
    _bench("ablations", "loopback", "depth, replan, omission, fail-closed; ~1 min, quick ~15 s"),
    *(
        _bench("safety", c, f"as safety-loopback on {c}; ~2 h, quick ~4 min; {TRACES}")
        for c in CARRIERS
    ),
    _bench(
        "safety",
        "att-lte",
        f"the ablation with trace phases drawn per policy; ~2 h, quick ~4 min; {TRACES}",
        "--phases",
        "independent",
        name="safety-att-lte-independent",
    ),
    *(
        _bench("rate", c, f"as rate-loopback on {c}; ~15 min, quick ~5 min; {TRACES}")
        for c in CARRIERS
    ),
    _bench("keyspace", "att-lte", f"as keyspace-loopback on att-lte; ~4 min; {TRACES}"),
    *(
        Run(
            f"figure2-{c}",
            "figure2",
            (),
            c,
            f"one authenticated sync vs payload, delay, loss; ~3 min, quick ~1 min; {TRACES}",
        )
        for c in CARRIERS
    ),
)


def describe() -> str:
    """The experiments, one line each (the `--help` epilog)."""
    width = max(len(r.name) for r in RUNS)
    lines = ["experiments (all of them, in this order, when none is named):"]
    lines += [f"  {r.name:<{width}}  {r.takes}" for r in RUNS]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(
        prog="scripts/reproduce",
        description="Run the paper reproduction's experiments one after another and write a "
        "report folder per experiment (rows, report.md, plots). Without --out nothing is "
        "written into the checkout.",
        epilog=describe(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    found.add_argument("names", nargs="*", metavar="EXPERIMENT", help="runs to make (default: all)")
    found.add_argument(
        "--quick", action="store_true", help="few actions per run: minutes, not hours"
    )
    found.add_argument(
        "--out",
        type=Path,
        help="folder for the reports, one sub-folder per run (e.g. docs/results to rewrite "
        "the committed ones); default: a new folder under the system's temporary directory",
    )
    found.add_argument("--seed", type=int, default=0, help="schedule and trace seed (default 0)")
    found.add_argument(
        "--loopback-only", action="store_true", help="only the runs that need no traces"
    )
    found.add_argument(
        "--dry-run", action="store_true", help="print the commands instead of running them"
    )
    return found


def choose(names: Sequence[str], loopback_only: bool) -> list[Run]:
    """The runs named (all when none is), in the table's order; raises ConfigError for an
    unknown name."""
    known = {r.name for r in RUNS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"unknown experiment {unknown[0]!r} (see --help)")
    chosen = [r for r in RUNS if not names or r.name in names]
    return [r for r in chosen if r.profile == "loopback"] if loopback_only else chosen


def default_out() -> Path:
    """A new folder under the system's temporary directory, never inside the checkout."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return Path(tempfile.gettempdir()) / "planfence-reproduce" / stamp


def reproduce(
    runs: list[Run],
    out: Path,
    quick: bool,
    seed: int,
    say: Callable[[str], None] = print,
    execute: Callable[[list[str], Path], int] | None = None,
) -> int:
    """Make each run in turn, its output in `out / name`, its log in `out / name.log`;
    returns how many failed. A run whose traces are missing is skipped with one line."""
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for run in runs:
        try:
            require_traces(run.profile)
        except ConfigError as exc:
            say(f"skipped: {run.name} ({exc})")
            continue
        began = time.monotonic()
        status = (execute or _execute)(run.argv(out, quick, seed), out / f"{run.name}.log")
        took = time.monotonic() - began
        if status == 0:
            say(f"done: {run.name} ({took:.0f} s) -> {out / run.name}")
        else:
            failed += 1
            say(f"FAILED: {run.name} (exit {status}; log {out / f'{run.name}.log'})")
    return failed


def _execute(argv: list[str], log: Path) -> int:
    with open(log, "w", encoding="utf-8") as f:
        return subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        runs = choose(args.names, args.loopback_only)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = args.out if args.out is not None else default_out()
    if args.dry_run:
        for run in runs:
            print(" ".join(run.argv(out, args.quick, args.seed)))
        return 0
    print(f"reports into {out} ({len(runs)} runs{', quick' if args.quick else ''})")
    return 1 if reproduce(runs, out, args.quick, args.seed) else 0


if __name__ == "__main__":
    sys.exit(main())
