"""`planfence workspace refresh`: a person re-bases a session's plan on the current branch
and HEAD (the hook blocks every agent's shell command that names it)."""

from __future__ import annotations

from pathlib import Path

import click

from ..core.timeouts import DEFAULT_TIMEOUT
from .group import Group
from .params import Argument, Option

ClusterOpt = Option(
    None,
    "--cluster",
    help="Cluster folder (default: $PLANFENCE_CLUSTER, then the nearest .planfence/ above here).",
)


def register(group: Group) -> None:
    """Add the person's `workspace refresh` and `workspace release` to the `workspace` group."""
    group.command("refresh")(refresh)
    group.command("release")(release)


def refresh(
    plan: str | None = Argument(
        None, help="The plan (as a block message names it); default: the session's (--session)."
    ),
    session: str | None = Option(None, "--session", help="The agent session whose plan it is."),
    subagent: str | None = Option(None, "--agent", help="The subagent of --session."),
    yes: bool = Option(False, "--yes", help="Re-base without asking (you confirm by passing it)."),
    timeout: float = Option(
        DEFAULT_TIMEOUT, "--timeout", min=0.01, metavar="SECONDS", help="For the whole command."
    ),
    cluster: Path | None = ClusterOpt,
) -> None:
    """Re-base PLAN on the repository, branch, HEAD and git status as they are now, after a
    switch you confirm; its replan count starts over. Files it read or wrote that differ
    still block until re-read. A person's decision: the hook never lets an agent run it."""
    import os

    from ..core.errors import ConfigError, PlanfenceError
    from ..workspace.place.config import find_cluster
    from ..workspace.plans.access import Caller
    from ..workspace.plans.usecases import REFRESH, check_plan, refresh_plan, refresh_target

    try:
        cdir = find_cluster(cluster)
        caller = Caller.of_shell(os.environ, cdir.root, REFRESH, session)
        plan = refresh_target(cdir, plan, session, subagent, caller)
        verdict = check_plan(cdir, plan, timeout=timeout / 2, door=None)
        if verdict.reason == "no_plan":
            raise ConfigError(f"no plan {plan!r}")
        for line in verdict.text():
            click.echo(line)
        if not yes and not click.confirm(
            f"Re-base plan {plan!r} on the current branch and HEAD?", default=False
        ):
            click.echo("not refreshed")
            raise click.exceptions.Exit(1)
        refresh_plan(cdir, plan, caller, timeout / 8, session)
    except PlanfenceError as exc:
        click.echo(f"error: {exc}", err=True)
        raise click.exceptions.Exit(1) from None
    except ValueError as exc:
        click.echo(f"error: plan {plan!r} cannot be re-based: {exc}", err=True)
        raise click.exceptions.Exit(1) from None
    click.echo(f"refreshed {plan}: re-based on the current branch and HEAD (replan count 1)")


def release(
    plan: str = Argument(..., help="The plan whose intents end (as `workspace plans` names it)."),
    timeout: float = Option(
        DEFAULT_TIMEOUT, "--timeout", min=0.01, metavar="SECONDS", help="For the whole command."
    ),
    cluster: Path | None = ClusterOpt,
) -> None:
    """End every live intent of PLAN, exclusive or not, at every workspace owner: its files
    are free for other plans again. A person's decision: refused from an agent's shell."""
    import os

    from ..core.errors import PlanfenceError
    from ..workspace.place.config import find_cluster
    from ..workspace.plans.access import Caller
    from ..workspace.plans.usecases import RELEASE, release_plan

    try:
        cdir = find_cluster(cluster)
        ended = release_plan(
            cdir, plan, Caller.of_shell(os.environ, cdir.root, RELEASE, None), timeout
        )
    except PlanfenceError as exc:
        click.echo(f"error: {exc}", err=True)
        raise click.exceptions.Exit(1) from None
    click.echo(f"released {plan}: {ended} intent{'' if ended == 1 else 's'} ended")
