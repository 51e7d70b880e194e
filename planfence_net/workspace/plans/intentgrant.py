"""Granting a trusted plan its intents: publish them, then the second look (blocking I/O).

`workspace trust` publishes its plan's intents after the plan record (`publish_trust`).
Each owner checks exclusivity only within its own worktree, so an exclusive intent is not
granted when it is written: `second_look` then asks every owner again for the live intents
on those files, and the plan keeps a file only when no other plan has a plain intent on it
and its own exclusive intent comes first in the order every plan computes alike
(`intents.first_holder`); otherwise it withdraws what it lost (`unintend`) and is refused.
An owner that cannot be asked refuses the exclusivity (fail closed). Two plans asking for
one file in two worktrees in the same instant thus never both hold it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...core.errors import ConfigError, PlanfenceError, RequestError
from ...core.timeouts import DEFAULT_TIMEOUT
from ...net.syncclient import SyncSessions
from ..model.facts import file_of, plan_key
from ..model.intents import client_payload, first_holder, notice, others, until_text
from ..place.config import workspaces
from .intentclient import Collected, collect, publish

if TYPE_CHECKING:
    from ...cluster.folder import ClusterDir
    from ...core.roster import Roster


@dataclass(frozen=True)
class TrustIntents:
    """What a trusted plan publishes intents for: its `targets` (file keys), the `exclusive`
    ones among them, for `session`/`subagent` (None: no session's), for `lease` seconds."""

    plan: str
    plan_id: bytes
    targets: list[str]
    exclusive: list[str]
    session: str | None
    subagent: str | None
    lease: float


def plan_sessions(
    cdir: ClusterDir,
    roster: Roster,
    plan: str,
    addresses: dict[str, tuple[str, int]] | None = None,
) -> SyncSessions:
    """Blocking sessions to the owners, as the owner of `plan`'s record (the caller closes)."""
    me = roster.owner_of(plan_key(plan)) or roster.agents[0].name
    return SyncSessions(roster, cdir.identity(me), addresses)


def after_trust(
    cdir: ClusterDir,
    roster: Roster,
    intents: TrustIntents,
    got: Collected,
    addresses: dict[str, tuple[str, int]] | None = None,
) -> list[str]:
    """Publish the trusted plan's intents on its targets (exclusive where asked), then take
    the second look at its exclusive ones, over one set of sessions; returns the lines to
    print: other plans' intents on them, and what was published. Raises ConfigError when
    exclusivity is refused (an owner refused it, or the second look did: the lost intents
    are withdrawn)."""
    sessions = plan_sessions(cdir, roster, intents.plan, addresses)
    try:
        lines, held = publish_trust(intents, got, sessions)
        if held:
            second_look(cdir, roster, intents.plan, held, sessions)
    finally:
        sessions.close()
    return lines


def publish_trust(
    intents: TrustIntents, got: Collected, sessions: SyncSessions
) -> tuple[list[str], list[tuple[str, str]]]:
    """The first step of `after_trust`: publish the intents; returns the lines to print and
    the (owner, relative path) of the exclusive intents published, which are not granted
    until `second_look` kept them. Raises ConfigError when an owner refuses an intent."""
    plan, exclusive = intents.plan, intents.exclusive
    lines: list[str] = []
    held: list[tuple[str, str]] = []
    groups: dict[tuple[str, bool], list[str]] = {}
    for key in dict.fromkeys(intents.targets):
        owner, rel = key.partition(":")[0], file_of(key)
        if rel is None:
            continue
        theirs = others(got.intents, plan, got.repos.get(owner, ""), rel)
        holders = [i for i in theirs if i.exclusive]
        if holders:
            lines.append(
                f"{owner}:{rel} is held exclusively by {holders[0].who()} until "
                f"{holders[0].until()}: writes to it are blocked until then"
            )
            continue
        text = notice(f"{owner}:{rel}", theirs, {})
        if text:
            lines.append(text.removeprefix("PlanFence: "))
        groups.setdefault((owner, key in exclusive), []).append(rel)
    deadline = time.monotonic() + DEFAULT_TIMEOUT
    for (owner, excl), rels in groups.items():
        args = client_payload(
            plan=plan,
            files=rels,
            session=intents.session,
            agent=None,
            subagent=intents.subagent,
            exclusive=excl,
            lease=intents.lease,
            plan_id=intents.plan_id,
        )
        try:
            expires = publish(sessions, owner, args, deadline)
        except RequestError as exc:
            raise ConfigError(f"trusted {plan}, but its intents were refused: {exc}") from None
        except PlanfenceError as exc:  # the hook's first write publishes them again
            lines.append(f"could not publish intents at {owner} ({exc})")
            if excl:  # the second look refuses them (and withdraws what was written)
                held.extend((owner, r) for r in rels)
            continue
        if excl:
            held.extend((owner, r) for r in rels)
        until = until_text(expires, time.time())
        lines.append(
            f"intent{'s' if len(rels) > 1 else ''} published"
            f"{' (exclusive)' if excl else ''}: "
            f"{', '.join(f'{owner}:{r}' for r in rels)} until {until}"
        )
    return lines, held


def second_look(
    cdir: ClusterDir,
    roster: Roster,
    plan: str,
    held: list[tuple[str, str]],
    sessions: SyncSessions,
) -> None:
    """After `plan`'s exclusive intents on `held` ((owner, relative path)) were written, ask
    every workspace owner again for the live intents on those files. The plan keeps each
    file only when every owner answered, its own intent there is live, no other plan has a
    plain intent on it, and among the plans' exclusive ones on it its own comes first
    (`intents.first_holder`: earliest `since`, then smallest record id; two plans racing see
    the same records, so exactly one keeps it). Otherwise the plan withdraws the intents it
    lost (`unintend`) and ConfigError names the holder. Two plans that wrote their exclusive
    intents in the same instant in two worktrees thus never both keep the file."""
    deadline = time.monotonic() + DEFAULT_TIMEOUT
    rels = sorted({rel for _, rel in held})
    got = collect(sessions, roster, list(workspaces(cdir)), rels, deadline)
    lost = {(o, r): why for o, r in held if (why := _refusal(got, plan, o, r))}
    if not lost:
        return
    undone: list[str] = []
    for owner in sorted({o for o, _ in lost}):
        files = sorted(r for o, r in lost if o == owner)
        args = {"plans": [plan], "files": files}
        try:
            sessions.request(owner, "unintend", args, time.monotonic() + DEFAULT_TIMEOUT)
        except PlanfenceError as exc:
            undone.append(f"could not withdraw it at {owner} ({exc}): its lease ends it")
    (owner, rel), why = sorted(lost.items())[0]
    more = f" (and {len(lost) - 1} more)" if len(lost) > 1 else ""
    raise ConfigError(
        f"trusted {plan}, but --exclusive {owner}:{rel}{more} was refused: {why}; "
        + ("; ".join(undone) if undone else "this plan's intent there was withdrawn")
    )


def _refusal(got: Collected, plan: str, owner: str, rel: str) -> str:
    """Why the second look refuses `plan` the file `rel` of `owner` ("" when it keeps it)."""
    if got.unreachable:
        why = "; ".join(f"{o}: {w}" for o, w in sorted(got.unreachable.items()))
        return f"an owner of the team cannot be asked for its intents ({why})"
    mine = [i for i in got.intents if i.plan == plan and i.owner == owner and i.file == rel]
    mine = [i for i in mine if i.exclusive]
    if not mine:
        return "its exclusive intent is no longer live"
    theirs = others(got.intents, plan, got.repos.get(owner, ""), rel)
    plain = [i for i in theirs if not i.exclusive]
    if plain:
        return f"{plain[0].who()} intends it too (until {plain[0].until()})"
    first = first_holder(theirs + mine)
    if first.plan != plan:
        return f"{first.who()} holds it exclusively (until {first.until()})"
    return ""
