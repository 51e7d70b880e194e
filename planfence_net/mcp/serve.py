"""`planfence mcp serve`: PlanFence's own checks as MCP tools, so agents call them natively.

Five tools, each the library call of the matching command, against one workspace cluster
(`--cluster`, else found from the server's working folder as the hook finds it, at each call):

    check    a plan's drift check (`workspace check`): its level, exit code and the lines a
             person reads
    trust    record a plan's trusted state and publish its intents (`workspace trust`, the
             one use case `plans.usecases.trust_plan`) as an agent whose session the
             server cannot know (`access.Caller.mcp`): the person-only flags
             (facts.PERSON_FLAGS) are refused, and so is binding the plan to a session
             (only that session itself or the user may); a plan declares at least one file,
             declared files exist, a re-trust declares at least what it replaces. Evidence
             commands are not offered: they run a shell command, which through MCP no hook
             would see (run `workspace trust --evidence` in the shell instead, where the
             hook checks it)
    heads    the current head of each key, asked from its owner (`net.api.query_heads`)
    plans    the plans the cluster folder keeps (`workspace.json`): the current plan, the
             session-free ones, and the sessions and subagents each is bound to
    history  the events of one key in its owner's log (`owners.logs.read_events`)

A user error (no cluster, a file outside every worktree, a refused trust) is an MCP tool
error whose text is the one line the command prints. Needs the optional `mcp` extra (the
official MCP SDK); the CLI imports this module only inside `planfence mcp serve`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from ..cluster.folder import ClusterDir
from ..cluster.processes import link_addresses
from ..core.errors import ConfigError, PlanfenceError, collapse
from ..core.timeouts import DEFAULT_TIMEOUT
from ..net.api import query_heads
from ..owners.logs import read_events
from ..workspace.place.config import find_cluster
from ..workspace.plans.access import Caller, person_only
from ..workspace.plans.usecases import TrustRequest, check_plan, member_of, trust_plan
from ..workspace.plans.views import plan_selection

__all__ = ["build_server", "person_only", "serve_stdio"]

INSTRUCTIONS = (
    "PlanFence checks a plan against what it read. `trust` records the files a plan read "
    "and will change before you edit; `check` says whether they changed since; on drift, "
    "read the files again and trust once more (your one replan); if it drifts again, stop "
    "and report. Lowering the fence (--fresh, --narrow, --make-current) is the user's "
    "decision, never yours."
)


def build_server(cluster: Path | None, cwd: Path) -> MCPServer:
    """The MCP server with the five tools, for the cluster folder `cluster` (None: found from
    `cwd` at each call); file names in `trust` are relative to `cwd` (or NAME:PATH)."""
    server = MCPServer("planfence", instructions=INSTRUCTIONS, log_level="WARNING")

    def folder() -> ClusterDir:
        return find_cluster(cluster, start=cwd)

    _add_check(server, folder)
    _add_trust(server, folder, cwd)
    _add_heads(server, folder)
    _add_plans(server, folder)
    _add_history(server, folder)
    return server


def _add_check(server: MCPServer, folder: Callable[[], ClusterDir]) -> None:
    """Add `check`: a plan's drift check (`plans.usecases.check_plan`)."""

    @server.tool()
    def check(
        plan: str | None = None, session: str | None = None, timeout: float = DEFAULT_TIMEOUT
    ) -> dict[str, Any]:
        """Check PLAN (default: the plan bound to `session`, else the cluster's current plan)
        for drift since its trusted state.

        `class` is none, informational, relevant, critical or undecided; `exit_code` is 0
        (go on), 2 (read the `reread` files again, re-plan, trust again) or 3 (cannot
        decide: do not go on); `text` is what `planfence workspace check` prints."""
        with _user_errors():
            if not 0.01 <= timeout <= 600:
                raise ConfigError("timeout must be between 0.01 and 600 seconds")
            verdict = check_plan(folder(), plan, session=session, timeout=timeout, door="mcp")
            return {**verdict.to_json(), "text": verdict.text()}


def _add_trust(server: MCPServer, folder: Callable[[], ClusterDir], cwd: Path) -> None:
    """Add `trust`: record a plan's trusted state as an agent of unknown session
    (`plans.usecases.trust_plan` with `access.Caller.mcp`); file names relative to `cwd`."""

    @server.tool()
    async def trust(
        plan: str,
        read: list[str] | None = None,
        target: list[str] | None = None,
        new: list[str] | None = None,
        lockfiles: Literal["auto", "none"] = "auto",
        session: str | None = None,
        agent: str | None = None,
        fresh: bool = False,
        narrow: bool = False,
        make_current: bool = False,
    ) -> dict[str, Any]:
        """Record the trusted state of PLAN: the current versions of the files it `read`,
        will change (`target`) and will create (`new`, must not exist yet), plus the
        lockfiles found (`lockfiles`: auto). Paths are relative to the server's folder, or
        NAME:PATH. Trusting a plan again is its one replan and must declare at least what
        it declared. `session` (and `agent`, a subagent of it) would bind the plan to that
        session: refused here, since this server cannot tell which session calls it (only a
        session itself, through its hook, or the user may). `fresh`, `narrow` and
        `make_current` are the user's decision: always refused here."""
        request = TrustRequest(
            plan,
            cwd,
            tuple(read or ()),
            tuple(target or ()),
            tuple(new or ()),
            lockfiles=lockfiles,
            session=session,
            subagent=agent,
            fresh=fresh,
            narrow=narrow,
            make_current=make_current,
        )
        with _user_errors():
            done = await anyio.to_thread.run_sync(trust_plan, folder(), request, Caller.mcp())
            record = done.record
            return {
                "plan": plan,
                "key": record["key"],
                "id": record["id"].hex(),
                "seq": record["seq"],
                "trust": record["trust"],
                "declaration": record["declaration"],
                "current": done.current,
                "intents": done.intents,
                "text": done.text(),
            }


def _add_heads(server: MCPServer, folder: Callable[[], ClusterDir]) -> None:
    """Add `heads`: the current head of each key, asked from its owner."""

    @server.tool()
    async def heads(keys: list[str]) -> dict[str, Any]:
        """The current head of each key (e.g. `plan/NAME`, `ws:file/src/a.py`), asked from
        its owner: {key, owner, seq, id (hex, null: no record yet)} per key."""
        with _user_errors():
            if not keys:
                raise ConfigError("name at least one key")
            cdir = folder()
            roster = cdir.roster()
            try:
                rows = await query_heads(
                    roster,
                    cdir.identity(member_of(roster, keys[0])),
                    keys,
                    link_addresses(cdir),
                )
            except BaseExceptionGroup as group:
                raise collapse(group) from None
            return {"heads": [{**r, "id": r["id"].hex() if r["id"] else None} for r in rows]}


def _add_plans(server: MCPServer, folder: Callable[[], ClusterDir]) -> None:
    """Add `plans`: the plans the cluster folder keeps."""

    @server.tool()
    def plans() -> dict[str, Any]:
        """The plans this workspace's cluster folder keeps: `current` (checked for sessions
        without a plan of their own), `shared` (trusted with no session), `sessions`
        (session id -> plan) and `agents` (session id -> subagent -> plan)."""
        with _user_errors():
            cdir = folder()
            return {"cluster": str(cdir.root), **plan_selection(cdir)}


def _add_history(server: MCPServer, folder: Callable[[], ClusterDir]) -> None:
    """Add `history`: the events of one key in its owner's log."""

    @server.tool()
    def history(key: str, limit: int = 50) -> dict[str, Any]:
        """The last `limit` events of KEY (e.g. `plan/NAME`) in its owner's log: each put
        (a new version: id, seq, parents) with its time."""
        with _user_errors():
            if limit < 1:
                raise ConfigError("limit must be at least 1")
            cdir = folder()
            owner = cdir.roster().owner_of(key)
            if owner is None:
                raise ConfigError(f"no agent owns {key!r} in the roster")
            try:
                found = [e for e in read_events(cdir.log(owner)) if e.get("key") == key]
            except FileNotFoundError:
                raise ConfigError(f"no log for {owner} yet at {cdir.log(owner)}") from None
            return {"key": key, "owner": owner, "events": found[-limit:]}


class _user_errors:
    """Turn a PlanfenceError (and an OSError of the cluster folder) into a ToolError of its
    one line; anything else stays loud."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if isinstance(exc, PlanfenceError):
            raise ToolError(str(exc)) from None
        if isinstance(exc, OSError):
            raise ToolError(f"{exc.filename or ''}: {exc.strerror or exc}") from None


async def serve_stdio(cluster: Path | None, cwd: Path) -> None:
    """Serve the tools on stdin/stdout until the client closes stdin."""
    await build_server(cluster, cwd).run_stdio_async()
