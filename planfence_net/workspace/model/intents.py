"""Intents: which plan is about to change which file, published before it does (pure, no I/O).

Each plan's targets are published as intent records by the workspace owner of the worktree
holding the file (op `intend`, see intentbook.py), at `workspace trust` and before the plan's
first write to a file (the hook). An intent record `NAME:intent/DIGEST/REL` (DIGEST: of the
plan, session and subagent) names the plan, the session and subagent, the agent (claude,
codex, or none for a person's `trust`), the worktree and its repository, the file (REL,
relative to the worktree), whether it is exclusive, and when its lease expires. Records are
immutable: renewing or ending an intent writes the key's next record, whose parents are the
key's previous record and the plan record. An intent is live while not ended and before its
expiry.

Files are compared by repository and relative path: `src/lib.py` of two worktrees of one
repository is one file (the changes meet at merge time). Another plan's live intent on a
file is a notice; another plan's live exclusive intent blocks the write (`held`).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

INTENT_PREFIX = "intent/"
DEFAULT_LEASE = 1800.0  # seconds: half an hour; renewed by the plan's next first write after it
MIN_LEASE, MAX_LEASE = 1.0, 7 * 24 * 3600.0
AGENTS = ("claude", "codex")


@dataclass(frozen=True, slots=True)
class Intent:
    """One live intent as an owner answered it (verified record)."""

    owner: str  # the workspace agent that wrote it
    key: str
    plan: str
    file: str  # relative to its worktree
    session: str | None
    agent: str | None  # claude, codex, or None (a person's `workspace trust`)
    subagent: str | None
    worktree: str
    repo: str
    exclusive: bool
    expires: float
    since: float = 0.0  # when the owner first wrote this plan's intent on the file
    id: bytes = b""  # the record's id

    def who(self) -> str:
        """`plan 'login' (claude session 9f2c6a1e, subagent a81f3c) in /home/dev/wt`."""
        parts = []
        if self.agent or self.session:
            parts.append(" ".join(p for p in (self.agent, "session") if p))
            if self.session:
                parts[-1] += f" {self.session[:8]}"
        if self.subagent:
            parts.append(f"subagent {self.subagent}")
        by = f" ({', '.join(parts)})" if parts else ""
        return f"plan {self.plan!r}{by} in {self.worktree}"

    def until(self) -> str:
        """When the intent's lease runs out, as a date and time (a week reads as a week)."""
        return until_text(self.expires)


def intent_key(agent: str, plan: str, session: str | None, subagent: str | None, rel: str) -> str:
    """The key of the intent of (`plan`, `session`, `subagent`) on `rel`, at owner `agent`."""
    digest = hashlib.blake2b(
        "\0".join((plan, session or "", subagent or "")).encode(), digest_size=6
    ).hexdigest()
    return f"{agent}:{INTENT_PREFIX}{digest}/{rel}"


def is_intent(fact: str) -> bool:
    """True for the fact part of an intent key (only its owner writes those)."""
    return fact.startswith(INTENT_PREFIX)


def intent_body(
    *,
    plan: str,
    file: str,
    session: str | None,
    agent: str | None,
    subagent: str | None,
    worktree: str,
    repo: str,
    exclusive: bool,
    expires: float,
    since: float,
    ended: bool = False,
) -> dict[str, Any]:
    return {
        "plan": plan,
        "file": file,
        "session": session,
        "agent": agent,
        "subagent": subagent,
        "worktree": worktree,
        "repo": repo,
        "exclusive": exclusive,
        "expires": round(expires, 3),
        "since": round(since, 6),
        "ended": ended,
    }


def live(body: Any, now: float) -> bool:
    """Whether an intent record's body is live at `now` (not ended, lease not run out)."""
    return (
        isinstance(body, dict)
        and not body.get("ended")
        and isinstance(body.get("expires"), int | float)
        and body["expires"] > now
    )


def from_body(owner: str, key: str, body: Any, id: bytes = b"") -> Intent | None:
    """The intent a record body describes (record `id`), or None when it is not a
    well-formed one. A body without `since` (written before it existed) counts as 0."""
    if not isinstance(body, dict):
        return None
    text = ("plan", "file", "worktree", "repo")
    optional = ("session", "agent", "subagent")
    if not all(isinstance(body.get(f), str) for f in text):
        return None
    if not all(body.get(f) is None or isinstance(body.get(f), str) for f in optional):
        return None
    if not isinstance(body.get("exclusive"), bool) or not isinstance(
        body.get("expires"), int | float
    ):
        return None
    since = body.get("since", 0.0)
    if isinstance(since, bool) or not isinstance(since, int | float):
        return None
    return Intent(
        owner,
        key,
        body["plan"],
        body["file"],
        body.get("session"),
        body.get("agent"),
        body.get("subagent"),
        body["worktree"],
        body["repo"],
        body["exclusive"],
        float(body["expires"]),
        float(since),
        id,
    )


def first_holder(exclusive: list[Intent]) -> Intent:
    """Of live exclusive intents of several plans on one file, the one that keeps it: the
    earliest `since` (the owner's clock when it wrote the plan's intent on the file), then
    the smallest record id. Every plan that sees the same records picks the same one."""
    return min(exclusive, key=lambda i: (i.since, i.id))


def others(intents: list[Intent], plan: str, repo: str, rel: str) -> list[Intent]:
    """The intents of plans other than `plan` on file `rel` of repository `repo`."""
    return [i for i in intents if i.plan != plan and i.repo == repo and i.file == rel]


def notice(shown: str, found: list[Intent], unreachable: dict[str, str]) -> str:
    """What the model reads before its first write to `shown` when other plans intend it
    too, or some owner could not be asked ("" when neither)."""
    lines = [
        f"PlanFence: {i.who()} also intends to change {shown}"
        f"{' exclusively' if i.exclusive else ''} (intent until {i.until()}). "
        f"Coordinate: your edits and theirs meet at merge time."
        for i in found
    ]
    if unreachable:
        lines.append(
            f"PlanFence: could not ask {', '.join(sorted(unreachable))} for intents on "
            f"{shown} ({'; '.join(unreachable[o] for o in sorted(unreachable))}): other plans' "
            f"intents there are unknown."
        )
    return "\n".join(lines)


def held_message(blocked: str, shown: str, holders: list[Intent]) -> str:
    """Why a write to `shown` is blocked: another plan holds it exclusively."""
    first = min(holders, key=lambda i: i.expires)
    names = "; ".join(f"{i.who()} until {i.until()}" for i in holders)
    return (
        f"{blocked}: {shown} is held exclusively by {names}. Do not change it now: work on "
        f"other files, or wait until that plan ends (its session ends) or its lease runs "
        f"out ({first.until()}), then try again. Do not try another tool for the same change."
    )


def client_payload(
    *,
    plan: str,
    files: list[str],
    session: str | None,
    agent: str | None,
    subagent: str | None,
    exclusive: bool,
    lease: float,
    plan_id: bytes | None,
) -> dict[str, Any]:
    """The args of an `intend` request."""
    args: dict[str, Any] = {
        "plan": plan,
        "files": files,
        "exclusive": exclusive,
        "lease": float(lease),
    }
    for name, value in (("session", session), ("agent", agent), ("subagent", subagent)):
        if value:
            args[name] = value
    if plan_id is not None:
        args["plan_id"] = plan_id
    return args


def until_text(expires: float, now: float | None = None) -> str:
    """`expires` as a date and time in UTC, and with `now` what remains:
    `2026-12-01 16:30:00 UTC (in 30 min)`."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expires))
    if now is None:
        return when
    left = max(0.0, expires - now)
    span = f"{left / 3600:.1f} h" if left >= 3600 else f"{round(left / 60)} min"
    return f"{when} (in {span})"


DEFAULT_MAX_AGENT_LEASE = 3600.0  # an agent's lease at most (cluster.toml [intents] max_lease)
DEFAULT_MAX_EXCLUSIVE = 20  # exclusive files one agent's plan may hold ([intents] max_exclusive)


def check_lease(lease: float) -> float:
    """`lease` when it is a sensible number of seconds; raises ValueError otherwise."""
    if not MIN_LEASE <= lease <= MAX_LEASE:
        raise ValueError(
            f"lease {lease:g} s: expected {MIN_LEASE:g} to {MAX_LEASE:g} seconds (one week)"
        )
    return lease
