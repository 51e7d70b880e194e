"""`planfence view`: the team's sessions, plans, blocks and owners, live, as a web page (the
default), a terminal UI (`--tui`) or JSON lines (`--json`), three readers of one collector.

The page listens on 127.0.0.1 only and prints its URL, which carries a token made for this
start; a request without it is refused. `--json` prints every row, then each change, one JSON
object a line (`--once`: the rows as they are now, with the bodies the owners gave within
their timeout, then exit). `--statusline` is the Claude
Code status line (`statusline`). Errors are one line on stderr and exit 1.

The click command lives here, beside what it runs; the CLI's root group registers it.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import click

from ..core.errors import PlanfenceError


def register(app: click.Group) -> None:
    """Add the `view` command to `app`."""
    app.add_command(view)


@click.command("view")
@click.option(
    "--cluster",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Cluster folder (default: the one serving this folder).",
)
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Port on 127.0.0.1 for the page (0: any free port).")  # fmt: skip
@click.option("--tui", is_flag=True, help="The view in this terminal (Textual).")
@click.option("--json", "json_out", is_flag=True, help="JSON lines: every row, then changes.")
@click.option("--once", is_flag=True, help="With --json: print the rows as they are now, exit.")
@click.option("--statusline", is_flag=True, help="Claude Code's status line (JSON on stdin).")
@click.option("--open", "open_browser", is_flag=True, help="Open the page in a browser.")
def view(
    cluster: Path | None,
    port: int,
    tui: bool,
    json_out: bool,
    once: bool,
    statusline: bool,
    open_browser: bool,
) -> None:
    """The team, live: sessions, plans, blocks and owners, as a local web page."""
    if statusline:
        from .statusline import main

        click.echo(main(sys.stdin, cluster))
        return
    try:
        _view(cluster, port, tui, json_out, once, open_browser)
    except PlanfenceError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except ImportError as exc:
        click.echo(
            f"error: {exc.name} is missing: install the view extra "
            f"(pip install 'planfence-net[view]')",
            err=True,
        )
        sys.exit(1)


def _view(
    cluster: Path | None, port: int, tui: bool, json_out: bool, once: bool, open_browser: bool
) -> None:
    import anyio

    from ..workspace.place.config import find_cluster
    from .collect import Collector

    cdir = find_cluster(cluster, Path.cwd())
    cdir.roster()  # a folder without a roster fails here, with its one line
    collector = Collector(cdir)
    if json_out and once:
        collector.round()
        anyio.run(collector.wait_bodies)
        for row in collector.team.rows():
            click.echo(json.dumps(row, default=str))
        return
    if tui:
        from .tui import ViewApp

        ViewApp(collector).run()
        return
    if json_out:
        anyio.run(_print_json, collector)
        return
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen(128)  # connections wait for the server from here on, never refused
    except OSError as exc:
        sock.close()
        raise PlanfenceError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}") from None
    with sock:
        anyio.run(_serve, collector, sock, open_browser)


async def _print_json(collector: object) -> None:
    import anyio

    from .collect import Collector

    assert isinstance(collector, Collector)
    async with anyio.create_task_group() as tg:
        await tg.start(collector.run)
        async with collector.subscribe() as receive:
            async for batch in receive:
                for row in batch:
                    sys.stdout.write(json.dumps(row, default=str) + "\n")
                sys.stdout.flush()


async def _serve(collector: object, sock: socket.socket, open_browser: bool) -> None:
    """Serve the page on `sock` until SIGINT or SIGTERM (uvicorn's handlers), then stop the
    collector."""
    import anyio
    import uvicorn

    from .collect import Collector
    from .page import make_app, new_token

    assert isinstance(collector, Collector)
    token = new_token()
    port = sock.getsockname()[1]
    app = make_app(collector, token, port)
    config = uvicorn.Config(
        app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1, access_log=False
    )
    server = uvicorn.Server(config)
    url = f"http://127.0.0.1:{port}/?token={token}"
    async with anyio.create_task_group() as tg:
        await tg.start(collector.run)
        click.echo(f"planfence view: {url}")
        click.echo(f"(cluster {collector.cdir.root}; Ctrl-C stops it)")
        sys.stdout.flush()
        if open_browser:
            import webbrowser

            webbrowser.open(url)
        await server.serve(sockets=[sock])
        tg.cancel_scope.cancel()
