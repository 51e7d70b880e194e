"""Asking the team's workspace owners for intents, and publishing a plan's own (blocking I/O).

`collect` asks every workspace owner of the cluster at once (one `intents` request each,
under one deadline) for the live intents on some relative paths; an owner that does not
answer in time, or answers badly, is listed as unreachable, never taken for "no intents".
What that means depends on who asks (the rule, stated once):
- A plan's first write (the hook): the plan's own drift check already passed, so the write
  goes ahead, and the model is told which owners could not be asked; nothing is noted, so the
  next write asks again.
- A plan asking for exclusivity (`workspace trust --exclusive F`): refused. Exclusivity is
  only granted when every owner answered and no other plan has a live intent on F, before
  its intent is written and again after (intentgrant.py: the second look).
- A commit (`gitgate`): refused, with how to bypass it consciously (`git commit --no-verify`).

`announce` is the hook's step before a plan's first write to a file; `session_end` ends
a session's intents (SessionEnd). Which files a plan already announced is noted per session
in the cluster folder (`run/intents-*.json`), so later writes of the same files cost nothing
until the intent's lease runs out (the next write then renews it).
"""

from __future__ import annotations

import json
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...core.answers import verified_records, verifier
from ...core.errors import ConfigError, PlanfenceError, RequestError
from ...core.timeouts import DEFAULT_TIMEOUT
from ...net.syncclient import SyncSessions
from ..model.facts import file_key, file_of, plan_key
from ..model.intents import (
    DEFAULT_LEASE,
    DEFAULT_MAX_AGENT_LEASE,
    DEFAULT_MAX_EXCLUSIVE,
    MIN_LEASE,
    Intent,
    check_lease,
    client_payload,
    first_holder,
    from_body,
    held_message,
    is_intent,
    notice,
    others,
)
from ..place.config import NoCluster, find_cluster, workspaces
from .intentnotes import notes_path, save_notes, slot

if TYPE_CHECKING:
    from ...cluster.folder import ClusterDir
    from ...core.identity import Identity
    from ...core.roster import Roster
    from ..model.payload import ToolCall

ALLOW, BLOCK = 0, 2


@dataclass(slots=True)
class Collected:
    """The owners' answers: live intents, each owner's repository, who could not answer."""

    intents: list[Intent] = field(default_factory=list)
    repos: dict[str, str] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)


def collect(
    sessions: SyncSessions, roster: Roster, owners: list[str], rels: list[str], deadline: float
) -> Collected:
    """Ask each of `owners` for its live intents on `rels`, concurrently, by `deadline`."""
    found = Collected()
    if not rels:
        return found
    outcomes = sessions.round({o: ("intents", {"files": rels}) for o in owners}, deadline)
    verify = verifier(roster)
    for owner in owners:
        outcome = outcomes.get(owner)
        if not isinstance(outcome, dict) or not isinstance(outcome.get("repo"), str):
            found.unreachable[owner] = str(outcome) if outcome is not None else "no answer in time"
            continue
        found.repos[owner] = outcome["repo"]
        for record in verified_records(outcome.get("intents"), verify, bad="drop"):
            agent, _, fact = record.key.partition(":")
            intent = from_body(owner, record.key, record.body, record.id)
            if agent == owner and is_intent(fact) and intent is not None:
                found.intents.append(intent)
    return found


def publish(sessions: SyncSessions, owner: str, args: dict[str, Any], deadline: float) -> float:
    """Publish intents at `owner` (`intend`); returns their expiry. Raises RequestError
    (`held`: another plan holds one of the files) or PlanfenceError."""
    answer = sessions.request(owner, "intend", args, deadline)
    expires = answer.get("expires")
    if not isinstance(expires, int | float):
        raise PlanfenceError(f"owner {owner!r} answered intend without an expiry")
    return float(expires)


def lease_of(cdir: ClusterDir) -> float:
    """The cluster's intent lease: `[intents] lease` in cluster.toml, else DEFAULT_LEASE.
    Raises ConfigError when it is malformed."""
    table = _intents_table(cdir)
    lease = table.get("lease", DEFAULT_LEASE) if isinstance(table, dict) else None
    try:
        if isinstance(lease, bool) or not isinstance(lease, int | float):
            raise ValueError("a number of seconds")
        return check_lease(float(lease))
    except ValueError as exc:
        raise ConfigError(f"{cdir.roster_path}: [intents] lease: {exc}") from None


def _intents_table(cdir: ClusterDir) -> Any:
    """The `[intents]` value of the cluster's cluster.toml as written ({} when there is
    none; the callers judge one that is not a table). Raises ConfigError when the file
    cannot be read."""
    try:
        return tomllib.loads(cdir.roster_path.read_text()).get("intents", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{cdir.roster_path}: {exc}") from None


def agent_limits(cdir: ClusterDir) -> tuple[float, int]:
    """What the person allows an agent's plan: its longest lease (`[intents] max_lease` in
    cluster.toml, seconds, default DEFAULT_MAX_AGENT_LEASE) and how many files it may hold
    exclusively (`[intents] max_exclusive`, default DEFAULT_MAX_EXCLUSIVE). Raises
    ConfigError when either is malformed."""
    table = _intents_table(cdir)
    table = table if isinstance(table, dict) else {}
    lease = table.get("max_lease", DEFAULT_MAX_AGENT_LEASE)
    count = table.get("max_exclusive", DEFAULT_MAX_EXCLUSIVE)
    try:
        if isinstance(lease, bool) or not isinstance(lease, int | float):
            raise ValueError("max_lease: a number of seconds")
        check_lease(float(lease))
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError("max_exclusive: a whole number of files")
    except ValueError as exc:
        raise ConfigError(f"{cdir.roster_path}: [intents] {exc}") from None
    return float(lease), count


def announce(
    call: ToolCall,
    cdir: ClusterDir,
    plan: str,
    roster: Roster,
    identity: Identity,
    plan_id: bytes | None,
    deadline: float,
    todo: list[tuple[str, str, str]],
    spaces: dict[str, Path],
) -> tuple[int, str, str]:
    """The hook's intents step for the files `todo` ((owner, relative path, as shown)) the
    plan has not announced yet (`spaces`: the cluster's worktrees, `config.workspaces`), after the drift check allowed the write: (exit code, stderr,
    stdout). Every workspace owner is asked for live intents; another plan's exclusive
    intent blocks (exit 2); other plans' intents, and owners that could not be asked, are
    told to the model on stdout (the agents' PreToolUse JSON, `additionalContext`), and the
    plan's own intents are published and noted."""
    mine = slot(plan, call.agent_id)
    now = time.time()
    blocked = f"PlanFence blocked {call.describe()}{call.subagent()}"
    sessions = SyncSessions(roster, identity)
    try:
        got = collect(sessions, roster, list(spaces), sorted({r for _, r, _ in todo}), deadline)
        texts: list[str] = []
        held = _held(got, plan, todo, blocked, texts)
        if held is not None:
            return BLOCK, held, ""
        notes, groups = _to_publish(got, plan, todo, lease_of(cdir), now)
        refused = _publish(sessions, call, plan, plan_id, groups, deadline, notes, texts)
        if refused is not None:
            return BLOCK, f"{blocked}: {refused}. Do not change it now.", ""
        if got.unreachable:
            notes = {}  # ask again at the next write: an owner's intents are unknown
        save_notes(cdir.root, call.session, mine, notes)
    finally:
        sessions.close()
    text = "\n".join(t for t in dict.fromkeys(texts) if t)
    return ALLOW, "", context_output(text) if text else ""


def _held(
    got: Collected, plan: str, todo: list[tuple[str, str, str]], blocked: str, texts: list[str]
) -> str | None:
    """The block message when another plan holds one of the files `todo` exclusively (this
    plan's own exclusive intent kept when it comes first, `intentgrant`), else None; appends
    the notice of other plans' intents per file to `texts`."""
    for owner, rel, shown in todo:
        repo = got.repos.get(owner, "")
        theirs = others(got.intents, plan, repo, rel)
        holders = [i for i in theirs if i.exclusive]
        own = [i for i in got.intents if i.plan == plan and i.repo == repo and i.file == rel]
        own = [i for i in own if i.exclusive]  # kept when it comes first (intentgrant)
        if holders and first_holder(holders + own).plan != plan:
            return held_message(blocked, shown, holders)
        texts.append(notice(shown, theirs, got.unreachable))
    return None


def _to_publish(
    got: Collected, plan: str, todo: list[tuple[str, str, str]], lease: float, now: float
) -> tuple[dict[str, float], dict[tuple[str, bool, float], list[str]]]:
    """The notes of files this plan's hook announced already (file key -> expiry), and the
    files to publish, grouped by (owner, exclusive, lease)."""
    notes: dict[str, float] = {}
    groups: dict[tuple[str, bool, float], list[str]] = {}  # (owner, exclusive, lease)
    for owner, rel, _ in todo:
        own = [i for i in got.intents if i.plan == plan and i.owner == owner and i.file == rel]
        if any(i.agent for i in own):  # announced already by this plan's hook
            notes[file_key(owner, rel)] = min(i.expires for i in own)
        elif own:  # announced at `trust`: named again with the agent, same terms
            left = max(MIN_LEASE, min(i.expires for i in own) - now)
            groups.setdefault((owner, any(i.exclusive for i in own), left), []).append(rel)
        elif owner in got.repos:
            groups.setdefault((owner, False, lease), []).append(rel)
    return notes, groups


def _publish(
    sessions: SyncSessions,
    call: ToolCall,
    plan: str,
    plan_id: bytes | None,
    groups: dict[tuple[str, bool, float], list[str]],
    deadline: float,
    notes: dict[str, float],
    texts: list[str],
) -> str | None:
    """Publish each group of this plan's intents; returns an owner's refusal (`held`: another
    plan holds the file), else None. Published files go into `notes`; a failure to publish is
    told in `texts`."""
    for (owner, exclusive, span), rels in groups.items():
        args = client_payload(
            plan=plan,
            files=rels,
            session=call.session or None,
            agent=call.agent,
            subagent=call.agent_id,
            exclusive=exclusive,
            lease=span,
            plan_id=plan_id,
        )
        try:
            expires = publish(sessions, owner, args, deadline)
        except RequestError as exc:
            if exc.code == "held":
                return exc.message
            texts.append(f"PlanFence: could not publish this plan's intent ({exc}).")
            continue
        except PlanfenceError as exc:
            texts.append(f"PlanFence: could not publish this plan's intent ({exc}).")
            continue
        notes.update({file_key(owner, r): expires for r in rels})
    return None


def context_output(text: str) -> str:
    """The PreToolUse JSON both agents read on exit 0: `text` added to the model's context
    (Claude Code and Codex: hookSpecificOutput.additionalContext); it decides nothing."""
    return json.dumps(
        {"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": text}}
    )


def session_end(call: ToolCall, explicit: Path | None, timeout: float) -> tuple[int, str]:
    """SessionEnd: end every live intent of the session at every workspace owner, asking
    them for at most `timeout` s (the hook gives Codex's less than its limit), and forget its
    notes. Never blocks (exit 0); what failed is said on stderr, and the lease ends the
    intents left."""
    if not call.session:
        return ALLOW, ""
    try:
        cdir = find_cluster(explicit, Path(call.cwd))
    except NoCluster:
        return ALLOW, ""  # no cluster serves the folder: no intents to end
    except PlanfenceError as exc:
        return (
            ALLOW,
            f"PlanFence could not end this session's intents ({exc}); their lease ends them",
        )
    try:
        roster = cdir.roster()
        me = roster.owner_of(plan_key("x")) or roster.agents[0].name
        owners = list(workspaces(cdir))
        sessions = SyncSessions(roster, cdir.identity(me))
        try:
            outcomes = sessions.round(
                {o: ("unintend", {"session": call.session}) for o in owners},
                time.monotonic() + timeout,
            )
        finally:
            sessions.close()

        notes_path(cdir.root, call.session).unlink(missing_ok=True)
    except (PlanfenceError, OSError, ValueError) as exc:
        return (
            ALLOW,
            f"PlanFence could not end this session's intents ({exc}); their lease ends them",
        )
    failed = sorted(o for o in owners if not isinstance(outcomes.get(o), dict))
    if failed:
        return ALLOW, (
            f"PlanFence could not end this session's intents at {', '.join(failed)}; "
            f"their lease ends them"
        )
    return ALLOW, ""


def before_trust(
    cdir: ClusterDir,
    roster: Roster,
    plan: str,
    targets: list[str],
    exclusive: list[str],
    addresses: dict[str, tuple[str, int]] | None = None,
) -> Collected:
    """Ask every workspace owner for live intents on the plan's target file keys. Raises
    ConfigError, before anything is written, when an `exclusive` key cannot be granted:
    an owner did not answer, or another plan has a live intent on that file."""
    owners = list(workspaces(cdir))
    me = roster.owner_of(plan_key(plan)) or roster.agents[0].name
    sessions = SyncSessions(roster, cdir.identity(me), addresses)
    rels = sorted({r for k in targets if (r := file_of(k)) is not None})
    try:
        got = collect(sessions, roster, owners, rels, time.monotonic() + DEFAULT_TIMEOUT)
    finally:
        sessions.close()
    for key in exclusive:
        owner, rel = key.partition(":")[0], file_of(key) or ""
        if got.unreachable:
            why = "; ".join(f"{o}: {w}" for o, w in sorted(got.unreachable.items()))
            raise ConfigError(
                f"--exclusive {owner}:{rel}: cannot grant exclusivity while an owner of the "
                f"team cannot be asked for its intents ({why})"
            )
        theirs = others(got.intents, plan, got.repos.get(owner, ""), rel)
        if theirs:
            raise ConfigError(
                f"--exclusive {owner}:{rel}: {theirs[0].who()} already intends it"
                f"{' exclusively' if theirs[0].exclusive else ''} (until {theirs[0].until()}); "
                f"exclusivity needs a file no other live plan intends"
            )
    return got
