"""`planfence workspace serve|trust|check`: workspace owners and trusted states."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..core.timeouts import DEFAULT_TIMEOUT
from .group import Group
from .params import Argument, Option
from .support import DeadlineAlias, JsonOpt, echo_json, run_async, timeout_of, user_errors

if TYPE_CHECKING:  # imported where used: `planfence --help` loads none of the library
    from collections.abc import Callable

    from ..workspace.plans.usecases import Trusted

workspace_app = Group("workspace", help="Workspace owners, trusted states and drift checks.")
ClusterOpt = Option(
    None,
    "--cluster",
    help="Cluster folder (default: $PLANFENCE_CLUSTER, then the nearest .planfence/ above here).",
)
EXIT_DRIFT, EXIT_UNDECIDED = 2, 3


def register(app: Group) -> None:
    """Add `planfence workspace ...` to `app`."""
    from . import plans, refresh

    plans.register(workspace_app)
    refresh.register(workspace_app)
    app.add_command(workspace_app)


@workspace_app.command("serve")
@user_errors
def serve(
    path: Path = Argument(..., help="The worktree (a git worktree or any folder)."),
    name: str = Option("ws", "--name", help="Agent name; it owns NAME:*."),
    listen: str | None = Option(
        None, "--listen", help="HOST:PORT to bind instead of the roster address."
    ),
) -> None:
    """Serve one worktree for one developer's machine, in the foreground.

    The cluster folder (roster with this one agent, which also owns plan/*, its key, store and
    log) is PATH/.planfence, created on first use.
    """
    import anyio

    from ..core.roster import parse_address
    from ..workspace.owner.daemon import run_workspace_owner
    from ..workspace.place.config import ensure_local_cluster, workspaces
    from ..workspace.place.paths import mark, worktree_root

    cdir, created = ensure_local_cluster(path, name)
    root_of_git = worktree_root(path.resolve())
    if root_of_git is not None:
        mark(root_of_git, cdir.root)  # the repository uses PlanFence: other worktrees join
    roster = cdir.roster()
    agent = next(iter(workspaces(cdir)))
    bind = parse_address(listen) if listen else None

    root = cdir.root.parent  # PATH, or the served repository's root above it

    async def run() -> None:
        async with anyio.create_task_group() as tg:
            port = await tg.start(
                functools.partial(
                    run_workspace_owner,
                    root,
                    roster,
                    cdir.identity(agent),
                    cdir.db(agent),
                    cdir.log(agent),
                    listen=bind,
                    cluster=cdir.root,
                )
            )
            host = bind[0] if bind else roster.agent(agent).host
            click.echo(
                f"workspace owner {agent} serving {root} on {host}:{port} "
                f"(cluster folder {cdir.root}{', created' if created else ''})"
            )

    run_async(run)


# `trust`'s options, declared here so the command reads as what it does.
ReadOpt = Option([], "--read", help="A file the analysis read.")
TargetOpt = Option([], "--target", help="A file the plan will modify.")
NewOpt = Option([], "--new", help="A file the plan will create: a target that must not exist yet.")
ExclusiveOpt = Option(
    [],
    "--exclusive",
    help="A target the plan holds exclusively: other plans' writes to it are blocked "
    "until this plan's session ends or its lease runs out.",
)
LeaseOpt = Option(
    None,
    "--lease",
    metavar="SECONDS",
    help="How long the plan's intents last (default: [intents] lease of cluster.toml, else 1800).",
)
EvidenceOpt = Option(
    [],
    "--evidence",
    help="A command to run now and record with its exit code (e.g. the tests).",
)
EvidenceInputOpt = Option(
    [],
    "--evidence-input",
    help="A file the evidence ran against (default: every --read and --target file).",
)
LockfilesOpt = Option(
    "auto", "--lockfiles", help="auto: declare the lockfiles and manifests found; none: do not."
)
SessionOpt = Option(None, "--session", help="Bind the plan to this agent session id.")
SubagentOpt = Option(
    None,
    "--agent",
    help="With --session: bind the plan to this subagent (the payload's agent_id) only.",
)
FreshOpt = Option(False, "--fresh", help="Start the replan count over (a person's decision).")
NarrowOpt = Option(
    False,
    "--narrow",
    help="Allow declaring less than the trusted state replaced (a person's decision).",
)
MakeCurrentOpt = Option(
    False,
    "--make-current",
    help="Make PLAN the folder's current plan, the one sessions without their own plan "
    "are checked against (a person's decision; the first trusted plan becomes current).",
)
FromOpt = Option(
    None,
    "--from",
    metavar="FILE",
    help="Also declare as reads the files of the 'Record dependencies' list of PLAN's "
    "section in FILE (e.g. AGENTS.md); refused when a listed hash no longer matches.",
)
SectionOpt = Option(
    None, "--section", help="With --from: the section whose list to read (default: PLAN)."
)


@workspace_app.command("trust")
@user_errors
def trust(
    plan: str = Argument(..., help="Plan name (its record is plan/PLAN)."),
    read: list[str] = ReadOpt,
    target: list[str] = TargetOpt,
    new: list[str] = NewOpt,
    exclusive: list[str] = ExclusiveOpt,
    lease: float | None = LeaseOpt,
    evidence: list[str] = EvidenceOpt,
    evidence_input: list[str] = EvidenceInputOpt,
    lockfiles: str = LockfilesOpt,
    session: str | None = SessionOpt,
    subagent: str | None = SubagentOpt,
    fresh: bool = FreshOpt,
    narrow: bool = NarrowOpt,
    make_current: bool = MakeCurrentOpt,
    from_file: Path | None = FromOpt,
    section: str | None = SectionOpt,
    cluster: Path | None = ClusterOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Record the trusted state of PLAN: the current records of what it depends on.

    Files are paths (relative to here) inside a served worktree, or NAME:PATH; each must
    exist (--new: must not). Trusting a plan again is its one replan: it declares at least
    what its trusted state declared, and if it drifts after that, checks say "changed again".
    The hook blocks any agent command carrying --fresh, --narrow or --make-current, and an
    agent's --session other than its own: only a session itself or the user may bind a
    plan to it (`workspace.plans.access`).
    """
    import os

    from ..workspace.place.config import find_cluster
    from ..workspace.plans.access import Caller
    from ..workspace.plans.usecases import TRUST, TrustRequest, trust_plan

    _check_trust_options(lockfiles, session, subagent, from_file, section, lease)
    cdir = find_cluster(cluster)
    request = TrustRequest(
        plan,
        Path.cwd(),
        tuple(read),
        tuple(target),
        tuple(new),
        tuple(exclusive),
        lease,
        tuple(evidence),
        tuple(evidence_input),
        "auto" if lockfiles == "auto" else "none",
        session,
        subagent,
        fresh,
        narrow,
        make_current,
        from_file,
        section,
    )
    caller = Caller.of_shell(os.environ, cdir.root, TRUST, session)
    done = _listed_problems(plan, functools.partial(trust_plan, cdir, request, caller))
    _warn_unguarded(request.cwd)
    _print_trusted(done, plan, session, json_out)


def _check_trust_options(
    lockfiles: str,
    session: str | None,
    subagent: str | None,
    from_file: Path | None,
    section: str | None,
    lease: float | None,
) -> None:
    """Raise click.BadParameter for options of `trust` that do not go together."""
    from ..workspace.model.intents import check_lease

    if lockfiles not in ("auto", "none"):
        raise click.BadParameter("--lockfiles must be auto or none")
    if subagent and not session:
        raise click.BadParameter("--agent needs --session (the subagent's parent session)")
    if from_file is None and section is not None:
        raise click.BadParameter("--section needs --from FILE")
    if lease is not None:
        try:
            check_lease(lease)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--lease'") from None


def _print_trusted(done: Trusted, plan: str, session: str | None, json_out: bool) -> None:
    """Print what `trust` did: the trusted state, the evidence run, the intents published,
    and which plan stays current."""
    if json_out:
        ran_json = [{"command": e.command, "exit": e.exit} for e in done.evidence]
        echo_json({**done.record, "evidence": ran_json, "intents": done.intents})
        return
    click.echo(done.text())
    for e in done.evidence:
        click.echo(f"evidence `{e.command}` exited {e.exit}")
    for line in done.intents:
        click.echo(line)
    if done.current != plan:
        click.echo(
            f"the current plan stays {done.current} (sessions without a plan of their own are "
            f"checked against it){'' if session else f'; {plan} is bound to no session'}"
        )


@workspace_app.command("check")
def check(
    plan: str | None = Argument(
        None, help="Plan name (default: the current plan of the cluster folder)."
    ),
    as_agent: str | None = Option(
        None, "--as", help="Roster member to connect as (default: the plan's owner)."
    ),
    timeout: float = Option(
        DEFAULT_TIMEOUT,
        "--timeout",
        min=0.01,
        metavar="SECONDS",
        help="How long the whole check may take (every round, every owner).",
    ),
    deadline: float | None = DeadlineAlias,
    cluster: Path | None = ClusterOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Classify the drift of PLAN since its trusted state and print the summary.

    Exit 0: none or informational. Exit 2: relevant or critical. Exit 3: cannot decide (an
    owner unreachable, the worktree gone, no trusted state): fail closed.
    """
    from ..core.errors import PlanfenceError
    from ..workspace.place.config import find_cluster
    from ..workspace.plans.usecases import check_plan

    try:
        verdict = check_plan(
            find_cluster(cluster), plan, as_agent=as_agent, timeout=timeout_of(timeout, deadline)
        )
    except PlanfenceError as exc:
        click.echo(f"error: {exc}", err=True)
        raise click.exceptions.Exit(EXIT_UNDECIDED) from None
    _warn_unguarded(Path.cwd())
    if json_out:
        echo_json(verdict.to_json())
    else:
        for line in verdict.text():
            click.echo(line)
    raise click.exceptions.Exit(verdict.exit_code)


def _listed_problems(plan: str, trust: Callable[[], Trusted]) -> Trusted:
    """`trust()`; the problems of a `--from` list are printed one line each and exit 1,
    nothing recorded."""
    from ..core.escaping import escape
    from ..workspace.plans.agentsmd import ListProblems

    try:
        return trust()
    except ListProblems as exc:
        for line in exc.problems:
            click.echo(f"error: {escape(line)}", err=True)
        click.echo(f"error: nothing was recorded for {escape(plan)}", err=True)
        raise click.exceptions.Exit(1) from None


@workspace_app.command("join")
@user_errors
def join(
    path: Path = Argument(Path("."), help="A folder of the worktree (default: here)."),
    name: str | None = Option(
        None, "--name", help="Agent name (default: from the worktree's folder name)."
    ),
    cluster: Path | None = Option(
        None,
        "--cluster",
        help="The team's cluster folder (default: the one recorded for the repository).",
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Serve another worktree of the repository in the team's cluster: its own workspace
    owner in the same roster (started in the background), so the hook guards it and a plan
    can declare its files."""
    from ..workspace.plans.join import join as join_worktree

    result = join_worktree(path, cluster, name)
    if json_out:
        echo_json(
            {
                "worktree": str(result.root),
                "cluster": str(result.cluster),
                "agent": result.agent,
                "started": result.started,
            }
        )
        return
    click.echo(result.text())


def _warn_unguarded(cwd: Path) -> None:
    """One line on stderr when no agent's hook is active for the worktree of `cwd`."""
    from ..core.errors import PlanfenceError
    from ..workspace.installers.clients import project_root
    from ..workspace.installers.codextrust import any_hook_active

    root = project_root(cwd)
    try:
        active = any_hook_active(root)
    except (PlanfenceError, OSError, ValueError):  # a config we cannot read: not active
        active = False
    if not active:
        click.echo(
            f"warning: no agent hook is active for {root}: nothing blocks a stale edit "
            f"(`planfence hook status --project {root}` says what to do)",
            err=True,
        )
