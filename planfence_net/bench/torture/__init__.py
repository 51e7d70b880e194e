"""The reliability suite: faults and attacks against real owner processes on 127.0.0.1.

Each fault module exposes `async def run(workdir: Path, *, quick: bool) -> list[FaultResult]`;
`scripts/torture` runs them in turn and prints one table. A short version runs in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FaultResult:
    """One row of the torture table.

    `acknowledged` counts records the owner acknowledged during the fault, `lost` those of them
    that could not be read back afterwards; `outcome` is one line a person can read ("held",
    "held (figures)", or what went wrong).
    """

    fault: str
    rounds: int
    acknowledged: int
    lost: int
    outcome: str

    @property
    def held(self) -> bool:
        return self.lost == 0 and (self.outcome == "held" or self.outcome.startswith("held ("))


def format_table(results: list[FaultResult]) -> str:
    """The results as an aligned text table (fault, rounds, acknowledged, lost, outcome)."""
    header = ("fault", "rounds", "acknowledged", "lost", "outcome")
    rows = [(r.fault, str(r.rounds), str(r.acknowledged), str(r.lost), r.outcome) for r in results]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)).rstrip()
        for row in [header, *rows]
    ]
    return "\n".join(lines)
