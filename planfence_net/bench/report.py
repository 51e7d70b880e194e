"""Results of a bench run: raw rows (JSONL, CSV), per-case statistics, a Markdown report that
puts our numbers next to the paper's, and PNG plots.

Statistics follow the paper: medians with 95% bootstrap intervals (percentile method, 2000
resamples, seeded so a report is reproducible); means are shown too because the paper's
safety table gives means per action.
"""

from __future__ import annotations

import csv
import json
import random
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .paper import PAPER_NOTES, paper_safety, shape_notes

Row = dict[str, Any]
COLUMNS = ("profile", "case", "group", "x", "policy", "template", "family", "action", "agents",
           "keys", "d", "declared", "depth", "dirty", "revised", "fault", "issued", "blocked",
           "replanned", "invalid", "stall_ms", "bytes", "action_id", "deps")


def bootstrap(values: list[float], stat: Callable[[list[float]], float] = statistics.median,
              resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap interval of `stat`; (v, v) for fewer than two values."""
    if len(values) < 2:
        return (values[0], values[0]) if values else (float("nan"), float("nan"))
    rng = random.Random(seed)
    stats = sorted(stat(rng.choices(values, k=len(values))) for _ in range(resamples))
    return stats[int(0.025 * resamples)], stats[int(0.975 * resamples) - 1]


@dataclass(frozen=True, slots=True)
class Summary:
    """One policy on one case."""

    case: str
    group: str
    x: float
    policy: str
    actions: int
    issued: int
    invalid: int
    blocked: int
    replanned: int
    stall_median: float
    stall_ci: tuple[float, float]
    stall_mean: float
    kib_median: float
    kib_ci: tuple[float, float]
    kib_mean: float
    reasons: dict[str, int]


def summarize(rows: list[Row]) -> list[Summary]:
    """Per (case, policy), in the order they first appear in `rows`."""
    out = []
    for case, policy in dict.fromkeys((r["case"], r["policy"]) for r in rows):
        mine = [r for r in rows if r["case"] == case and r["policy"] == policy]
        stall = [float(r["stall_ms"]) for r in mine]
        kib = [r["bytes"] / 1024 for r in mine]
        reasons: dict[str, int] = {}
        for r in mine:
            if r["blocked"]:
                reasons[r["blocked"]] = reasons.get(r["blocked"], 0) + 1
        out.append(Summary(case, mine[0]["group"], float(mine[0]["x"]), policy, len(mine),
                           sum(bool(r["issued"]) for r in mine),
                           sum(bool(r["invalid"]) for r in mine),
                           sum(not r["issued"] for r in mine),
                           sum(bool(r["replanned"]) for r in mine),
                           statistics.median(stall), bootstrap(stall), statistics.fmean(stall),
                           statistics.median(kib), bootstrap(kib), statistics.fmean(kib),
                           reasons))
    return out


def write_rows(out: Path, rows: list[Row]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "rows.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps({c: row.get(c) for c in COLUMNS}) + "\n")
    with open(out / "rows.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(COLUMNS))
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row.get(c) for c in COLUMNS})


def _ci(median: float, ci: tuple[float, float], digits: int = 1) -> str:
    return f"{median:.{digits}f} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def table(summaries: list[Summary], experiment: str) -> list[str]:
    """One Markdown table: our figures, and the paper's where it gives them."""
    safety = experiment == "safety"
    head = ["case", "policy", "actions", "issued", "invalid", "blocked", "replans",
            "stall ms median [95% CI]", "stall ms mean", "KiB median [95% CI]", "KiB mean"]
    if safety:
        head += ["paper invalid", "paper stall ms (mean)", "paper KiB (mean)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summaries:
        blocked = str(s.blocked) + (f" ({', '.join(f'{k} {v}' for k, v in s.reasons.items())})"
                                    if s.reasons else "")
        cells = [s.case, s.policy, str(s.actions), str(s.issued), f"{s.invalid}/{s.issued}",
                 blocked, str(s.replanned), _ci(s.stall_median, s.stall_ci),
                 f"{s.stall_mean:.1f}", _ci(s.kib_median, s.kib_ci, 2), f"{s.kib_mean:.2f}"]
        if safety:
            cells += [str(v) for v in paper_safety(s.policy)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def write_report(out: Path, experiment: str, profile: str, rows: list[Row], command: str,
                 elapsed: float, notes: list[str] | None = None) -> list[Summary]:
    """rows.jsonl, rows.csv, report.md and the plots into `out`; returns the summaries."""
    write_rows(out, rows)
    summaries = summarize(rows)
    plots = plot(out, experiment, profile, summaries)
    lines = [f"# `{experiment}` on `{profile}`", "",
             f"Command: `{command}`", "",
             f"{len(rows)} protected actions, {elapsed:.0f} s wall clock. Stall is coordination "
             "time on the action's critical path (planning excluded); traffic is every byte on "
             "coordination connections, encrypted and framed, both directions; `invalid` is "
             "judged by the oracle from the owners' (and central store's) own logs against the "
             "action's true dependencies. Medians with 95% bootstrap intervals.", "",
             "## Results next to the paper (arXiv 2609.03340)", "",
             *table(summaries, experiment), "",
             f"Paper: {PAPER_NOTES[experiment]}", "",
             "## What matches and what differs", "",
             *[f"- {line}" for line in shape_notes(experiment, profile, summaries)],
             *[f"- {line}" for line in notes or []], ""]
    lines += [f"![{p.stem}]({p.name})" for p in plots]
    lines += ["", "Raw rows: `rows.jsonl`, `rows.csv` (one line per protected action).", ""]
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")
    return summaries


def plot(out: Path, experiment: str, profile: str, summaries: list[Summary]) -> list[Path]:
    """PNG plots for the experiment; returns their paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    policies = list(dict.fromkeys(s.policy for s in summaries))
    specs: list[tuple[str, str, str, bool]] = []  # (file, metric, xlabel, log x)
    if experiment == "rate":
        specs = [("stall-vs-rho.png", "stall", "dirty updates per protected action (rho)", True),
                 ("traffic-vs-rho.png", "kib", "dirty updates per protected action (rho)", True)]
    elif experiment == "keyspace":
        specs = [("traffic-vs-keyspace.png", "kib", "shared keys |X|", True),
                 ("stall-vs-keyspace.png", "stall", "shared keys |X|", True)]
    elif experiment == "scope":
        specs = [("traffic-vs-scope.png", "kib", "declared dependencies d", True),
                 ("stall-vs-scope.png", "stall", "declared dependencies d", True)]
    for name, metric, xlabel, logx in specs:
        fig, ax = plt.subplots(figsize=(6, 4))
        for policy in policies:
            mine = sorted((s for s in summaries if s.policy == policy), key=lambda s: s.x)
            xs = [s.x for s in mine]
            ys = [s.stall_median if metric == "stall" else s.kib_median for s in mine]
            cis = [s.stall_ci if metric == "stall" else s.kib_ci for s in mine]
            err = [[max(0.0, y - c[0]) for y, c in zip(ys, cis)],
                   [max(0.0, c[1] - y) for y, c in zip(ys, cis)]]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=policy)
        if logx:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("stall per action, ms (median)" if metric == "stall"
                      else "traffic per action, KiB (median)")
        ax.set_title(f"{experiment} on {profile}")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / name, dpi=120)
        plt.close(fig)
        made.append(out / name)
    if experiment == "safety":
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
        for ax, metric in zip(axes, ("stall", "kib")):
            ys = [s.stall_median if metric == "stall" else s.kib_median for s in summaries]
            ax.bar([s.policy for s in summaries], ys)
            ax.set_ylabel("stall ms (median)" if metric == "stall" else "KiB (median)")
            ax.tick_params(axis="x", rotation=30)
        fig.suptitle(f"safety on {profile}: per protected action")
        fig.tight_layout()
        fig.savefig(out / "safety.png", dpi=120)
        plt.close(fig)
        made.append(out / "safety.png")
    return made
