"""`planfence owner serve` for an ordinary owner, without click: the owner process's start.

    serve_plain(["CLUSTER", "--agent", "reqs"])  # serves until SIGTERM, then exits

The composition root (`cli.main`) hands `owner serve` here before it imports click: an owner
is long-lived and mostly idle, and whatever its start imports stays resident in every owner
of the machine (click, the command groups and the workspace owner are ~4 MiB of an idle
owner's ~35). This is the same command as click's `owner serve` (cli/records.py): the same
options, the same line once it listens, the same one-line errors with exit code 1. It returns
without doing anything when the arguments are not plain (`--help`, an option it does not
know, a missing value) or when the agent serves a worktree (a workspace owner): click's
command reads those.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import tomllib
from pathlib import Path
from typing import NoReturn

import anyio

from ..cluster.folder import ClusterDir
from ..cluster.ports import address_in_use, check_port
from ..core.errors import ConfigError, PlanfenceError, collapse
from ..core.escaping import escape
from ..core.roster import parse_address
from .limits import Limits
from .startup import run_owner

_FLAGS = {"--accept-loss"}
_VALUES = {"--agent", "--listen", "--limit"}


def serve_plain(argv: list[str]) -> None:
    """Serve the owner `argv` names and exit, or return when click must read `argv`."""
    options = _plain(argv)
    if options is None:
        return
    cdir, agent = ClusterDir(Path(options["path"][0])), options["--agent"][0]
    if _serves_worktree(cdir, agent):
        return
    try:
        _serve(cdir, agent, options)
    except PlanfenceError as exc:
        _fail(exc)
    sys.exit(0)


def _plain(argv: list[str]) -> dict[str, list[str]] | None:
    """The options of `argv` by name (the cluster folder as "path"), or None when click
    must read them: help, an unknown option, a value missing, not exactly one folder and
    one agent."""
    options: dict[str, list[str]] = {}
    words = iter(argv)
    for word in words:
        if word in _FLAGS:
            options.setdefault(word, []).append("")
        elif word in _VALUES:
            value = next(words, None)
            if value is None or value.startswith("-"):
                return None
            options.setdefault(word, []).append(value)
        elif word.startswith("-"):
            return None
        else:
            options.setdefault("path", []).append(word)
    if len(options.get("path", [])) != 1 or len(options.get("--agent", [])) != 1:
        return None
    if len(options.get("--listen", [])) > 1:
        return None
    return options


def _serves_worktree(cdir: ClusterDir, agent: str) -> bool:
    """True when the roster names a worktree for `agent`, or cannot be read here (click's
    command then says why)."""
    try:
        data = tomllib.loads(cdir.roster_path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return True
    entries = data.get("agents", [])
    return not isinstance(entries, list) or any(
        isinstance(a, dict) and a.get("name") == agent and "workspace" in a for a in entries
    )


def _serve(cdir: ClusterDir, agent: str, options: dict[str, list[str]]) -> None:
    """Serve until SIGTERM or Ctrl-C; raises ConfigError (the roster, a key, a limit, a
    port in use) or the store's StoreError."""
    roster = cdir.roster()
    cdir.identity(agent)
    listen = options.get("--listen")
    bind = parse_address(listen[0]) if listen else None
    limits = Limits.parse(options.get("--limit", []))
    host, port = bind or (roster.agent(agent).host, roster.agent(agent).port)
    remedy = "serve on another address with --listen HOST:PORT"
    if port:
        check_port(agent, host, port, remedy)
    serve = functools.partial(
        _run, cdir, agent, host, bind, limits, accept_loss="--accept-loss" in options
    )
    uvloop = {"use_uvloop": True} if importlib.util.find_spec("uvloop") else {}
    try:
        try:
            anyio.run(serve, backend="asyncio", backend_options=uvloop)
        except BaseExceptionGroup as group:  # a planfence error from a task: one line
            raise collapse(group) from None
    except (OSError, BaseExceptionGroup) as exc:  # the port was taken after the check
        if not address_in_use(exc):
            raise
        raise ConfigError(
            f"port {port} of {agent} ({host}:{port}) is already in use; {remedy}"
        ) from None


async def _run(
    cdir: ClusterDir,
    agent: str,
    host: str,
    bind: tuple[str, int] | None,
    limits: Limits,
    *,
    accept_loss: bool,
) -> None:
    async with anyio.create_task_group() as tg:
        bound = await tg.start(
            functools.partial(
                run_owner,
                cdir.roster(),
                cdir.identity(agent),
                cdir.db(agent),
                cdir.log(agent),
                listen=bind,
                limits=limits,
                accept_loss=accept_loss,
            )
        )
        print(f"owner {agent} listening on {host}:{bound}", flush=True)


def _fail(exc: PlanfenceError) -> NoReturn:
    sys.stderr.write(f"error: {escape(str(exc))}\n")  # one line, whatever the message held
    sys.exit(1)
