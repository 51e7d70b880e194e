"""`planfence shape` and `planfence profiles`: a thin shell over `planfence_net.traces`.

`register(app)` adds both commands to the composition root's click group.
"""

from __future__ import annotations

import dataclasses
import json
import signal
from typing import TYPE_CHECKING

import click

from ..core.errors import PlanfenceError
from .group import Group
from .params import Option

# The library is imported inside the commands: `planfence shape --help` then loads click and
# this module only (start-up measured by tests/cli/test_cli_imports.py).
if TYPE_CHECKING:
    from ..traces.shaper import Shaper


def parse_address(text: str, option: str) -> tuple[str, int]:
    """Split `HOST:PORT` (IPv6 as `[::1]:PORT`); click.BadParameter naming `option` if invalid."""
    from ..core.roster import parse_address as parse

    try:
        return parse(text)
    except PlanfenceError:
        raise click.BadParameter(
            f"{text!r} is not HOST:PORT (port 0-65535)", param_hint=option
        ) from None


def register(app: Group) -> None:
    """Add the `shape` and `profiles` commands to `app`."""

    @app.command("shape")
    def shape(
        listen: str = Option(
            ..., "--listen", help="HOST:PORT to accept clients on (port 0: any free port)."
        ),
        upstream: str = Option(..., "--upstream", help="HOST:PORT to relay each connection to."),
        profile: str = Option(..., "--profile", help="Link profile (see `planfence profiles`)."),
        offset_ms: int = Option(
            0, "--offset-ms", min=0, help="Trace phase: start the traces at this ms."
        ),
        delay_ms: int | None = Option(
            None, "--delay-ms", min=0, help="One-way delay per direction; default: the profile's."
        ),
        loss: float = Option(
            0.0,
            "--loss",
            min=0.0,
            max=0.99,
            help="Chunk loss probability, emulated as a retransmission delay.",
        ),
        seed: int = Option(0, "--seed", help="Seed of the loss draws."),
        queue_bytes: int | None = Option(
            None,
            "--queue-bytes",
            min=1,
            show_default=False,
            help="Queue limit per direction; above it the relay stops reading (backpressure). Default: 256 KiB.",
        ),
    ) -> None:
        """Run a trace shaper in the foreground until SIGTERM or SIGINT."""
        run_shaper(listen, upstream, profile, offset_ms, delay_ms, loss, seed, queue_bytes)

    @app.command("profiles")
    def profiles(
        as_json: bool = Option(False, "--json", help="Print JSON instead of lines."),
    ) -> None:
        """List the link profiles of traces/profiles.toml."""
        from ..traces.profiles import list_profiles

        try:
            found = list_profiles()
        except PlanfenceError as exc:
            click.echo(f"error: {exc}", err=True)
            raise click.exceptions.Exit(1) from None
        if as_json:
            click.echo(json.dumps([dataclasses.asdict(p) for p in found], indent=2))
            return
        for p in found:
            traces = f"{p.up} / {p.down}" if p.shaped else "no traces"
            click.echo(f"{p.name:<14} {p.delay_ms:>3} ms  {traces}  {p.description}")


def run_shaper(
    listen: str,
    upstream: str,
    profile: str,
    offset_ms: int,
    delay_ms: int | None,
    loss: float,
    seed: int,
    queue_bytes: int | None,
) -> None:
    """`planfence shape`'s work: serve a `Shaper` on `listen` until SIGTERM or SIGINT; a
    PlanfenceError ends the command with its one line and exit code 1."""
    import anyio

    from ..traces.link import DEFAULT_QUEUE_BYTES
    from ..traces.shaper import Shaper

    listen_host, listen_port = parse_address(listen, "--listen")
    upstream_host, upstream_port = parse_address(upstream, "--upstream")
    try:
        shaper = Shaper(
            upstream_host,
            upstream_port,
            profile,
            offset_ms=offset_ms,
            delay_ms=delay_ms,
            loss=loss,
            seed=seed,
            queue_bytes=DEFAULT_QUEUE_BYTES if queue_bytes is None else queue_bytes,
        )
        anyio.run(
            _serve_until_signal, shaper, listen_host, listen_port, upstream, backend="asyncio"
        )
    except PlanfenceError as exc:
        click.echo(f"error: {exc}", err=True)
        raise click.exceptions.Exit(1) from None


async def _serve_until_signal(shaper: Shaper, host: str, port: int, upstream: str) -> None:
    import anyio

    async with anyio.create_task_group() as tg:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            bound = await tg.start(shaper.serve, host, port)
            profile = shaper.profile
            print(
                f"shaping {host}:{bound} -> {upstream} with profile {profile.name} "
                f"(one-way delay {shaper.delay_ms} ms)",
                flush=True,
            )
            async for _ in signals:
                tg.cancel_scope.cancel()
                break
