"""`planfence hook ...`: the agents' PreToolUse hook and installing it into their configs.

`hook claude|codex` normally never reaches typer: `planfence_net.cli.main` sends it to the
lean hook module first. The commands here serve `install`, `uninstall`, and `--help`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from .support import JsonOpt, echo_json, user_errors

hook_app = typer.Typer(no_args_is_help=True, help="PreToolUse hooks for Codex and Claude Code.")
AgentArg = typer.Argument(..., help="claude or codex.")
ProjectOpt = typer.Option(
    Path("."), "--project", help="Project folder whose agent config to change (default: here)."
)
FormatOpt = typer.Option(
    "json", "--format", help="codex only: json (.codex/hooks.json) or toml (.codex/config.toml)."
)


def register(app: typer.Typer) -> None:
    """Add `planfence hook ...` to `app`."""
    app.add_typer(hook_app, name="hook")


def _agent(agent: str) -> str:
    from ..workspace.install import MATCHERS

    if agent not in MATCHERS:
        raise typer.BadParameter(f"{agent!r}: expected claude or codex")
    return agent


@hook_app.command(
    "claude", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def claude(ctx: typer.Context) -> None:
    """Run the PreToolUse hook for Claude Code (payload on stdin; exit 0 allow, 2 block)."""
    from ..workspace.hook import main

    raise typer.Exit(main("claude", list(ctx.args)))


@hook_app.command(
    "codex", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def codex(ctx: typer.Context) -> None:
    """Run the PreToolUse hook for Codex (payload on stdin; exit 0 allow, 2 block)."""
    from ..workspace.hook import main

    raise typer.Exit(main("codex", list(ctx.args)))


@hook_app.command("install")
@user_errors
def install(
    agent: str = AgentArg,
    project: Path = ProjectOpt,
    fmt: str = FormatOpt,
    cluster: Path | None = typer.Option(
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
    typer.echo(f"installed the PlanFence hooks (PreToolUse, PostToolUse) for {agent} in {path}")


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
    typer.echo(
        f"removed the PlanFence hook from {path}" if found else f"no PlanFence hook in {path}"
    )
