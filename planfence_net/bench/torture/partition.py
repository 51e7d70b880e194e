"""The partition group of the reliability suite: owners and executors on separate network
stacks, links cut and healed under load, the history checked (bench/partition/).

One row: the windows cut (rounds), the puts acknowledged, those lost, and the checker's
verdict. Skipped with one line where network namespaces cannot be made (not root, no `ip`).
"""

from __future__ import annotations

from pathlib import Path

import anyio

from ..partition.netns import available
from ..partition.run import run as run_partition
from . import FaultResult

NAME = "partition (isolate, split, flap)"


async def run(workdir: Path, *, quick: bool) -> list[FaultResult]:
    """The partition run (the same in quick and long runs: about 40 s)."""
    reason = available()
    if reason is not None:
        return [FaultResult(NAME, 0, 0, 0, f"skipped: {reason}")]
    result = await anyio.to_thread.run_sync(run_partition, workdir)
    verdict = result.verdict
    lost = sum(1 for line in verdict.violations if line.startswith("lost: "))
    figures = ", ".join(f"{k} {v}" for k, v in verdict.figures.items())
    problems = verdict.violations + [f"cleanup: {e}" for e in result.leftovers]
    outcome = (
        f"held ({figures})"
        if not problems
        else f"{len(problems)} violations, first: {problems[0]} ({figures})"
    )
    return [
        FaultResult(
            NAME, len(result.windows), verdict.figures.get("puts_acknowledged", 0), lost, outcome
        )
    ]
