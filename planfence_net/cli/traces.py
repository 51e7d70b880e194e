"""`planfence traces fetch`: a thin shell over `planfence_net.traces.fetch`.

`register(app)` adds the `traces` command group to the composition root's click group.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..traces.profiles import MAHIMAHI_URL, TRACES_ENV, trace_dirs, user_traces_dir
from .group import Group
from .params import Option
from .support import JsonOpt, echo_json, user_errors

if TYPE_CHECKING:  # imported where used: `planfence --help` loads neither rich nor urllib
    from rich.progress import TaskID

    from ..traces.fetch import FetchedTrace

traces_app = Group("traces", help="Get the Mahimahi LTE traces.")


def register(app: Group) -> None:
    """Add the `traces` command group to `app`."""
    app.add_command(traces_app)


@traces_app.command("fetch")
@user_errors
def fetch(
    source: str = Option(
        MAHIMAHI_URL, "--from", metavar="URL", help="Base URL (or folder) holding the trace files."
    ),
    folder: Path | None = Option(
        None,
        "--dir",
        metavar="DIR",
        help="Where to put them (default: the user's "
        "trace folder, which the search path includes).",
    ),
    timeout: float = Option(
        30.0, "--timeout", min=1.0, help="Seconds without data before giving up."
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Download the nine Mahimahi LTE traces, refusing any file whose SHA-256 is not pinned."""
    from ..traces.fetch import fetch_traces

    dest = folder if folder is not None else user_traces_dir()
    with _ProgressBars() as report:
        fetched = fetch_traces(dest, source, progress=report, timeout=timeout)
    if json_out:
        echo_json({"dir": str(dest), "source": source, "traces": [_row(t) for t in fetched]})
        return
    for t in fetched:
        click.echo(f"{t.status:<10} {t.name} ({t.size:,} B)")
    downloaded = sum(t.status == "downloaded" for t in fetched)
    click.echo(
        f"{len(fetched)} traces in {dest}: {downloaded} downloaded, "
        f"{len(fetched) - downloaded} already present, every SHA-256 as pinned"
    )
    if dest.resolve() not in [d.resolve() for d in trace_dirs()]:
        click.echo(f"{dest} is not on the trace search path: set {TRACES_ENV}={dest}")


def _row(t: FetchedTrace) -> dict[str, object]:
    return {
        "name": t.name,
        "path": str(t.path),
        "size": t.size,
        "sha256": t.sha256,
        "status": t.status,
    }


class _ProgressBars:
    """A rich progress bar per downloaded file, on stderr when it is a terminal; the context
    value is the callback `fetch_traces` reports to."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

        console = Console(stderr=True)
        self.progress = Progress(
            TextColumn("{task.description:<26}"),
            BarColumn(),
            DownloadColumn(),
            console=console,
            transient=False,
            disable=not console.is_terminal,
        )  # no bars in logs
        self.tasks: dict[str, TaskID] = {}

    def __enter__(self) -> _ProgressBars:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.tasks:
            self.progress.stop()

    def __call__(self, name: str, done: int, total: int | None) -> None:
        if not self.tasks:
            self.progress.start()  # only once something downloads: nothing to show otherwise
        if name not in self.tasks:
            self.tasks[name] = self.progress.add_task(name, total=total)
        self.progress.update(self.tasks[name], completed=done)
