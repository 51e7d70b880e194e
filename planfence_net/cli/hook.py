"""`planfence hook ...`: the agents' PreToolUse hook and installing it into their configs.

`hook claude|codex` normally never reaches click: `planfence_net.cli.main` sends it to the
lean hook module first. The commands here serve `install`, `uninstall`, and `--help`.
"""

from __future__ import annotations

from pathlib import Path

import click

from .group import Group
from .params import Argument, Option
from .support import JsonOpt, echo_json, user_errors

hook_app = Group("hook", help="PreToolUse hooks for Codex and Claude Code.")
AgentArg = Argument(..., help="claude or codex.")
ProjectOpt = Option(
    Path("."), "--project", help="Project folder whose agent config to change (default: here)."
)
FormatOpt = Option(
    "json",
    "--format",
    choices=("json", "toml"),
    help="codex only: json (.codex/hooks.json) or toml (.codex/config.toml).",
)


def register(app: Group) -> None:
    """Add `planfence hook ...` to `app`."""
    app.add_command(hook_app)


def _agent(agent: str) -> str:
    from ..workspace.install import MATCHERS

    if agent not in MATCHERS:
        raise click.BadParameter(f"{agent!r}: expected claude or codex")
    return agent


@hook_app.command(
    "claude", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def claude(ctx: click.Context) -> None:
    """Run the PreToolUse hook for Claude Code (payload on stdin; exit 0 allow, 2 block)."""
    from ..workspace.hook import main

    raise click.exceptions.Exit(main("claude", list(ctx.args)))


@hook_app.command(
    "codex", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def codex(ctx: click.Context) -> None:
    """Run the PreToolUse hook for Codex (payload on stdin; exit 0 allow, 2 block)."""
    from ..workspace.hook import main

    raise click.exceptions.Exit(main("codex", list(ctx.args)))


@hook_app.command("install")
@user_errors
def install(
    agent: str = AgentArg,
    project: Path = ProjectOpt,
    fmt: str = FormatOpt,
    cluster: Path | None = Option(
        None,
        "--cluster",
        help="Cluster folder the hook uses (default: found from the agent's working folder).",
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Merge our PreToolUse and PostToolUse hooks into the agent's project config; other
    hooks stay."""
    from ..workspace import install as installer

    path = installer.install(_agent(agent), project, fmt=fmt, cluster=cluster)
    if json_out:
        echo_json({"agent": agent, "path": str(path), "config": installer.load(path)})
        return
    click.echo(f"installed the PlanFence hooks (PreToolUse, PostToolUse) for {agent} in {path}")


@hook_app.command("uninstall")
@user_errors
def uninstall(
    agent: str = AgentArg,
    project: Path = ProjectOpt,
    fmt: str = FormatOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Remove only our hook from the agent's project config."""
    from ..workspace import install as installer

    path, found = installer.uninstall(_agent(agent), project, fmt=fmt)
    if json_out:
        echo_json({"agent": agent, "path": str(path), "removed": found})
        return
    click.echo(
        f"removed the PlanFence hook from {path}" if found else f"no PlanFence hook in {path}"
    )
