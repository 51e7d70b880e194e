"""The plots of a bench report (PNG, matplotlib's Agg backend): per experiment, stall and
traffic against its axis with 95% intervals and n, or the safety bars beside the paper's means."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .published import PAPER_SAFETY

if TYPE_CHECKING:
    from .report import Summary


# (file, metric, x label, log x) of each curve an experiment plots against its axis
CURVES: dict[str, list[tuple[str, str, str, bool]]] = {
    "rate": [
        ("stall-vs-rho.png", "stall", "dirty updates per protected action (rho)", True),
        ("total-vs-rho.png", "total", "dirty updates per protected action (rho)", True),
        ("traffic-vs-rho.png", "kib", "dirty updates per protected action (rho)", True),
    ],
    "keyspace": [
        ("traffic-vs-keyspace.png", "kib", "shared keys |X|", True),
        ("stall-vs-keyspace.png", "stall", "shared keys |X|", True),
    ],
    "scope": [
        ("traffic-vs-scope.png", "kib", "declared dependencies d", True),
        ("stall-vs-scope.png", "stall", "declared dependencies d", True),
    ],
}


YLABELS = {
    "stall": "stall per action, ms (mean, 95% CI)",
    "total": "stall + update time per action, ms (mean, 95% CI)",
    "kib": "traffic per action, KiB (mean, 95% CI)",
}


def plot(out: Path, experiment: str, profile: str, summaries: list[Summary]) -> list[Path]:
    """PNG plots for the experiment; returns their paths."""
    # matplotlib is the optional `bench` extra, and its backend must be chosen before pyplot
    # is imported: both happen here, when a report is drawn.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    policies = list(dict.fromkeys(s.policy for s in summaries))
    for name, metric, xlabel, logx in CURVES.get(experiment, []):
        fig, ax = plt.subplots(figsize=(6, 4))
        draw_curves(ax, metric, policies, summaries)
        if logx:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(YLABELS[metric])
        ax.set_title(f"{experiment} on {profile}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / name, dpi=120)
        plt.close(fig)
        made.append(out / name)
    if experiment == "safety":
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
        for ax, metric in zip(axes, ("stall", "kib"), strict=False):
            draw_safety_bars(ax, metric, summaries)
        n = summaries[0].actions if summaries else 0
        fig.suptitle(f"safety on {profile}: per protected action (n={n} per policy)")
        fig.tight_layout()
        fig.savefig(out / "safety.png", dpi=120)
        plt.close(fig)
        made.append(out / "safety.png")
    return made


def draw_curves(ax: Any, metric: str, policies: list[str], summaries: list[Summary]) -> None:
    """On matplotlib axes `ax`, one curve per policy and group of cases (an ablation group's
    curve is dashed) of `metric` ("stall", "total": stall + update, or "kib") against each
    summary's x, with its 95% interval and the number of actions per point."""
    groups = list(dict.fromkeys(s.group for s in summaries))
    for group, policy in ((g, p) for g in groups for p in policies):
        mine = sorted(
            (s for s in summaries if s.policy == policy and s.group == group), key=lambda s: s.x
        )
        if not mine:
            continue
        estimates = [_metric(s, metric) for s in mine]
        ys = [e.value for e in estimates]
        err = [
            [max(0.0, e.value - e.low) for e in estimates],
            [max(0.0, e.high - e.value) for e in estimates],
        ]
        sizes = sorted({s.actions for s in mine})
        ax.errorbar(
            [s.x for s in mine],
            ys,
            yerr=err,
            marker="o",
            capsize=3,
            linestyle="-" if group == groups[0] else "--",
            label=f"{policy}{'' if group == groups[0] else f' ({group})'} "
            f"(n={'/'.join(map(str, sizes))} per point)",
        )


def _metric(s: Summary, metric: str) -> Any:
    if metric == "total":
        return s.total if s.total is not None else s.stall
    return s.stall if metric == "stall" else s.kib


def draw_safety_bars(ax: Any, metric: str, summaries: list[Summary]) -> None:
    """On matplotlib axes `ax`, a bar per policy of `metric` with its 95% interval; for
    stall, the paper's mean beside each policy it reports."""
    estimates = [s.stall if metric == "stall" else s.kib for s in summaries]
    ax.bar(
        [s.policy for s in summaries],
        [e.value for e in estimates],
        yerr=[[e.value - e.low for e in estimates], [e.high - e.value for e in estimates]],
        capsize=4,
    )
    if metric == "stall":
        paper = [
            PAPER_SAFETY[s.policy][1] if s.policy in PAPER_SAFETY else float("nan")
            for s in summaries
        ]
        ax.plot([s.policy for s in summaries], paper, "k_", markersize=18, label="paper mean")
        ax.legend(fontsize=8)
    ax.set_ylabel("stall ms (mean, 95% CI)" if metric == "stall" else "KiB (mean, 95% CI)")
    ax.tick_params(axis="x", rotation=30)
