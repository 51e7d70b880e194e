"""`planfence hook ...`: the agents' hooks, installing them, and whether they are active.

`hook claude|codex` normally never reaches click: `planfence_net.cli.main` sends it to the
lean hook module first. The commands here serve `install`, `uninstall`, `status` and `--help`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .group import Group
from .params import Argument, Option
from .support import JsonOpt, echo_json, user_errors

if TYPE_CHECKING:
    from ..workspace.installers.recovery import PolicyResult

hook_app = Group(
    "hook",
    help="PreToolUse hooks for Claude Code, Codex, Gemini CLI, OpenCode, Copilot CLI, Cursor "
    "and Windsurf, and the git commit gate.",
)
CLIENTS = ("claude", "codex", "gemini", "opencode", "copilot", "cursor", "windsurf")
OTHERS = CLIENTS[2:]  # installed by `hookfiles` (and OpenCode's plugin, `opencodeplugin`)
AgentArg = Argument(
    ..., help="claude, codex, gemini, opencode, copilot, cursor or windsurf (or git)."
)
ProjectOpt = Option(
    Path("."),
    "--project",
    help="A folder of the project (its git worktree root is used; default: here).",
)
FormatOpt = Option(
    "json",
    "--format",
    choices=("json", "toml"),
    help="codex only: json (.codex/hooks.json) or toml (.codex/config.toml).",
)
UserOpt = Option(
    False,
    "--user",
    help="The user-scope config (~/.claude/settings.json, $CODEX_HOME/hooks.json): every "
    "project and worktree; folders of repositories that do not use PlanFence are let through.",
)
SharedOpt = Option(
    False,
    "--shared",
    help="claude only: .claude/settings.json (committed) with a command that holds no path of "
    "this machine, instead of .claude/settings.local.json.",
)
CodexOpt = Option(
    None,
    "--codex",
    metavar="PATH",
    help="The codex executable to ask (default: codex on PATH).",
)
TRUST_STEPS = """\
Codex runs project hooks only after two trust decisions of yours:
  1. trust the project {root} (Codex asks on first start, or `codex exec --trust`);
  2. trust each PlanFence handler (the /hooks panel in Codex; a handler changed later,
     e.g. re-installed with another path, must be trusted again).
To record both decisions now, as yours: planfence hook install codex --project {root} --trust
Then check: planfence hook status codex --project {root}"""


def register(app: Group) -> None:
    """Add `planfence hook ...` to `app`."""
    app.add_command(hook_app)


def _agent(agent: str) -> str:
    if agent not in CLIENTS:
        raise click.BadParameter(f"{agent!r}: expected one of {', '.join(CLIENTS)}")
    return agent


def _client_command(name: str) -> None:
    """`planfence hook NAME`: the hook for a client (`workspace.clients`); reached through
    click only for --help (`planfence_net.cli` sends the rest to the lean hook)."""

    def run(ctx: click.Context) -> None:
        from ..workspace.hook.run import main

        raise click.exceptions.Exit(main(name, list(ctx.args)))

    run.__doc__ = f"Run the hook for {name} (its payload on stdin; it blocks what drifted)."
    hook_app.command(
        name, context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
    )(click.pass_context(run))


for _name in OTHERS:
    _client_command(_name)


@hook_app.command(
    "claude", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def claude(ctx: click.Context) -> None:
    """Run the PreToolUse hook for Claude Code (payload on stdin; exit 0 allow, 2 block)."""
    from ..workspace.hook.run import main

    raise click.exceptions.Exit(main("claude", list(ctx.args)))


@hook_app.command(
    "codex", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def codex(ctx: click.Context) -> None:
    """Run the PreToolUse hook for Codex (payload on stdin; exit 0 allow, 2 block)."""
    from ..workspace.hook.run import main

    raise click.exceptions.Exit(main("codex", list(ctx.args)))


@hook_app.command("git")
def git(
    cluster: Path | None = Option(
        None, "--cluster", help="Cluster folder (default: found from the worktree)."
    ),
) -> None:
    """The commit gate git's pre-commit hook runs (`hook install git`): exit 1 refuses the
    commit, with the reason on stderr."""
    from ..workspace.installers.gitgate import check

    code, reason = check(Path.cwd(), cluster)
    if reason:
        click.echo(reason, err=True)
    raise click.exceptions.Exit(code)


def _install_git(project: Path, cluster: Path | None, json_out: bool) -> None:
    from ..workspace.installers import gitgate
    from ..workspace.installers.clients import project_root
    from ..workspace.place.paths import mark

    path, chained = gitgate.install(project, cluster)
    mark(project_root(project), cluster.resolve() if cluster is not None else None)
    if json_out:
        echo_json({"agent": "git", "path": str(path), "chained": str(chained) if chained else None})
        return
    click.echo(f"installed the PlanFence pre-commit hook in {path}")
    if chained is not None:
        click.echo(f"it runs the hook that was there ({chained}) after its own check")


# `install`'s own options, declared here so the command reads as what it does.
InstallClusterOpt = Option(
    None,
    "--cluster",
    help="Cluster folder the hook uses (default: found from the agent's working folder).",
)
McpWritesOpt = Option(
    None,
    "--mcp-writes",
    help="A regex of MCP tools to send to the hook (e.g. 'mcp__fs__write_.*'); the "
    "cluster's [hook] table decides them (default: blocked).",
)
HookTimeoutOpt = Option(
    None,
    "--timeout",
    help="The hook's own deadline in seconds (default 10; at most 20, well below the "
    "30 s the agent waits for the handler).",
)
TrustCodexOpt = Option(
    False,
    "--trust",
    help="codex only: record your trust in the project and in our handlers in "
    "$CODEX_HOME/config.toml (your decision: Codex then runs these hooks).",
)
RecoveryPolicyOpt = Option(
    False,
    "--recovery-policy",
    help="Also append the recovery policy (what to do when a write is blocked) to the "
    "project's CLAUDE.md (claude) or AGENTS.md (codex), once; the rest stays as it is.",
)
ExplicitOpt = Option(
    False,
    "--explicit",
    help="Only explicitly trusted plans: a session without one is blocked (default: "
    "automatic mode, where a session's own plan is made from what it reads and writes).",
)
CommandFormOpt = Option(
    False,
    "--command",
    help="claude only: a command handler (a process per call) even where the workspace "
    "owner's http hook door listens (default there: http handlers to the owner).",
)
SandboxOpt = Option(
    False,
    "--sandbox",
    help="claude only: also turn on Claude Code's sandbox for Bash, which then cannot read "
    "the fence's keys or socket nor write its files (needs bubblewrap on Linux).",
)
StatuslineOpt = Option(
    False,
    "--statusline",
    help="claude only: also show the fence in Claude Code's status line (`planfence view "
    "--statusline`: fence ok · 3 plans · 1 stale).",
)


@hook_app.command("install")
@user_errors
def install(
    agent: str = AgentArg,
    project: Path = ProjectOpt,
    fmt: str = FormatOpt,
    cluster: Path | None = InstallClusterOpt,
    user: bool = UserOpt,
    shared: bool = SharedOpt,
    mcp_writes: str | None = McpWritesOpt,
    timeout: float | None = HookTimeoutOpt,
    trust: bool = TrustCodexOpt,
    codex_exe: Path | None = CodexOpt,
    recovery_policy: bool = RecoveryPolicyOpt,
    json_out: bool = JsonOpt,
    explicit: bool = ExplicitOpt,
    sandbox: bool = SandboxOpt,
    command_form: bool = CommandFormOpt,
    statusline: bool = StatuslineOpt,
) -> None:
    """Merge our PreToolUse and PostToolUse hooks (Claude Code: and SessionStart) into the
    agent's config; other hooks stay."""
    from ..core.errors import ConfigError
    from ..workspace.installers import clients as installer
    from ..workspace.place.paths import mark

    if agent == "git":
        if user or shared or trust or mcp_writes or timeout is not None or fmt != "json":
            raise ConfigError("hook install git takes --project, --cluster and --json only")
        _install_git(project, cluster, json_out)
        return
    _agent(agent)
    if agent in OTHERS:
        if shared or trust or mcp_writes or sandbox or fmt != "json":
            raise ConfigError(
                f"hook install {agent} takes --project, --cluster, --user, --timeout, "
                "--explicit and --json"
            )
        _install_other(agent, project, cluster, user, timeout, explicit, json_out)
        return
    if shared and (agent != "claude" or user):
        raise ConfigError("--shared is for a Claude Code project install")
    if trust and agent != "codex":
        raise ConfigError("--trust is for codex (Claude Code needs no trust step)")
    if statusline and (agent != "claude" or shared):
        raise ConfigError(
            "--statusline is for a Claude Code install on this machine (not --shared: the "
            "status line names this installation's planfence)"
        )
    if sandbox:
        from ..workspace.installers.sandbox import install as install_sandbox

        install_sandbox(agent, project, cluster, user=user, shared=shared)
    path, moved = installer.install(
        agent,
        project,
        fmt=fmt,
        cluster=cluster,
        user=user,
        shared=shared,
        mcp_writes=mcp_writes,
        timeout=timeout,
        explicit=explicit,
        http=not command_form,
    )
    if statusline:
        installer.install_statusline(path, cluster)
    root = installer.project_root(project)
    if not user:
        mark(root, cluster.resolve() if cluster is not None else None)
    trusted: list[str] = []
    if trust:
        from ..workspace.installers.codexapp import find_codex
        from ..workspace.installers.codextrust import trust as trust_codex

        trusted = trust_codex(root, find_codex(codex_exe), user=user)
    policy = None
    if recovery_policy:
        from ..workspace.installers.recovery import add_policy

        policy = add_policy(agent, root)
    _Installed(agent, path, moved, root, trusted, policy).show(cluster, json_out)


def _install_other(
    agent: str,
    project: Path,
    cluster: Path | None,
    user: bool,
    timeout: float | None,
    explicit: bool,
    json_out: bool,
) -> None:
    """`hook install` for a client of OTHERS (`hookfiles.install_client`)."""
    import json

    from ..workspace.installers import clients as installer
    from ..workspace.installers.clientstatus import install_warning
    from ..workspace.installers.hookfiles import install_client
    from ..workspace.place.paths import mark

    path = install_client(
        agent, project, cluster=cluster, user=user, timeout=timeout, explicit=explicit
    )
    root = installer.project_root(project)
    if not user:
        mark(root, cluster.resolve() if cluster is not None else None)
    if json_out:
        text = path.read_text()
        shown = json.loads(text) if path.suffix == ".json" else text  # a plugin: its text
        echo_json({"agent": agent, "path": str(path), "config": shown})
        return
    click.echo(f"installed the PlanFence hooks for {agent} in {path}")
    note = installer.unserved_note(root, cluster) + install_warning(agent, root)
    click.echo(note, nl=False, err=True)
    click.echo(f"check: planfence hook status {agent} --project {root}")


def _status(agent: str, root: Path, codex_exe: Path | None) -> Any:
    """`hook status` of one client (`installers.status`, `clientstatus.status_of`)."""
    from ..workspace.installers import status

    if agent == "claude":
        return status.claude_status(root)
    if agent == "codex":
        from ..workspace.installers.codexapp import find_codex

        return status.codex_status(root, find_codex(codex_exe))
    from ..workspace.installers.clientstatus import status_of

    return status_of(agent, root)


@dataclasses.dataclass(frozen=True)
class _Installed:
    """What `hook install` did, as it prints it: the config written, the configs ours moved
    out of, the Codex trust decisions recorded and the recovery policy's fate."""

    agent: str
    path: Path
    moved: list[Path]
    root: Path
    trusted: list[str]
    policy: PolicyResult | None

    def show(self, cluster: Path | None, json_out: bool) -> None:
        """Print it: as JSON (`--json`), else as the lines a person reads."""
        if json_out:
            echo_json(self.to_json())
        else:
            self.print(cluster)

    def to_json(self) -> dict[str, Any]:
        """The `--json` form."""
        from ..workspace.installers import clients as installer

        policy = self.policy
        return {
            "agent": self.agent,
            "path": str(self.path),
            "moved_from": [str(p) for p in self.moved],
            "config": installer.load(self.path),
            "trusted": self.trusted,
            **(
                {"recovery_policy": {"path": str(policy.path), "status": policy.status}}
                if policy
                else {}
            ),
        }

    def print(self, cluster: Path | None) -> None:
        """The lines a person reads (the unserved note on stderr)."""
        from ..workspace.installers import clients as installer

        agent, root = self.agent, self.root
        click.echo(
            f"installed the PlanFence hooks (PreToolUse, PostToolUse) for {agent} in {self.path}"
        )
        door = installer.http_url(self.path)
        if door:
            click.echo(f"as http hooks: the workspace owner answers them at {door}")
        click.echo(installer.unserved_note(root, cluster), nl=False, err=True)
        for other in self.moved:
            click.echo(f"moved ours out of {other} (Codex would run both forms)")
        if self.trusted:
            click.echo("recorded your trust decisions in $CODEX_HOME/config.toml:")
            for line in self.trusted:
                click.echo(f"  {line}")
        elif agent == "codex":
            click.echo(TRUST_STEPS.format(root=root))
        if self.policy is not None:
            click.echo(self.policy.text())


@hook_app.command("uninstall")
@user_errors
def uninstall(
    agent: str = AgentArg,
    project: Path = ProjectOpt,
    fmt: str = FormatOpt,
    user: bool = UserOpt,
    shared: bool = SharedOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Remove only our hook from the agent's config."""
    from ..workspace.installers import clients as installer

    if agent == "git":
        from ..workspace.installers import gitgate

        where, had = gitgate.uninstall(project)
        if json_out:
            echo_json({"agent": "git", "path": str(where), "removed": had})
            return
        click.echo(
            f"removed the PlanFence pre-commit hook from {where}"
            if had
            else f"no PlanFence pre-commit hook in {where}"
        )
        return

    if _agent(agent) in OTHERS:
        from ..workspace.installers.hookfiles import uninstall_client

        path, found = uninstall_client(agent, project, user=user)
    else:
        path, found = installer.uninstall(agent, project, fmt=fmt, user=user, shared=shared)
    if json_out:
        echo_json({"agent": agent, "path": str(path), "removed": found})
        return
    click.echo(
        f"removed the PlanFence hook from {path}" if found else f"no PlanFence hook in {path}"
    )


@hook_app.command("status")
@user_errors
def status(
    agent: str | None = Argument(
        None, help="a client of `hook install`, or git (default: claude and codex)."
    ),
    project: Path = ProjectOpt,
    codex_exe: Path | None = CodexOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Say, per agent, whether our hooks are active for the project and, if not, the step
    that activates them. Exit 0 only when every agent asked about is active."""
    from ..workspace.installers.clients import project_root

    root = project_root(project)
    if agent == "git":
        from ..workspace.installers.gitgate import status as git_status

        found: list[Any] = [git_status(root)]
    else:
        agents = [_agent(agent)] if agent else ["claude", "codex"]
        found = [_status(a, root, codex_exe) for a in agents]
    if json_out:
        echo_json({"project": str(root), "agents": [s.to_json() for s in found]})
    else:
        for s in found:
            click.echo(s.text())
    raise click.exceptions.Exit(0 if all(s.active for s in found) else 1)
