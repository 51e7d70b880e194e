"""Who may do what to a session's plan: the one rule every front door applies.

A session's plan (which plan it works under, its intents, its replan count) belongs to that
session and to the person. The caller of a use case is a `Caller` value, made by the front
door from what it knows for certain:

- the person at a terminal (`Caller.person()`): may do anything;
- an agent's hook call (`Caller.agent(session)`): the payload names the session, so it may
  act on that session (and its subagents), never on another;
- `planfence mcp serve` (`Caller.mcp()`): an agent whose session the server cannot know, so
  it may act on no session at all (a plan it trusts is bound to none);
- the CLI run from an agent's shell (`Caller.of_shell(environ, cluster)`): Codex names the
  thread in `CODEX_THREAD_ID`; Claude Code only marks its shell (`CLAUDECODE=1`), so the
  session is the one the hook let run this very command (a `grant` the hook writes when it
  lets an agent's exempt `planfence workspace ...` through, taken once by the command).

`authorize` raises `Refused` (a ConfigError: one line, exit 1 in the CLI, a tool error in
MCP) with the same words at every door; the hook blocks an agent's shell command with those
words before it runs (`shell_refusal`), in every spelling it can read.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ...core.errors import ConfigError
from ..model.facts import PERSON_FLAGS

GRANT_TIMEOUT = 30.0  # seconds a hook's grant waits for the command it let through
GRANTS = "run/grants"
CODEX_SESSION = "CODEX_THREAD_ID"
CLAUDE_SHELL = "CLAUDECODE"


class Refused(ConfigError):
    """A caller asked for what only the session itself or the person may do."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks: the person, or an agent of `session` (None: a session nobody can tell)."""

    kind: Literal["person", "agent"]
    session: str | None = None
    door: str = "the command"

    @classmethod
    def person(cls) -> Caller:
        return cls("person")

    @classmethod
    def agent(cls, session: str | None, door: str = "the command") -> Caller:
        return cls("agent", session or None, door)

    @classmethod
    def mcp(cls) -> Caller:
        """`planfence mcp serve`: always an agent, its session unknown."""
        return cls("agent", None, "the trust tool")

    @classmethod
    def of_shell(
        cls, environ: Mapping[str, str], cluster: Path, action: str, session: str | None
    ) -> Caller:
        """The caller of a CLI command that runs `action` on `session`: an agent when the
        environment is an agent's shell (Codex: `CODEX_THREAD_ID` names its session; Claude
        Code: `CLAUDECODE=1`, and the session is `session` only when the hook left a live
        `grant` for it in `cluster`), else the person."""
        codex = environ.get(CODEX_SESSION)
        if codex:
            return cls.agent(codex)
        if environ.get(CLAUDE_SHELL) == "1":
            granted = session is not None and take_grant(cluster, action, session)
            return cls.agent(session if granted else None)
        return cls.person()


def person_only(flag: str, door: str = "the trust tool") -> str:
    """The refusal of `flag` (one of PERSON_FLAGS) to an agent: the words the hook blocks a
    shell command carrying it with."""
    return (
        f"PlanFence blocked {door}: {flag} lowers the plan's fence and is the "
        f"user's decision, never the agent's. Do not try another way; ask the user."
    )


def not_yours(action: str, session: str) -> str:
    """The refusal of `action` on `session` to an agent that is not that session."""
    return (
        f"PlanFence refused {action} for session {session}: only that session itself (through "
        f"its own hook) or the user may change its plan, its intents or its replan count. "
        f"Do not try another way; ask the user."
    )


def authorize(
    caller: Caller, action: str, session: str | None, flags: tuple[str, ...] = ()
) -> None:
    """Raise Refused unless `caller` may run `action` (e.g. "workspace trust") on `session`
    (None: on no session's plan) with `flags` (the PERSON_FLAGS given). The person may do
    anything; an agent never passes a person-only flag nor refreshes, and acts only on its
    own session (an agent whose session is unknown: on none)."""
    if caller.kind == "person":
        return
    for flag in PERSON_FLAGS:
        if flag in flags:
            raise Refused(person_only(flag, caller.door))
    if action == "workspace refresh":
        raise Refused(
            f"PlanFence refused {action}: it re-bases a plan on a new branch or HEAD and is "
            f"the user's decision, never the agent's. Do not try another way; ask the user."
        )
    if action == "workspace release":
        raise Refused(
            f"PlanFence refused {action}: ending a plan's intents lets other plans write its "
            f"files and is the user's decision, never the agent's. Ask the user."
        )
    if session is not None and session != caller.session:
        raise Refused(not_yours(action, session))


# The actions that name a session (`--session S`, `--session=S`), in any spelling of the
# command (`planfence`, a path to it, `python -m planfence_net`), quotes and backslashes ignored.
_ACTION = re.compile(r"\bworkspace\s+(trust|refresh)(?![A-Za-z0-9_-])")
_SESSION = re.compile(r"--session(?:=|\s+)([^\s;&|()<>]+)")
_QUOTING = str.maketrans("", "", "'\"\\")


def shell_refusal(command: str, session: str | None) -> str | None:
    """The refusal (authorize's words) of an agent's shell `command` that runs a workspace
    action on a session other than its own `session`, else None."""
    text = command.translate(_QUOTING)
    action = _ACTION.search(text)
    if action is None:
        return None
    caller = Caller.agent(session)
    for named in _SESSION.findall(text):
        try:
            authorize(caller, f"workspace {action.group(1)}", named)
        except Refused as exc:
            return str(exc)
    return None


def named_session(command: str) -> tuple[str, str] | None:
    """(action, session) when the shell `command` runs a workspace action naming a session."""
    text = command.translate(_QUOTING)
    action, named = _ACTION.search(text), _SESSION.findall(text)
    return (f"workspace {action.group(1)}", named[-1]) if action and named else None


def _grant_path(cluster: Path, action: str, session: str) -> Path:
    digest = hashlib.blake2b(f"{action}\0{session}".encode(), digest_size=12).hexdigest()
    return cluster / GRANTS / f"{digest}.json"


def grant(cluster: Path, action: str, session: str, now: float | None = None) -> None:
    """Note that the hook let `session` run `action` on itself from its shell just now, for
    the command to take (`take_grant`) within GRANT_TIMEOUT."""
    path = _grant_path(cluster, action, session)
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.time() if now is None else now
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"deadline": stamp + GRANT_TIMEOUT}))
    tmp.replace(path)


def take_grant(cluster: Path, action: str, session: str, now: float | None = None) -> bool:
    """Whether a live grant lets `session` run `action` on itself (the grant is removed: it
    serves one command, also when two race for it)."""
    path = _grant_path(cluster, action, session)
    taken = path.with_suffix(f".{os.getpid()}.taken")
    try:
        path.replace(taken)
    except FileNotFoundError:
        return False
    try:
        data = json.loads(taken.read_text())
    except (OSError, ValueError):
        return False
    finally:
        taken.unlink(missing_ok=True)
    stamp = time.time() if now is None else now
    deadline = data.get("deadline") if isinstance(data, dict) else None
    return isinstance(deadline, int | float) and stamp <= deadline
