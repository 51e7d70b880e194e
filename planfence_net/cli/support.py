"""What every `planfence` command shares: running async code, one-line errors, JSON output.

Commands are a thin shell over the library; these helpers keep them thin.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..core.errors import PlanfenceError
from ..core.timeouts import DEFAULT_TIMEOUT
from .params import Argument, Option
from .text import json_text

if TYPE_CHECKING:  # imported where used: a command imports only what it needs
    from ..cluster.folder import ClusterDir
    from ..core.identity import Identity

F = TypeVar("F", bound=Callable[..., Any])
DirArg = Argument(..., help="Cluster folder (made by `planfence cluster init`).")
JsonOpt = Option(False, "--json", help="Print JSON instead of a table.")


def run_async(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a coroutine function on asyncio (uvloop when installed). A task group's failure
    that stands for one PlanfenceError is raised as that error."""
    import anyio

    from ..core.errors import collapse

    options = {"use_uvloop": True} if importlib.util.find_spec("uvloop") else {}
    try:
        return anyio.run(fn, *args, backend="asyncio", backend_options=options)
    except BaseExceptionGroup as group:  # a planfence error from a task: one line, not a tree
        raise collapse(group) from None


def user_errors(fn: F) -> F:
    """Turn planfence errors into one line on stderr and exit code 1, no traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except PlanfenceError as exc:
            from ..core.escaping import escape

            # one line, whatever an owner put in its message
            click.echo(f"error: {escape(str(exc))}", err=True)
            raise click.exceptions.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def echo_json(value: Any) -> None:
    click.echo(json_text(value))


MIN_ID_PREFIX = 8


def parse_id(text: str) -> bytes:
    """A full record id (64 hex characters); click.BadParameter (a usage error) otherwise."""
    try:
        rid = bytes.fromhex(text)
    except ValueError:
        rid = b""
    if len(rid) != 32:
        raise click.BadParameter(
            f"{text!r} is not a record id (64 hex characters, or a "
            f"unique prefix of at least {MIN_ID_PREFIX})"
        )
    return rid


def resolve_ids(cdir: ClusterDir, texts: list[str]) -> list[bytes]:
    """Record ids from full ids or unique prefixes of at least MIN_ID_PREFIX hex characters
    (outputs show ids shortened). Prefixes are looked up in the stores of the cluster
    folder. Raises click.BadParameter for text that is no id or prefix, PlanfenceError for a
    prefix that matches no record or several."""
    ids = []
    for text in texts:
        prefix = text.lower()
        if not MIN_ID_PREFIX <= len(prefix) < 64 or prefix.strip("0123456789abcdef"):
            ids.append(parse_id(text))
            continue
        from ..owners.reader import cluster_stores

        found = sorted(
            {
                rid
                for store in cluster_stores(cdir.root / "data")
                for rid in store.ids_with_prefix(prefix)
            }
        )
        if not found:
            raise PlanfenceError(
                f"no record id starts with {text} in the stores under {cdir.root / 'data'}"
            )
        if len(found) > 1:
            raise PlanfenceError(
                f"id prefix {text} is ambiguous: {len(found)} records match "
                f"({', '.join(r.hex()[:16] for r in found[:3])}"
                f"{', ...' if len(found) > 3 else ''}); give more hex digits"
            )
        ids.append(found[0])
    return ids


def print_table(columns: list[str], rows: list[list[Any]]) -> None:
    """Print `rows` under `columns`. Every cell is shown as plain text with newlines,
    terminal escapes and other non-printable characters written as backslash escapes (keys
    and the rest come from owners and peers: they must not forge lines, colours or markup)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from ..core.escaping import escape

    table = Table(*columns, box=None, pad_edge=False)
    for row in rows:
        table.add_row(*[Text(escape(str(c))) for c in row])
    Console(width=160).print(table)


def parse_body(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"--body is not valid JSON: {exc}") from None


AsOpt = Option(None, "--as", help="Roster member to connect as (default: the first).")
TimeoutOpt = Option(
    DEFAULT_TIMEOUT,
    "--timeout",
    min=0.01,
    metavar="SECONDS",
    help="How long each owner may take to connect, handshake and answer.",
)
# The old name of --timeout, still read (hidden): scripts written against it keep working.
DeadlineAlias = Option(None, "--deadline", min=0.01, metavar="SECONDS", hidden=True)


def timeout_of(timeout: float, deadline: float | None) -> float:
    """--timeout, or the deprecated --deadline when it was given."""
    return timeout if deadline is None else deadline


def cluster_dir(path: Path) -> ClusterDir:
    """The cluster folder at `path` (nothing is read yet)."""
    from ..cluster.folder import ClusterDir

    return ClusterDir(path)


def identity_for(cdir: ClusterDir, as_agent: str | None) -> Identity:
    roster = cdir.roster()
    return cdir.identity(as_agent or roster.agents[0].name)


def write_record(
    path: Path,
    key: str,
    body: str,
    parent: list[str],
    kind: str,
    json_out: bool,
    as_agent: str | None,
    timeout: float = DEFAULT_TIMEOUT,
) -> None:
    """Write a record (body as JSON text) as `as_agent` or the key's owner; print id and seq.

    Parents may be id prefixes; each must exist at some owner (PlanfenceError otherwise),
    so a plan never names a parent the gate could not fetch.
    """
    from ..cluster.processes import link_addresses
    from ..core.errors import RequestError
    from ..net.api import get_records, put_record

    cdir = cluster_dir(path)
    roster = cdir.roster()
    value, parents = parse_body(body), resolve_ids(cdir, parent)
    owner = roster.owner_of(key)
    if owner is None:
        raise PlanfenceError(f"no agent owns {key!r} in the roster")
    writer = cdir.identity(as_agent or owner)
    addresses = link_addresses(cdir)

    async def check_and_put() -> dict[str, Any]:
        if parents:
            try:
                await get_records(roster, writer, parents, addresses, timeout)
            except RequestError as exc:
                raise PlanfenceError(f"--parent: {exc.message}") from None
        return await put_record(
            roster,
            writer,
            key,
            body=value,
            parents=parents,
            kind=kind,
            addresses=addresses,
            owner_timeout=timeout,
        )

    result = run_async(check_and_put)
    if json_out:
        echo_json(result)
    else:
        from ..core.escaping import escape

        click.echo(
            f"{escape(key)} seq {result['seq']} id {result['id'].hex()} (owner {escape(owner)})"
        )
