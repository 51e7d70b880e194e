"""Results of a bench run: raw rows (JSONL, CSV), per-case statistics, a Markdown report that
puts our numbers next to the paper's, and PNG plots with error bars and n.

Statistics (bench/paper/stats.py): means and medians, each with a 95% interval from a bootstrap that
resamples whole workflows and uses the same draws for every policy of a case (they replay the
same schedule on the same trace offsets), so ratios between policies are paired. Our mean is
compared with the paper's mean under the paper's 10% rule.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .hostload import HostLoad, host_load
from .plots import plot
from .published import (
    PAPER_NOTES,
    PAPER_SAFETY,
    paper_policy,
    paper_safety,
    rate_table,
    shape_notes,
)
from .stats import Estimate, Resampler, informative, matches, mean, median, rate_text

Row = dict[str, Any]
COLUMNS = (
    "profile",
    "case",
    "group",
    "x",
    "policy",
    "template",
    "family",
    "action",
    "agents",
    "keys",
    "d",
    "declared",
    "depth",
    "dirty",
    "revised",
    "workload",
    "fault",
    "issued",
    "blocked",
    "detail",
    "replanned",
    "invalid",
    "stall_ms",
    "replan_ms",
    "update_ms",
    "bytes",
    "action_id",
    "deps",
    "load1",
    "began_ts",
    "ready_ts",
    "done_ts",
    "ended_ts",
)
BASE = "planfence"


@dataclass(frozen=True, slots=True)
class Summary:
    """One policy on one case; `vs_base` is its mean stall over planfence's, paired."""

    case: str
    group: str
    x: float
    policy: str
    actions: int
    workflows: int
    issued: int
    invalid: int
    blocked: int
    replanned: int
    stall: Estimate  # mean
    stall_med: Estimate  # median
    kib: Estimate  # mean
    kib_med: Estimate  # median
    replan_ms: float  # mean model-call time, excluded from the stall
    reasons: dict[str, int]
    vs_base: Estimate | None
    update: Estimate | None = None  # mean update_ms: the action's updates until complete
    vs_base_total: Estimate | None = None  # (stall + update) over planfence's, paired
    total: Estimate | None = None  # mean stall + update_ms: the action's whole cost

    @property
    def stall_mean(self) -> float:
        return self.stall.value

    @property
    def stall_median(self) -> float:
        return self.stall_med.value

    @property
    def kib_mean(self) -> float:
        return self.kib.value

    @property
    def kib_median(self) -> float:
        return self.kib_med.value


def summarize(rows: list[Row]) -> list[Summary]:
    """Per (case, policy), in the order they first appear in `rows`."""
    out = []
    for case in dict.fromkeys(r["case"] for r in rows):
        in_case = [r for r in rows if r["case"] == case]
        boot = Resampler([r["template"] for r in in_case])
        stall_of = {
            p: boot.groups([r for r in in_case if r["policy"] == p], lambda r: float(r["stall_ms"]))
            for p in dict.fromkeys(r["policy"] for r in in_case)
        }
        total_of = {
            p: boot.groups(
                [r for r in in_case if r["policy"] == p],
                lambda r: float(r["stall_ms"]) + float(r.get("update_ms") or 0.0),
            )
            for p in stall_of
        }
        for policy, stall in stall_of.items():
            mine = [r for r in in_case if r["policy"] == policy]
            kib = boot.groups(mine, lambda r: r["bytes"] / 1024)
            reasons: dict[str, int] = {}
            for r in mine:
                if r["blocked"]:
                    reasons[r["blocked"]] = reasons.get(r["blocked"], 0) + 1
            paired = BASE in stall_of and policy != BASE
            vs = boot.ratio(stall, stall_of[BASE], mean) if paired else None
            vs_total = boot.ratio(total_of[policy], total_of[BASE], mean) if paired else None
            update = boot.groups(mine, lambda r: float(r.get("update_ms") or 0.0))
            out.append(
                Summary(
                    case,
                    mine[0]["group"],
                    float(mine[0]["x"]),
                    policy,
                    len(mine),
                    len({r["template"] for r in mine}),
                    sum(bool(r["issued"]) for r in mine),
                    sum(bool(r["invalid"]) for r in mine),
                    sum(not r["issued"] for r in mine),
                    sum(bool(r["replanned"]) for r in mine),
                    boot.estimate(stall, mean),
                    boot.estimate(stall, median),
                    boot.estimate(kib, mean),
                    boot.estimate(kib, median),
                    mean([float(r.get("replan_ms") or 0.0) for r in mine]),
                    reasons,
                    vs,
                    boot.estimate(update, mean),
                    vs_total,
                    boot.estimate(total_of[policy], mean),
                )
            )
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


def table(summaries: list[Summary], experiment: str, load: HostLoad | None = None) -> list[str]:
    """One Markdown table: our figures, and the paper's where it gives them (an ablation row
    beside the paper's row of the design it varies). Zero counts carry their exact 95% upper
    bound; intervals from fewer than 10 workflows are marked uninformative; under a loaded
    machine (`load`) no agreement with the paper is claimed."""
    safety = experiment == "safety"
    head = [
        "case",
        "policy",
        "n (workflows)",
        "issued",
        "invalid",
        "blocked",
        "replans",
        "stall ms mean [95% CI]",
        "stall ms median [95% CI]",
        "replan model ms",
        "update ms mean",
        "KiB mean [95% CI]",
        "KiB median",
    ]
    if safety:
        head += [
            "paper invalid",
            "paper stall ms (mean)",
            "ours vs paper (10% rule)",
            "paper KiB (mean)",
        ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summaries:
        blocked = str(s.blocked) + (
            f" ({', '.join(f'{k} {v}' for k, v in s.reasons.items())})" if s.reasons else ""
        )
        cells = [
            s.case,
            s.policy,
            f"{s.actions} ({s.workflows})",
            str(s.issued),
            rate_text(s.invalid, s.issued),
            blocked,
            str(s.replanned),
            informative(s.stall.text(), s.workflows),
            informative(s.stall_med.text(), s.workflows),
            f"{s.replan_ms:.2f}",
            f"{s.update.value:.1f}" if s.update is not None else "-",
            informative(s.kib.text(2), s.workflows),
            f"{s.kib_median:.2f}",
        ]
        if safety:
            cells += paper_cells(s, load)
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def paper_cells(s: Summary, load: HostLoad | None) -> list[str]:
    """The safety table's paper columns for `s`'s policy: the paper's invalid count, mean
    stall, whether ours is within 10% of it (never claimed under load), and mean KiB."""
    invalid, stall, kib = paper_safety(s.policy)
    paper = paper_policy(s.policy)
    verdict = "-"
    if paper is not None:
        verdict = (
            f"not claimed (loaded, peak load {load.peak})"
            if load is not None and load.loaded
            else matches(s.stall_mean, PAPER_SAFETY[paper][1])
        )
    return [invalid, stall, verdict, kib]


def paired_table(summaries: list[Summary], experiment: str) -> list[str]:
    """Each policy's mean stall over planfence's on the same workflows (paired bootstrap),
    and the same with each action's update time added (what `sync` pays per update), beside
    the paper's ratio of the design the row is (ratios are compared even under load: both
    policies met the same machine, schedule and trace phases)."""
    rows = [s for s in summaries if s.vs_base is not None]
    if not rows:
        return []
    paper_base = PAPER_SAFETY[BASE][1]
    head = [
        "case",
        "policy",
        "mean stall / planfence's [95% CI]",
        "(stall + update) / planfence's [95% CI]",
    ]
    if experiment == "safety":
        head += ["paper ratio", "stall ratio vs paper (10% rule)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in rows:
        assert s.vs_base is not None
        total = s.vs_base_total.text(2) if s.vs_base_total is not None else "-"
        cells = [
            s.case,
            s.policy,
            informative(s.vs_base.text(2), s.workflows),
            informative(total, s.workflows),
        ]
        if experiment == "safety":
            paper = paper_policy(s.policy)
            ratio = PAPER_SAFETY[paper][1] / paper_base if paper is not None else None
            cells += (
                [f"{ratio:.2f}", matches(s.vs_base.value, ratio)]
                if ratio is not None
                else ["-", "-"]
            )
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def write_report(
    out: Path,
    experiment: str,
    profile: str,
    rows: list[Row],
    command: str,
    elapsed: float,
    notes: list[str] | None = None,
) -> list[Summary]:
    """rows.jsonl, rows.csv, report.md and the plots into `out`; returns the summaries."""
    write_rows(out, rows)
    summaries = summarize(rows)
    load = host_load(rows)
    plots = plot(out, experiment, profile, summaries)
    lines = [
        f"# `{experiment}` on `{profile}`",
        "",
        f"Command: `{command}`",
        "",
        f"{len(rows)} protected actions, {elapsed:.0f} s wall clock. Stall is coordination "
        "time on the action's critical path, one timer for every policy (from ready to act "
        "to authorized or blocked; the replanning model call excluded and shown apart); "
        "traffic is every byte on coordination connections, encrypted and framed, both "
        "directions; `invalid` is judged by the oracle from the owners' (and central "
        "store's) own logs against the action's true dependencies. Means and medians "
        "with 95% intervals from a bootstrap over whole workflows, paired across "
        "policies; n counts protected actions (workflows in brackets). `update ms` is the "
        "time the action's background updates and revision took to complete under the "
        "policy's design (before ready to act, not in the stall).",
        "",
        f"**When:** {_when(rows)}. **Load:** {load.text()}.",
        "",
        "## Results next to the paper (arXiv 2609.03340)",
        "",
        *table(summaries, experiment, load),
        "",
    ]
    if experiment == "rate":
        lines += [
            "## PlanFence against the next-lowest safe policy, per rate",
            "",
            *rate_table(summaries),
            "",
        ]
    paired = paired_table(summaries, experiment)
    if paired:
        lines += ["## Paired: each policy's mean stall relative to PlanFence's", "", *paired, ""]
    lines += [
        f"Paper: {PAPER_NOTES[experiment]}",
        "",
        "## What matches and what differs",
        "",
        *[f"- {line}" for line in shape_notes(experiment, profile, summaries, load.loaded)],
        *[f"- {line}" for line in notes or []],
        "",
    ]
    lines += [f"![{p.stem}]({p.name})" for p in plots]
    lines += ["", "Raw rows: `rows.jsonl`, `rows.csv` (one line per protected action).", ""]
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")
    return summaries


def _when(rows: list[Row]) -> str:
    """The UTC time span of the run, from its rows (rows of older runs carry no times)."""
    times = [float(r["began_ts"]) for r in rows if r.get("began_ts") is not None]
    if not times:
        return "run time not recorded"
    stamp = "%Y-%m-%d %H:%M"
    first, last = (datetime.fromtimestamp(t, UTC).strftime(stamp) for t in (min(times), max(times)))
    return f"{first} to {last} UTC"
