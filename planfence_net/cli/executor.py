"""`planfence plan`, `authorize`, `demo` and `scenario`: the executor side of the CLI."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..core.errors import PlanfenceError
from ..core.timeouts import DEFAULT_TIMEOUT
from .group import EXIT_BLOCKED, EXIT_OK, EXIT_STALE, Group
from .params import Argument, Option
from .support import (
    AsOpt,
    DeadlineAlias,
    DirArg,
    JsonOpt,
    cluster_dir,
    echo_json,
    identity_for,
    print_table,
    resolve_ids,
    run_async,
    timeout_of,
    user_errors,
    write_record,
)
from .text import LEGEND, escaped_lines

if TYPE_CHECKING:  # each command imports what it uses: authorize never loads the bench lab
    from rich.status import Status

    from ..bench.paper.scenario import Outcome
    from ..cluster.folder import ClusterDir
    from ..core.decision import Decision


def register(app: Group) -> None:
    """Add the executor commands to `app`."""
    app.command("plan")(plan)
    app.command("authorize")(authorize)
    app.command("demo")(demo)
    app.command("scenario")(scenario)


@user_errors
def plan(
    path: Path = DirArg,
    key: str = Argument(..., help="Plan key (e.g. plan/x)."),
    body: str = Option(..., "--body", help="Plan body as JSON."),
    parent: list[str] = Option(..., "--parent", help="Record the plan used (repeat)."),
    json_out: bool = JsonOpt,
) -> None:
    """Write a plan record, derived from the given parent records, as its owner."""
    write_record(path, key, body, parent, "plan", json_out, None)


@user_errors
def authorize(
    path: Path = DirArg,
    root: list[str] = Option(..., "--root", help="Plan record id (repeat)."),
    dep: list[str] = Option(..., "--dep", help="Declared key (repeat)."),
    as_agent: str | None = AsOpt,
    name: str = Option("action", "--name", help="Action name for the log."),
    timeout: float = Option(
        DEFAULT_TIMEOUT,
        "--timeout",
        min=0.01,
        metavar="SECONDS",
        help="How long the whole decision may take (every round, every owner).",
    ),
    deadline: float | None = DeadlineAlias,
    json_out: bool = JsonOpt,
) -> None:
    """Validate a plan's declared dependencies against their owners, right now.

    Exit 0: authorized. Exit 2: the plan is stale (a dependency drifted; replan and retry:
    the last line is the command to run next).
    Exit 3: blocked for another reason (owner unavailable, missing lineage, ...).
    """
    import anyio

    from ..cluster.processes import link_addresses
    from ..core.gate import Action
    from ..executor.decisionlog import DecisionLog
    from ..executor.pool import SessionPool
    from ..executor.replica import Replica
    from ..executor.runner import GateRunner

    seconds = timeout_of(timeout, deadline)
    cdir = cluster_dir(path)
    roster = cdir.roster()
    identity = identity_for(cdir, as_agent)
    action = Action(name, tuple(resolve_ids(cdir, root)), tuple(dep))
    log = DecisionLog.in_folder(cdir.root, identity.name, roster.owner_of)  # the view reads it

    async def decide() -> Decision:
        async with anyio.create_task_group() as tg:
            pool = SessionPool(tg, roster, identity, link_addresses(cdir))
            runner = GateRunner(pool, await Replica.open(None), timeout=seconds, log=log)
            run = await runner.wait_decision(action)
            await pool.aclose()
            tg.cancel_scope.cancel()
        return run.decision

    try:
        decision = run_async(decide)
    finally:
        log.close()
    if json_out:
        echo_json(decision.to_json())
    else:
        click.echo(escaped_lines(decision.explain()))
        if decision.reason == "stale_plan":
            from .text import stale_next_step

            click.echo(escaped_lines(stale_next_step(str(path), [*decision.drift])))
    if decision.authorized:
        raise click.exceptions.Exit(EXIT_OK)
    raise click.exceptions.Exit(EXIT_STALE if decision.reason == "stale_plan" else EXIT_BLOCKED)


@user_errors
def demo(
    keep: Path | None = Option(
        None, "--dir", help="Cluster folder to create and keep (default: a temporary one)."
    ),
    profile: str = Option(
        "loopback",
        "--profile",
        help="Put a shaper replaying this link profile in front of every owner.",
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Run the stale-plan scenario on a new five-agent loopback cluster, then stop it.

    Starts five owners (and the central store of the centralized baseline) on 127.0.0.1,
    runs each workflow family under every baseline and PlanFence, prints the result table
    and one drift explained, and stops every process it started.
    """
    import tempfile

    from rich.console import Console

    from ..bench.paper.harness import bench_cluster
    from ..traces import require_traces

    require_traces(profile)  # fail before starting anything
    console = Console(stderr=True)
    with tempfile.TemporaryDirectory(prefix="planfence-demo-") as tmp:
        root = keep or Path(tmp) / "cluster"
        with (
            console.status("starting five owners and the central store on 127.0.0.1 ...") as status,
            bench_cluster(root, agents=5, name="planfence-demo") as cdir,
        ):
            outcomes = demo_through_shapers(cdir, profile, status)
    where = "5 owners and a central store on 127.0.0.1"
    report_outcomes(
        outcomes,
        json_out,
        where + (f", links shaped with {profile}" if profile != "loopback" else ""),
    )


def demo_through_shapers(cdir: ClusterDir, profile: str, status: Status) -> list[Outcome]:
    """The stale-plan scenario on the running owners of `cdir`, through a `profile` shaper
    in front of each (none on loopback), reporting its steps on `status`; the shapers are
    stopped again, also on errors."""
    from ..bench.paper.demo import run_demo
    from ..cluster import processes as clusterlib
    from ..cluster.ready import wait_cluster_ready

    try:
        links = clusterlib.start_shapers(cdir, profile)
        if links:
            status.update(f"starting a {profile} shaper in front of every owner ...")
            run_async(
                functools.partial(
                    wait_cluster_ready,
                    cdir,
                    list(links),
                    20.0,
                    links,
                    watch=clusterlib.shaper_name,
                )
            )
        status.update("running the stale-plan scenario ...")
        outcomes: list[Outcome] = run_async(
            functools.partial(
                run_demo,
                cdir,
                addresses=links,
                progress=lambda m: status.update(f"running {m} ..."),
            )
        )
        return outcomes
    finally:
        clusterlib.stop_shapers(cdir)


@user_errors
def scenario(
    path: Path = DirArg,
    json_out: bool = JsonOpt,
    wait: float = Option(
        0.0,
        "--wait",
        min=0.0,
        metavar="SECONDS",
        help="First wait up to this long for every owner to "
        "accept a session (owners started elsewhere).",
    ),
) -> None:
    """Run the stale-plan scenario against a running cluster and print the result table.

    Runs as agent `ops`, through the cluster's shapers when it has them. Exit 0 when the
    scenario came out as claimed (freshness issued an invalid action, every other policy
    issued every action and none invalid); 1 with one line saying what did not.
    """
    from ..bench.paper.demo import available_policies, run_demo, verdict
    from ..cluster.processes import link_addresses
    from ..cluster.ready import wait_owners_reachable
    from ..core.decision import plural
    from ..net.api import ping_owners

    cdir = cluster_dir(path)
    links = link_addresses(cdir)
    roster = cdir.roster()
    if wait:
        run_async(wait_owners_reachable, cdir, roster.names, wait, links)
    else:  # fail in one line, within the deadline, when an owner is not up
        run_async(ping_owners, roster, identity_for(cdir, "ops"), roster.names, links)
    from rich.console import Console

    with Console(stderr=True).status("running the stale-plan scenario ...") as status:
        outcomes = run_async(
            functools.partial(
                run_demo,
                cdir,
                addresses=links,
                progress=lambda m: status.update(f"running {m} ..."),
            )
        )
    skipped = (
        {}
        if "central" in available_policies(cdir)
        else {
            "central": "the roster has no agent `central`, the central store the centralized "
            "baseline writes to (`planfence demo` starts one)"
        }
    )
    owners = plural(len([a for a in roster.agents if a.name != "central"]), "owner")
    store = "" if skipped else " and a central store"  # the store owns no key: not an owner
    report_outcomes(
        outcomes, json_out, owners + store + (" through shapers" if links else ""), skipped
    )
    problems = verdict(outcomes)
    if problems:
        raise PlanfenceError("the scenario did not come out as claimed: " + "; ".join(problems))


def report_outcomes(
    outcomes: list[Outcome], json_out: bool, where: str, skipped: dict[str, str] | None = None
) -> None:
    """The result table (or JSON); `skipped` maps a policy left out to why."""
    from ..bench.paper.demo import summarize

    skipped = skipped or {}
    rows = summarize(outcomes)
    drifted = next(
        (
            o
            for o in outcomes
            if o.policy == "planfence" and o.decision is not None and o.decision.drift
        ),
        None,
    )
    if json_out:
        echo_json(
            {
                "summary": [r.to_json() for r in rows],
                "actions": [outcome_json(o) for o in outcomes],
                "skipped": skipped,
            }
        )
        return
    click.echo(
        f"stale-plan scenario: {where}, {len(outcomes) // len(rows)} workflow families per policy\n"
    )
    print_table(
        ["policy", "issued", "invalid", "replans", "blocked", "stall ms/action", "KiB/action"],
        [
            [
                r.policy,
                r.issued,
                r.invalid,
                r.replans,
                r.blocked,
                f"{r.stall_ms:.2f}",
                f"{r.kib:.2f}",
            ]
            for r in rows
        ],
    )
    click.echo(LEGEND)
    for policy, why in skipped.items():
        click.echo(f"no {policy} row: {why}")
    if drifted is not None and drifted.decision is not None:
        click.echo(f"\nwhy PlanFence replanned the {drifted.family} action:")
        click.echo(escaped_lines(drifted.decision.explain()))


def outcome_json(o: Outcome) -> dict[str, Any]:
    return {
        "family": o.family,
        "policy": o.policy,
        "issued": o.issued,
        "action_id": o.action_id.hex() if o.action_id else None,
        "invalid": o.invalid,
        "replanned": o.replanned,
        "blocked": o.blocked,
        "stall_ms": o.stall * 1000,
        "bytes": o.traffic,
        "decision": o.decision.to_json() if o.decision is not None else None,
    }
