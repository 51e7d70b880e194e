"""`planfence workspace plans|show`: the team's live plans, and one plan's history of
trusts, recorded edits and checks (see `planfence_net.workspace.plans.listing`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from ..core.timeouts import DEFAULT_TIMEOUT
from .group import Group
from .params import Argument, Option
from .support import JsonOpt, echo_json, print_table, user_errors

ClusterOpt = Option(
    None,
    "--cluster",
    help="Cluster folder (default: $PLANFENCE_CLUSTER, then the one serving this folder).",
)
TimeoutOpt = Option(
    DEFAULT_TIMEOUT,
    "--timeout",
    min=0.01,
    metavar="SECONDS",
    help="How long each owner may take to answer.",
)


def register(workspace_app: Group) -> None:
    """Add `plans` and `show` to `planfence workspace`."""
    workspace_app.command("plans")(plans)
    workspace_app.command("show")(show)


def _when(ts: Any) -> str:
    if not isinstance(ts, (int, float)):
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _short(session: Any) -> str:
    return session[:8] if isinstance(session, str) and session else "-"


def _warn(unreachable: dict[str, str]) -> None:
    from ..core.escaping import escape

    for owner, why in unreachable.items():
        click.echo(f"warning: could not ask owner {owner}: {escape(why)}", err=True)


@user_errors
def plans(
    cluster: Path | None = ClusterOpt,
    timeout: float = TimeoutOpt,
    json_out: bool = JsonOpt,
) -> None:
    """List the team's plans from their owners: session, subagent, worktree, declared
    reads, targets and evidence, trust and replan counts, and the last check and its class
    (from the owners' logs). Owners that cannot be asked are named on stderr (exit 0)."""
    from ..workspace.place.config import find_cluster
    from ..workspace.plans.views import list_plans

    found = list_plans(find_cluster(cluster), timeout)
    rows, unreachable = found.rows, found.unreachable
    if json_out:
        echo_json({"plans": rows, "unreachable": unreachable})
        return
    _warn(unreachable)
    if not rows:
        click.echo("no plans")
        return
    print_table(
        [
            "plan",
            "session",
            "agent",
            "worktree",
            "reads",
            "targets",
            "evidence",
            "trust",
            "replans",
            "last check",
            "class",
        ],
        [
            [
                row["plan"] + (" *" if row["current"] else ""),
                _short(row["session"]),
                row["agent"] or "-",
                ", ".join(row["worktrees"]) or "-",  # names: paths are in --json
                row["reads"],
                row["targets"],
                row["evidence"],
                row["trust"],
                row["replans"],
                f"{_when(c['time'])} {c['outcome']}" if (c := row["last_check"]) else "-",
                c["class"] if c else "-",
            ]
            for row in rows
        ],
    )


@user_errors
def show(
    plan: str = Argument(..., help="Plan name."),
    cluster: Path | None = ClusterOpt,
    timeout: float = TimeoutOpt,
    json_out: bool = JsonOpt,
) -> None:
    """The history of PLAN, oldest first: its trusts and recorded edits (the records its
    owner wrote) and every check of it, allowed or blocked, with the class and what to
    re-read (from the owners' logs in the cluster folder)."""
    from ..workspace.place.config import find_cluster
    from ..workspace.plans.views import plan_history

    found = plan_history(find_cluster(cluster), plan, timeout)
    if json_out:
        echo_json(
            {
                "plan": plan,
                "owner": found.owner,
                "history": found.rows,
                "unreachable": found.unreachable,
            }
        )
        return
    _warn(found.unreachable)
    print_table(["time", "event", "class", "by", "detail"], [show_row(r) for r in found.rows])


def show_row(row: dict[str, Any]) -> list[Any]:
    """One line of `show`'s table."""
    if "class" in row:  # a check
        by = " ".join(
            p
            for p in (
                row["source"],
                row["session"] and row["session"][:8],
                row["subagent"],
                row["tool"],
            )
            if p
        )
        detail = ", ".join(row["files"])
        if row["reread"]:
            detail += f"{'; ' if detail else ''}re-read {', '.join(row['reread'])}"
        if row["changed_again"]:
            detail += f"{'; ' if detail else ''}changed again: stop and report"
        if row["detail"]:
            detail += f"{'; ' if detail else ''}{row['detail']}"
        return [_when(row["time"]), row["event"], row["class"], by, detail or "-"]
    what = f"seq {row['seq']}"
    if row["trust"] is not None:
        what = (
            f"trust {row['trust']}: {row['reads']} read, {row['targets']} target, "
            f"{row['evidence']} evidence"
        )
        source = row["from"] if row["event"] == "trust" else None
        if row["event"] == "advance":
            what = f"edits recorded: {row['advanced']}"
        if isinstance(source, dict) and isinstance(source.get("file"), str):
            what += f" (from {Path(source['file']).name}"
            what += f", {source['section']})" if source.get("section") else ")"
    who = " ".join(p for p in (_short(row["session"]), row["subagent"]) if p and p != "-")
    return [_when(row["time"]), row["event"], "-", who or "-", what]
