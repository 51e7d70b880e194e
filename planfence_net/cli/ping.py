"""Health checks: `planfence ping` and `planfence doctor`.

`ping`: does an owner accept an authenticated session right now? One try under one
deadline, for scripts and container health checks (docker-compose.yml): exit 0 when the
owner answered a ping over a Noise session, 1 with one line otherwise.

`doctor`: is the fence working for a folder (workspace/installers/doctor.py)? One line per
check with its fix; exit 1, naming what failed, when anything would block or fail open.

`register(app)` adds the commands to the composition root's click group.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from ..core.timeouts import DEFAULT_TIMEOUT
from .group import Group
from .params import Argument, Option
from .support import DirArg, JsonOpt, cluster_dir, echo_json, run_async, user_errors


def register(app: Group) -> None:
    """Add the `ping` and `doctor` commands to `app`."""
    app.command("ping")(ping)
    app.command("doctor")(doctor)


@user_errors
def ping(
    path: Path = DirArg,
    agent: str = Argument(..., metavar="AGENT", help="Whose owner to ping."),
    address: str | None = Option(
        None,
        "--address",
        metavar="HOST:PORT",
        help="Where to reach it (default: its shaper if it has one, else the roster's address).",
    ),
    as_agent: str | None = Option(
        None, "--as", metavar="AGENT", help="Roster member to connect as (default: AGENT)."
    ),
    timeout: float = Option(
        DEFAULT_TIMEOUT, "--timeout", min=0.1, help="Seconds for connect, handshake and answer."
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Open one authenticated session to AGENT's owner and ping it; exit 0 if it answered."""
    import anyio

    from ..cluster.processes import link_addresses
    from ..core.errors import TransportError
    from ..core.roster import parse_address
    from ..net.client import open_session

    cdir = cluster_dir(path)
    roster = cdir.roster()
    roster.agent(agent)
    identity = cdir.identity(as_agent or agent)
    if address is not None:
        host, port = parse_address(address)
    else:
        host, port = link_addresses(cdir).get(
            agent, (roster.agent(agent).host, roster.agent(agent).port)
        )

    async def once() -> float:
        started = time.perf_counter()
        try:
            with anyio.fail_after(timeout):
                async with open_session(roster, identity, agent, host=host, port=port) as s:
                    await s.request("ping")
        except TimeoutError:
            raise TransportError(
                f"{agent} at {host}:{port} did not answer within {timeout:g} s"
            ) from None
        except TransportError as exc:  # "cannot connect to HOST:PORT: ...": say whose it is
            raise TransportError(f"owner {agent}: {exc}") from None
        return time.perf_counter() - started

    elapsed = run_async(once)
    if json_out:
        echo_json({"agent": agent, "address": f"{host}:{port}", "ms": round(elapsed * 1000, 2)})
    else:
        click.echo(f"{agent} at {host}:{port} answered in {elapsed * 1000:.1f} ms")


@user_errors
def doctor(
    project: Path = Option(
        Path("."),
        "--project",
        help="A folder of the project (its git worktree root is used; default: here).",
    ),
    codex: Path | None = Option(
        None,
        "--codex",
        metavar="PATH",
        help="The codex executable to ask (default: codex on PATH).",
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Check that the fence works here: an owner serves this folder, the agents' hooks are
    installed and start, Codex trusts them, the git gate is in place.

    One line per check (ok or FAIL) with the command that fixes it. Exit 1, naming the
    failed checks on stderr, when anything would block the agents or let their calls
    through unchecked.
    """
    from ..workspace.installers.doctor import diagnose

    health = diagnose(project, codex)
    if json_out:
        echo_json(health.to_json())
    else:
        from ..core.escaping import escape

        for check in health.checks:
            click.echo("\n".join(escape(line) for line in check.text().splitlines()))
    if not health.ok:
        failed = ", ".join(c.name for c in health.failed)
        click.echo(
            f"error: {len(health.failed)} of {len(health.checks)} checks failed: {failed}",
            err=True,
        )
        raise click.exceptions.Exit(1)
