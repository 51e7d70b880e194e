"""`scripts/bench-live`: the live team of small local models, one run, one table.

    scripts/bench-live                         # 30 workflows (10 per family), every policy
    scripts/bench-live --quick                 # 3 workflows (1 per family): a minute or two
    scripts/bench-live --out DIR --json        # also write DIR/live-team.json and report.md

Starts its own bench cluster on free loopback ports (eight owners and the central store) in
a temporary folder, loads the model once, runs every workflow under every policy and stops
everything it started. Exits 1 when the study's claim does not hold (the table says why),
2 when the model cannot run here.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import click
from rich.console import Console
from rich.table import Table

from ...cluster.folder import ClusterDir
from ..paper.benchcluster import bench_cluster
from ..paper.hostload import load_average
from ..paper.scenario import Outcome
from .model import Model, load_model, missing
from .team import run_team, team_problems, team_rows, workflows

COLUMNS = ("policy", "workflows", "issued", "stale", "model_errors", "replans", "blocked")


def run_study(model: Model, per_family: int, progress: Any) -> list[Outcome]:
    """Every workflow under every policy on a bench cluster of its own, stopped after."""
    with tempfile.TemporaryDirectory(prefix="planfence-live-") as tmp:
        with bench_cluster(Path(tmp) / "cluster", name="planfence-live") as cdir:
            return anyio.run(_study, cdir, model, per_family, progress, backend="asyncio")


async def _study(cdir: ClusterDir, model: Model, per_family: int, progress: Any) -> list[Outcome]:
    return await run_team(cdir, model, workflows(per_family), progress=progress)


def table(rows: list[dict[str, Any]], model: str) -> Table:
    out = Table(title=f"live team: {model} plans and acts (not the paper's Qwen study)")
    for column in (*COLUMNS, "stall_ms"):
        out.add_column(column.replace("_", " "), justify="left" if column == "policy" else "right")
    for row in rows:
        out.add_row(*(str(row[c]) for c in (*COLUMNS, "stall_ms")))
    return out


def report_md(report: dict[str, Any], command: str) -> str:
    """The study's table and what it ran on, as markdown."""
    lines = [
        f"# The live team: {report['model']} plans and acts",
        "",
        f"Command: `{command}`",
        "",
        f"{report['per_family'] * 3} workflows (the three families of the stale-plan scenario, "
        f"{report['per_family']} each, numbers of their own), the requirement revised after "
        "planning in every one, under every policy on one bench cluster (eight owners and the "
        "central store on 127.0.0.1). Not the paper's Qwen study: a 135M-parameter model on "
        f"the CPU. {report['model_calls']} model calls (answers kept by prompt, so every policy "
        f"meets the same plans), {report['seconds']} s in all; load average "
        f"{report['load_before']} before, {report['load_after']} after.",
        "",
        "| " + " | ".join(c.replace("_", " ") for c in (*COLUMNS, "stall_ms")) + " |",
        "|" + "---|" * (len(COLUMNS) + 1),
    ]
    for row in report["rows"]:
        lines.append("| " + " | ".join(str(row[c]) for c in (*COLUMNS, "stall_ms")) + " |")
    lines += [
        "",
        "stale: the issued action's plan derives from a superseded requirement, as the "
        "owners' logs judge it. model errors: the executor's words leave out a value of the "
        "requirement its plan was derived from (the model's own mistake, counted whatever the "
        "policy). stall: ms per workflow spent validating, the model's time excluded.",
        "",
        "Claim checked: "
        + (
            "; ".join(report["problems"])
            or "holds (freshness acted on the "
            "stale plan in every workflow, every safe policy in none, and issued every one)."
        ),
        "",
    ]
    return "\n".join(lines)


def main(per_family: int, out: Path | None, as_json: bool, command: str) -> int:
    """The study, its table (or JSON rows) on stdout and, with `out`, live-team.json and
    report.md there; returns the exit status: 0 when the claim held, 1 when it did not, 2
    when the model cannot run here."""
    why = missing()
    if why is not None:
        click.echo(f"error: {why}", err=True)
        return 2
    err = Console(stderr=True)
    started, load = time.monotonic(), load_average()
    model = load_model()
    with err.status("starting") as status:
        outcomes = run_study(model, per_family, lambda line: status.update(line))
    rows = team_rows(outcomes)
    problems = team_problems(rows)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        report = {
            "model": model.name,
            "per_family": per_family,
            "load_before": load,
            "load_after": load_average(),
            "seconds": round(time.monotonic() - started, 1),
            "model_calls": getattr(model, "calls", None),
            "rows": rows,
            "problems": problems,
            "outcomes": [
                {
                    "workflow": o.family,
                    "policy": o.policy,
                    "issued": o.issued,
                    "stale": o.invalid,
                    "replanned": o.replanned,
                    "said": o.said,
                    "acted_on": o.acted_on,
                }
                for o in outcomes
            ],
        }
        (out / "live-team.json").write_text(json.dumps(report, indent=1) + "\n")
        (out / "report.md").write_text(report_md(report, command))
    if as_json:
        click.echo(json.dumps(rows))
    else:
        Console().print(table(rows, model.name))
        click.echo(
            "stale: the action's plan derives from a superseded requirement (owners' "
            "logs); model errors: its words leave out a value of that requirement."
        )
    for problem in problems:
        click.echo(f"DIFFERS: {problem}", err=True)
    return 1 if problems else 0
