"""`planfence bench`: run a named experiment on a live cluster and write its report.

    planfence bench safety --profile att-lte --quick

`register(app)` adds the command to the composition root's click group. The command creates a
temporary 8-agent cluster plus the central store, starts every process, gives every agent its
own access link for shaped profiles (bench/paper/network.py), runs the experiment with a progress
bar, stops everything (also on errors and Ctrl-C) and writes rows, report.md and plots to the
output folder.
"""

from __future__ import annotations

import shlex
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..bench import EXPERIMENTS
from ..core.errors import ConfigError, PlanfenceError
from .group import Group
from .params import Argument, Option
from .text import LEGEND

if TYPE_CHECKING:  # imported where used: `planfence --help` never loads the harness
    from collections.abc import Iterable

    from ..bench.paper.experiments import Experiment
    from ..bench.paper.network import LinkModel
    from ..bench.paper.report import Summary


def count_actions(experiment: Experiment, seed: int) -> int:
    from ..bench.paper.workload import make_schedule

    return sum(
        len(case.policies) * len(make_schedule(list(case.templates), case.params, seed))
        for case in experiment.cases
    )


def register(app: Group) -> None:
    """Add the `bench` command to `app`."""
    app.command("bench")(bench)


def bench(
    experiment: str = Argument(..., help=f"One of: {', '.join(EXPERIMENTS)}."),
    profile: str = Option("loopback", "--profile", help="Link profile (see `planfence profiles`)."),
    quick: bool = Option(False, "--quick", help="Few actions: under two minutes."),
    out: Path | None = Option(
        None,
        "--out",
        help="Output folder (default docs/results/EXPERIMENT-PROFILE; with "
        "--quick a temporary folder, never the checkout).",
    ),
    seed: int = Option(0, "--seed", help="Schedule and trace seed."),
    sync_k: int = Option(
        1, "--sync-k", min=1, help="K of the sync baseline: owners push after every K updates."
    ),
    phases: str = Option(
        "paired",
        "--phases",
        help="Trace phases per action: paired (every policy meets "
        "the same) or independent (the ablation).",
    ),
) -> None:
    """Run EXPERIMENT against a live cluster it starts and stops; write rows, a Markdown
    report next to the paper's numbers, and plots."""
    from ..bench.paper.experiments import build
    from ..bench.paper.network import PHASES, LinkModel
    from ..bench.paper.report import write_report
    from ..traces import require_traces

    command = command_line(experiment, profile, quick, seed, sync_k, phases)
    if phases not in PHASES:
        raise click.BadParameter(
            f"{phases!r} is not one of {', '.join(PHASES)}", param_hint="'--phases'"
        )
    folder = out or default_out(experiment, profile, quick, phases)
    try:
        require_plotting()  # before the run, not after it
        plan = build(experiment, quick=quick)
        found = require_traces(profile)
        links = LinkModel(found, phases) if found.shaped else None
        started = time.monotonic()
        rows = _run(plan, profile, seed, links, sync_k)
        summaries = write_report(
            folder,
            experiment,
            profile,
            rows,
            command,
            time.monotonic() - started,
            _notes(links, sync_k),
        )
    except (PlanfenceError, ConfigError) as exc:
        click.echo(f"error: {exc}", err=True)
        raise click.exceptions.Exit(1) from None
    for line in summary_lines(summaries):
        click.echo(line)
    click.echo(LEGEND)
    click.echo(f"report: {folder / 'report.md'}")


def command_line(
    experiment: str, profile: str, quick: bool, seed: int, sync_k: int, phases: str
) -> str:
    """The `planfence bench` command line that reproduces a run (written into its report);
    options at their defaults are left out."""
    return shlex.join(
        [
            "planfence",
            "bench",
            experiment,
            "--profile",
            profile,
            *(["--quick"] if quick else []),
            "--seed",
            str(seed),
            *(["--sync-k", str(sync_k)] if sync_k != 1 else []),
            *(["--phases", phases] if phases != "paired" else []),
        ]
    )


def summary_lines(summaries: Iterable[Summary]) -> list[str]:
    """One line per case and policy of a finished run: issued, invalid, stall and bytes."""
    return [
        f"{s.case:<16} {s.policy:<18} issued {s.issued:>3}/{s.actions:<3} "
        f"invalid {s.invalid:>3}  stall mean {s.stall_mean:8.1f} median "
        f"{s.stall_median:8.1f} ms  {s.kib_mean:7.2f} KiB"
        for s in summaries
    ]


PLOTTING_MISSING = (
    "`planfence bench` draws its plots with matplotlib, which is not installed: "
    "pip install 'planfence-net[bench]'"
)


def require_plotting() -> None:
    """Raise ConfigError (one line saying how to install it) when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ConfigError(PLOTTING_MISSING) from None


def default_out(experiment: str, profile: str, quick: bool, phases: str = "paired") -> Path:
    """docs/results/EXPERIMENT-PROFILE[-independent] for a full run (the committed reports);
    a quick run is a smoke test and goes to the temporary folder, so it never dirties the
    checkout."""
    name = f"{experiment}-{profile}" + ("-independent" if phases != "paired" else "")
    if quick:
        return Path(tempfile.gettempdir()) / "planfence-bench" / f"{name}-quick"
    return Path("docs/results") / name


def _run(
    plan: Experiment, profile: str, seed: int, links: LinkModel | None, sync_k: int = 1
) -> list[dict[str, object]]:
    import anyio
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..bench.paper.harness import bench_cluster, run_experiment

    console = Console(stderr=True)
    with (
        tempfile.TemporaryDirectory(prefix="planfence-bench-") as tmp,
        Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress,
    ):
        task = progress.add_task("starting 8 owners and the central store", total=None)
        with bench_cluster(Path(tmp) / "cluster") as cdir:
            progress.update(task, total=count_actions(plan, seed), completed=0)

            def step(label: str) -> None:
                progress.update(task, advance=1, description=f"{plan.name} on {profile}: {label}")

            rows = anyio.run(
                run_experiment, cdir, plan, profile, seed, links, step, sync_k, backend="asyncio"
            )
    return rows


def _notes(links: LinkModel | None, sync_k: int = 1) -> list[str]:
    notes = [
        'Stall is one timer, the same for every policy, from "ready to act" (plan '
        "handed over, background updates and revision published and complete) to "
        '"authorized or blocked"; the replanning model call is excluded and reported apart '
        "(`replan_ms` in the rows), the replanned plan's write stays inside. Every policy "
        "receives the plan and its lineage by handoff before the timer, charged to none "
        "(except the `central-walk` ablation, whose executor reads them from the store).",
        "Writes by an owner to its own daemon are local (not coordination traffic) except "
        "under the central policies, where every write crosses the links to the central "
        "store and is counted (plans and their summaries excepted: plan delivery).",
        "`central` validates at the store: one `validate` request compares the declared "
        "keys' heads with the plan's and, when all match, records the decision; "
        "`central-walk` is the earlier client-side walk (six sequential round trips on a "
        "raced action); `central-wired` puts the store on an unshaped loopback link.",
        f"`sync` is synchronous replication, K = {sync_k}: every participant of a workflow "
        "subscribes to the others' keys in one sync group and acknowledges every push once "
        "applied (the executor adds the pushed records to its replica first); an update "
        "completes when every participant has acknowledged it, which the writer waits for "
        "(`update ms`); the executor then acts on its replica with no request. "
        "`sync-barrier` is the earlier design: before acting the executor asks the owners "
        "of D(a) `synced`. Push and ack bytes between one action and the next are charged "
        "to that action.",
        "`planfence` fetches the changed records after the heads mismatch, as the paper "
        "does; `planfence+inline` takes them from the heads answer (the product's design).",
        "The runs shared the 2-core machine with other engineers' work (tests, builds): "
        "absolute times carry that noise (the load is stated above); policies are paired "
        "on the same schedule and trace offsets, so comparisons between them carry less.",
    ]
    if links is None:
        notes.append(
            "loopback: every session goes directly to the daemon it talks to (no "
            "relay), so stall is protocol, crypto and read cost on one 2-core host."
        )
    else:
        notes.append(links.describe())
    return notes


if __name__ == "__main__":
    _app = Group("bench", help="The bench alone.")
    register(_app)
    _app()
