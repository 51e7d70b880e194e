"""Statistics of a bench run: means and medians with 95% intervals by a paired, workflow-level
bootstrap.

A workflow is one template of a case; its protected actions are not independent (same keys,
same owners, consecutive trace phases), so the bootstrap resamples whole workflows, with
replacement, and recomputes the statistic over all actions of the drawn workflows
(percentile method, 2000 resamples, seeded so a report is reproducible). Every policy of a
case replays the same schedule on the same trace offsets, so the same draws are used for
every policy of the case: intervals of one policy relative to another (`paired_ratio`) come
from the same resampled workflows and carry no between-policy sampling noise.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

RESAMPLES = 2000
MATCH = 0.10  # the paper's threshold: within 10% "matches"
Row = dict[str, Any]
Stat = Callable[[Sequence[float]], float]


@dataclass(frozen=True, slots=True)
class Estimate:
    """A statistic with its 95% bootstrap interval."""

    value: float
    low: float
    high: float

    def text(self, digits: int = 1) -> str:
        return f"{self.value:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


class Resampler:
    """Workflow-level bootstrap draws for one case, shared by all its policies."""

    def __init__(self, workflows: Sequence[str], resamples: int = RESAMPLES, seed: int = 0) -> None:
        self.workflows = list(dict.fromkeys(workflows))
        rng = random.Random(seed)
        n = len(self.workflows)
        self.draws = (
            [[rng.randrange(n) for _ in range(n)] for _ in range(resamples)] if n > 1 else []
        )

    def groups(self, rows: list[Row], metric: Callable[[Row], float]) -> list[list[float]]:
        """The metric of `rows`, one list per workflow, in the resampler's order."""
        by: dict[str, list[float]] = {w: [] for w in self.workflows}
        for row in rows:
            by[row["template"]].append(metric(row))
        return [by[w] for w in self.workflows]

    def estimate(self, groups: list[list[float]], stat: Stat) -> Estimate:
        """`stat` over all values, with its interval over the draws."""
        flat = [v for g in groups for v in g]
        value = stat(flat)
        if not self.draws:
            return Estimate(value, value, value)
        values = sorted(stat([v for i in draw for v in groups[i]]) for draw in self.draws)
        return Estimate(value, *_percentiles(values))

    def ratio(self, mine: list[list[float]], base: list[list[float]], stat: Stat) -> Estimate:
        """stat(mine) / stat(base), paired: both from the same drawn workflows."""

        def of(groups: list[list[float]], draw: Sequence[int]) -> float:
            return stat([v for i in draw for v in groups[i]])

        whole = list(range(len(self.workflows)))
        value = _div(of(mine, whole), of(base, whole))
        if not self.draws:
            return Estimate(value, value, value)
        values = sorted(_div(of(mine, d), of(base, d)) for d in self.draws)
        return Estimate(value, *_percentiles(values))


def mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def matches(ours: float, paper: float) -> str:
    """The paper's 10% rule, with the signed difference: "matches (+4%)" / "differs (+62%)"."""
    diff = (ours - paper) / paper
    return f"{'matches' if abs(diff) <= MATCH else 'differs'} ({diff:+.0%})"


def _div(a: float, b: float) -> float:
    return a / b if b else float("nan")


def _percentiles(values: list[float]) -> tuple[float, float]:
    n = len(values)
    return values[int(0.025 * n)], values[min(n - 1, int(0.975 * n))]


MIN_WORKFLOWS = 10  # fewer resampled workflows than this: the interval is not informative


def binomial_upper(successes: int, trials: int, confidence: float = 0.95) -> float:
    """The exact (Clopper-Pearson) one-sided upper confidence bound of a binomial proportion:
    the p at which seeing `successes` or fewer of `trials` has probability 1 - confidence
    (for 0 of n that is 1 - (1 - confidence) ** (1 / n): 0.90% for 0 of 330). Raises
    ValueError for counts outside 0 <= successes <= trials, trials >= 1."""
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1, got {successes}/{trials}")
    if successes == trials:
        return 1.0
    alpha = 1.0 - confidence
    low, high = successes / trials, 1.0
    for _ in range(100):  # bisection: the binomial CDF falls as p rises
        p = (low + high) / 2
        if _binomial_cdf(successes, trials, p) > alpha:
            low = p
        else:
            high = p
    return high


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space (no overflow for large n)."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0 if k < n else 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    total = 0.0
    for i in range(k + 1):
        log_term = (
            math.lgamma(n + 1)
            - math.lgamma(i + 1)
            - math.lgamma(n - i + 1)
            + i * log_p
            + (n - i) * log_q
        )
        total += math.exp(log_term)
    return min(1.0, total)


def rate_text(count: int, of: int) -> str:
    """`3/330`, with the exact 95% upper bound beside a zero: `0/330 (95% upper bound 0.90%)`."""
    if of == 0 or count != 0:
        return f"{count}/{of}"
    return f"0/{of} (95% upper bound {binomial_upper(0, of):.2%})"


def informative(text: str, workflows: int, unit: str = "workflows") -> str:
    """`text` of an interval, marked when it comes from fewer than MIN_WORKFLOWS workflows
    (or other resampled units, named by `unit`)."""
    if workflows >= MIN_WORKFLOWS:
        return text
    return f"{text} (uninformative: {workflows} {unit})"
