"""The machine's load during a bench run, and whether it was quiet enough to compare with the paper.

The harness reads the 1-minute load average (`/proc/loadavg`) at every protected action and
keeps it in the row (`load1`, None where the system has no /proc). A run is **loaded** when
that load ever exceeded the machine's CPU count: processes were then waiting for a CPU, and on
shaped links the owners' and shapers' waits turn into delay the paper's testbed did not have.
A loaded run's report states its load and makes no claim of agreement with the paper's
absolute figures; ratios between paired policies are still reported.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOADAVG = Path("/proc/loadavg")


def load_average() -> float | None:
    """The 1-minute load average, or None when it cannot be read."""
    try:
        return float(LOADAVG.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True, slots=True)
class HostLoad:
    """The load over a run's actions: mean and peak 1-minute load average, CPU count."""

    mean: float | None
    peak: float | None
    cores: int

    @property
    def loaded(self) -> bool:
        """True when the load exceeded the CPU count, or is unknown."""
        return self.peak is None or self.peak > self.cores

    def text(self) -> str:
        if self.peak is None or self.mean is None:
            return f"machine load unknown (no /proc/loadavg; {self.cores} CPUs): treated as loaded"
        verdict = (
            "LOADED: above the CPU count, so no agreement with the paper's absolute figures "
            "is claimed"
            if self.loaded
            else "quiet enough: never above the CPU count"
        )
        return (
            f"machine load during the run (1-minute load average, sampled through the run): mean "
            f"{self.mean:.2f}, peak {self.peak:.2f} on {self.cores} CPUs; {verdict}"
        )


def host_load(rows: list[dict[str, Any]]) -> HostLoad:
    """The load of the run that produced `rows` (rows without `load1` count as unknown)."""
    loads = [r["load1"] for r in rows if r.get("load1") is not None]
    cores = os.cpu_count() or 1
    if not loads or len(loads) < len(rows):
        return HostLoad(None, None, cores)
    return HostLoad(sum(loads) / len(loads), max(loads), cores)
