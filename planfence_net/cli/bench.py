"""`planfence bench`: run a named experiment on a live cluster and write its report.

    planfence bench safety --profile att-lte --quick

`register(app)` adds the command to the composition root's typer app. The command creates a
temporary 8-agent cluster plus the central store, starts every process, puts shapers in front
of every owner for shaped profiles, runs the experiment with a progress bar, stops everything
(also on errors and Ctrl-C) and writes rows, report.md and plots to the output folder.
"""

from __future__ import annotations

import functools
import shlex
import tempfile
import time
from pathlib import Path
from typing import Optional

from typing import TYPE_CHECKING

import typer

from ..bench import EXPERIMENTS
from ..errors import ConfigError, PlanfenceError

if TYPE_CHECKING:  # imported where used: `planfence --help` never loads the harness
    from ..bench.experiments import Experiment
    from ..cluster import ClusterDir

SHAPER_READY_TIMEOUT = 15.0


class ClusterShapers:
    """The cluster's shapers (`cluster.start_shapers`), restarted for every policy so each
    replays the same trace phase, and waited for until each accepts connections."""

    def start(self, cdir: ClusterDir, profile: str, seed: int) -> dict[str, tuple[str, int]]:
        import anyio

        from .. import cluster as clusterlib
        from ..api import wait_cluster_ready

        clusterlib.stop_shapers(cdir)
        addresses = clusterlib.start_shapers(cdir, profile, seed=seed)
        # runs in a worker thread of the experiment's loop: its own loop for the wait
        anyio.run(functools.partial(wait_cluster_ready, cdir, list(addresses),
                                    SHAPER_READY_TIMEOUT, addresses,
                                    watch=clusterlib.shaper_name), backend="asyncio")
        return addresses

    def stop(self, cdir: ClusterDir) -> None:
        from .. import cluster as clusterlib

        clusterlib.stop_shapers(cdir)


def count_actions(experiment: Experiment, seed: int) -> int:
    from ..bench.workload import make_schedule

    return sum(len(case.policies) * len(make_schedule(list(case.templates), case.params, seed))
               for case in experiment.cases)


def register(app: typer.Typer) -> None:
    """Add the `bench` command to `app`."""

    @app.command("bench")
    def bench(
        experiment: str = typer.Argument(..., help=f"One of: {', '.join(EXPERIMENTS)}."),
        profile: str = typer.Option("loopback", "--profile",
                                    help="Link profile (see `planfence profiles`)."),
        quick: bool = typer.Option(False, "--quick", help="Few actions: under two minutes."),
        out: Optional[Path] = typer.Option(
            None, "--out", help="Output folder (default docs/results/EXPERIMENT-PROFILE; with "
                                "--quick a temporary folder, never the checkout)."),
        seed: int = typer.Option(0, "--seed", help="Schedule and trace seed."),
        sync_k: int = typer.Option(1, "--sync-k", min=1,
                                   help="K of the sync baseline: owners push after every K "
                                        "dirty updates."),
    ) -> None:
        """Run EXPERIMENT against a live cluster it starts and stops; write rows, a Markdown
        report next to the paper's numbers, and plots."""
        from ..bench.experiments import build
        from ..bench.report import write_report
        from ..traces import require_traces

        command = shlex.join(["planfence", "bench", experiment, "--profile", profile,
                              *(["--quick"] if quick else []), "--seed", str(seed),
                              *(["--sync-k", str(sync_k)] if sync_k != 1 else [])])
        folder = out or default_out(experiment, profile, quick)
        try:
            plan = build(experiment, quick=quick)
            shaped = require_traces(profile).shaped
            started = time.monotonic()
            rows = _run(plan, profile, seed, ClusterShapers() if shaped else None, sync_k)
            summaries = write_report(folder, experiment, profile, rows, command,
                                     time.monotonic() - started,
                                     _notes(shaped, sync_k))
        except (PlanfenceError, ConfigError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        for s in summaries:
            typer.echo(f"{s.case:<16} {s.policy:<20} issued {s.issued:>3}/{s.actions:<3} "
                       f"invalid {s.invalid:>3}  stall {s.stall_median:8.1f} ms  "
                       f"{s.kib_median:7.2f} KiB")
        typer.echo(f"report: {folder / 'report.md'}")


def default_out(experiment: str, profile: str, quick: bool) -> Path:
    """docs/results/EXPERIMENT-PROFILE for a full run (the committed reports); a quick run
    is a smoke test and goes to the temporary folder, so it never dirties the checkout."""
    if quick:
        return Path(tempfile.gettempdir()) / "planfence-bench" / f"{experiment}-{profile}-quick"
    return Path("docs/results") / f"{experiment}-{profile}"


def _run(plan: Experiment, profile: str, seed: int,
         shapers: ClusterShapers | None, sync_k: int = 1) -> list[dict[str, object]]:
    import anyio
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)

    from .. import cluster as clusterlib
    from ..bench.harness import bench_cluster, run_experiment

    console = Console(stderr=True)
    with tempfile.TemporaryDirectory(prefix="planfence-bench-") as tmp, \
            Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                     TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task("starting 8 owners and the central store", total=None)
        with bench_cluster(Path(tmp) / "cluster") as cdir:
            progress.update(task, total=count_actions(plan, seed), completed=0)

            def step(label: str) -> None:
                progress.update(task, advance=1, description=f"{plan.name} on {profile}: {label}")

            try:
                rows = anyio.run(run_experiment, cdir, plan, profile, seed, shapers, step,
                                 sync_k, backend="asyncio")
            finally:
                clusterlib.stop_shapers(cdir)
    return rows


def _notes(shaped: bool, sync_k: int = 1) -> list[str]:
    notes = ["Writes by an owner to its own daemon are local (not coordination traffic) except "
             "under `central`, where every write crosses the link to the central store and is "
             "counted; the stall of every policy excludes the final action-record write.",
             f"`sync` is K = {sync_k} (owners push to every agent after every {sync_k} dirty "
             "update(s)); the push bytes to all eight agents between one action and the next "
             "are charged to that action."]
    if not shaped:
        notes.append("loopback: the executor connects to the owners directly (no relay), so "
                     "stall is protocol, crypto and fsync-free read cost on one 2-core host.")
    else:
        notes.append("Shapers are restarted for every policy so all policies replay the same "
                      "trace phase; every session of the executor, of the subscribers and of "
                      "central writers crosses the shaper in front of the owner it talks to.")
    return notes


if __name__ == "__main__":
    _app = typer.Typer()
    register(_app)
    _app()
