"""`planfence mcp ...`: PlanFence in front of an agent's MCP servers."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import click

from ..core.timeouts import DEFAULT_TIMEOUT
from .group import Group
from .params import Option

mcp_app = Group("mcp", help="Check MCP write tools against what was read.")


def register(app: Group) -> None:
    """Add `planfence mcp ...` to `app`."""
    app.add_command(mcp_app)


def _pattern(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise click.BadParameter(f"{value!r} is not a regular expression: {exc}") from None
    return value


# `proxy`'s options, declared here so the command reads as what it does.
NameOpt = Option(..., "--name", help="The server's name in keys (NAME:resource/URI).")
ReadsOpt = Option(
    "(?!)",
    "--reads",
    callback=_pattern,
    help="Tools that only read (a regex over the whole name): recorded, never checked.",
)
ProxyTimeoutOpt = Option(
    DEFAULT_TIMEOUT,
    "--timeout",
    min=0.1,
    help="Seconds one write check may take (then it is refused).",
)
ProxyClusterOpt = Option(
    None,
    "--cluster",
    help="Serve the facts read through the proxy as an owner of this cluster folder.",
)
ProxyAsOpt = Option(None, "--as", help="The roster member serving them (default: the --name).")


@mcp_app.command(
    "proxy", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def proxy(
    ctx: click.Context,
    name: str = NameOpt,
    reads: str = ReadsOpt,
    timeout: float = ProxyTimeoutOpt,
    cluster: Path | None = ProxyClusterOpt,
    as_agent: str | None = ProxyAsOpt,
) -> None:
    """Serve MCP on stdin/stdout in front of `-- COMMAND ...`, the real server.

    Every resource and read-tool answer the session sees joins its read set; every other
    tool call is a write: before it reaches the server, what the session read is looked at
    again, and a change refuses the call with a tool error that says what to read again.
    """
    command = list(ctx.args)
    if not command:
        raise click.BadParameter("give the MCP server's command after `--`", param_hint="COMMAND")
    from ..core.errors import PlanfenceError
    from ..mcp.proxy import run_proxy
    from ..mcp.relay import ToolPolicy
    from .support import run_async

    owner = None
    if cluster is not None:
        from ..cluster.folder import ClusterDir

        owner = functools.partial(_serve_facts, ClusterDir(cluster), as_agent or name, timeout)
    try:
        code = run_async(
            functools.partial(
                run_proxy,
                name,
                command,
                ToolPolicy(reads=reads),
                check_timeout=timeout,
                owner=owner,
            )
        )
    except PlanfenceError as exc:
        click.echo(f"error: {exc}", err=True)
        raise click.exceptions.Exit(1) from None
    except OSError as exc:
        click.echo(f"error: cannot start {command[0]}: {exc.strerror or exc}", err=True)
        raise click.exceptions.Exit(1) from None
    raise click.exceptions.Exit(code)


async def _serve_facts(cdir: Any, agent: str, read_timeout: float, proxy: Any, tg: Any) -> None:
    """Start the proxy's owner in `tg`; returns once it listens."""
    from ..mcp.owner import serve_facts

    await tg.start(
        functools.partial(serve_facts, proxy, cdir, agent, tg, read_timeout=read_timeout)
    )


@mcp_app.command("serve")
def serve(
    cluster: Path | None = Option(
        None,
        "--cluster",
        help="Cluster folder (default: found from the working folder at each call, as the "
        "hook finds it).",
    ),
) -> None:
    """Serve PlanFence's own tools over MCP on stdin/stdout: check, trust, heads, plans,
    history (the library calls of `workspace check`, `workspace trust`, `heads`, ...).

    `trust` keeps an agent's limits: --fresh, --narrow and --make-current are refused, a
    plan declares at least one file, declared files exist. Needs the `mcp` extra.
    """
    try:
        from ..mcp.serve import serve_stdio
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] != "mcp":
            raise
        click.echo(
            "error: planfence mcp serve needs the MCP SDK: install the wheel with its mcp extra "
            "(README, Install), or pip install 'mcp>=2.0,<3' where planfence runs",
            err=True,
        )
        raise click.exceptions.Exit(1) from None
    from ..core.errors import PlanfenceError
    from ..workspace.place.config import find_cluster
    from .support import run_async

    try:
        if cluster is not None:
            find_cluster(cluster)  # a wrong folder is one line now, not a tool error later
        run_async(serve_stdio, cluster, Path.cwd())
    except PlanfenceError as exc:
        click.echo(f"error: {exc}", err=True)
        raise click.exceptions.Exit(1) from None
