"""The rows every reader of the view is given, drawn from the fold (`team.Team`; pure, no I/O).

Each row has a `type` and an `id`; a reader keeps the newest row of each (type, id):

    {"type": "session", "id", "session", "subagent", "client", "plan", "worktree",
     "path", "branch", "head", "state": working|blocked|stale|ended, "last", "tool",
     "files"}
    {"type": "plan", "id", "plan", "owner", "record", "seq", "session", "subagent",
     "worktree", "reads", "targets", "evidence", "intents", "stale", "trust", "last_check"}
    {"type": "block", "id", "ts", "plan", "session", "subagent", "tool", "files", "class",
     "lines", "reread", "held", "writers", "record", "changed_again"}
    {"type": "owner", "id", "agent", "address", "root", "keys", "puts", "requests",
     "decisions"}
    {"type": "executor", "id", "peer", "validations", "drifted", "last_moved": [{"key",
     "from", "to"}, ...], "recent": [{"ts", "owner", "keys", "outcome", "moved": [...]}, ...],
     "decisions", "authorized", "blocked", "replanned", "decided": [DECISION, ...],
     "last_drift": DECISION | null, "last_stall_ms"}
    DECISION = {"ts", "action", "outcome", "reason", "rounds", "stall_ms", "bytes",
     "replanned", "new_roots", "drift": [{"key", "from", "to", "owner", "from_seq",
     "to_seq"}, ...]}
    {"type": "overlap", "id": "overlap", "plans", "cells": [[i, j, [file, ...]], ...]}
    {"type": "status", "id": "status", "text", "plans", "stale", "blocked", "sessions",
     "states": {session: state}, "lines"}

A session is `ended` once the hook logged its `session_end` (and no call of it came after),
or every intent it published is ended (SessionEnd ends them), else `blocked` when its plan's last
check blocked, `stale` when a key its plan holds has a newer head than the version the plan
recorded (status facts aside: they only inform), else `working`.

An executor row is a peer that asked owners for heads (the gate's validation: the cluster's
executors, and the hook, which asks as its roster member): how many validations, how many
were shown a drift (a key whose head moved since the peer's previous look, `from` and `to`
the key's seqs), the keys of the last one shown a drift (`last_moved`), and the recent ones; and, from its own decision log, what it decided: how
many decisions, authorized, blocked and replanned, the recent ones (`decided`, oldest first),
the last one that found a drift (each key from the plan's id to the head's, `owner` the
writer of the head, the seqs when the owners' logs named the ids) and the last stall.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .team import PlanState, SessionState, Team

QUIET = (":status",)  # keys whose change only informs: never makes a plan stale


def row(team: Team, kind: str, rid: str) -> dict[str, Any] | None:
    """The row `kind` `rid` as it is now, or None when there is none."""
    if kind == "session" and rid in team.sessions:
        return session_row(team, rid)
    if kind == "plan" and rid in team.plans:
        return plan_row(team, team.plans[rid])
    if kind == "owner" and rid in team.owners:
        return owner_row(team, rid)
    if kind == "executor" and rid in team.executors:
        return executor_row(team, rid)
    if kind == "block":
        return next((b for b in team.blocks if b["id"] == rid), None)
    if kind == "overlap":
        return overlap_row(team)
    if kind == "status":
        return status_row(team)
    return None


def status_row(team: Team) -> dict[str, Any]:
    """The status row: counts and the status line's text (`fence ok · 3 plans · 1 stale`)."""
    live = {s: state(team, team.sessions[s]) for s in team.sessions}
    live = {s: v for s, v in live.items() if v != "ended"}
    stale = sum(1 for p in team.plans.values() if stale_keys(team, p.name))
    blocked = list(live.values()).count("blocked")
    plans = len(team.plans)
    parts = [
        "fence BLOCKED" if blocked else "fence ok",
        f"{plans} plan" + ("" if plans == 1 else "s"),
        f"{stale} stale",
    ]
    if blocked:
        parts.append(f"{blocked} blocked")
    return {
        "type": "status",
        "id": "status",
        "text": " · ".join(parts),
        "plans": plans,
        "stale": stale,
        "blocked": blocked,
        "sessions": len(live),
        "states": {team.sessions[s].session: v for s, v in live.items()},
        "lines": team.lines,
    }


def stale_keys(team: Team, name: str) -> list[str]:
    """The keys plan `name` holds at a version older than their head."""
    plan = team.plans.get(name)
    if plan is None:
        return []
    found = []
    for rid in plan.parents:
        put = team.puts.get(rid)
        if put is not None and not put.key.endswith(QUIET) and team.heads[put.key] != rid:
            found.append(put.key)
    return sorted(found)


def session_row(team: Team, sid: str) -> dict[str, Any]:
    session = team.sessions[sid]
    agent = worktree_agent(team, session)
    return {
        "type": "session",
        "id": sid,
        "session": session.session,
        "subagent": session.subagent,
        "client": session.client,
        "plan": session.plan,
        "worktree": agent,
        "path": team.roots.get(agent or "")
        or _plan_body(team, session.plan).get("worktree")
        or session.cwd
        or None,
        "branch": _fact(team, agent, "branch"),
        "head": _fact(team, agent, "head"),
        "state": state(team, session),
        "last": session.last,
        "tool": session.tool,
        "files": session.files,
    }


def plan_row(team: Team, plan: PlanState) -> dict[str, Any]:
    by_role: dict[str, list[str]] = {"read": [], "target": [], "evidence": []}
    for key, names in roles(team, plan).items():
        for role in names:
            if role in by_role:
                by_role[role].append(key)
    body = plan.body
    return {
        "type": "plan",
        "id": plan.name,
        "plan": plan.name,
        "owner": plan.owner,
        "record": plan.record,
        "seq": plan.seq,
        "session": body.get("session"),
        "subagent": body.get("agent"),
        "worktree": body.get("worktree"),
        "reads": sorted(by_role["read"]),
        "targets": sorted(by_role["target"]),
        "evidence": sorted(by_role["evidence"]),
        "intents": _intents_of(team, plan.name),
        "stale": stale_keys(team, plan.name),
        "trust": body.get("trust"),
        "last_check": plan.last_check,
    }


def owner_row(team: Team, agent: str) -> dict[str, Any]:
    owner = team.owners[agent]
    return {
        "type": "owner",
        "id": agent,
        "agent": agent,
        "address": owner.get("address"),
        "root": owner.get("root"),
        "keys": len(owner["keys"]),
        "puts": list(owner["puts"]),
        "requests": list(owner["requests"]),
        "decisions": list(owner["decisions"]),
    }


def executor_row(team: Team, peer: str) -> dict[str, Any]:
    found = team.executors[peer]
    decided = list(found["decided"])
    return {
        "type": "executor",
        "id": peer,
        "peer": peer,
        "validations": found["validations"],
        "drifted": found["drifted"],
        "last_moved": found["last_moved"],
        "recent": list(found["recent"]),
        "decisions": found["decisions"],
        "authorized": found["authorized"],
        "blocked": found["blocked"],
        "replanned": found["replanned"],
        "decided": decided,
        "last_drift": found["last_drift"],
        "last_stall_ms": decided[-1].get("stall_ms") if decided else None,
    }


def overlap_row(team: Team) -> dict[str, Any]:
    """Which plans target or read the same files: files compared by their path in the
    worktree (two worktrees of one repository meet at merge time)."""
    files: dict[str, set[str]] = {}
    for plan in team.plans.values():
        for key, names in roles(team, plan).items():
            rel = key.split(":file/", 1)[1] if ":file/" in key else None
            if rel is not None and {"read", "target"} & set(names):
                files.setdefault(plan.name, set()).add(rel)
    plans = sorted(files)
    cells = [
        [i, j, sorted(files[a] & files[b])]
        for i, a in enumerate(plans)
        for j, b in enumerate(plans)
        if i < j and files[a] & files[b]
    ]
    return {"type": "overlap", "id": "overlap", "plans": plans, "cells": cells}


def state(team: Team, session: SessionState) -> str:
    """working, blocked, stale or ended (see module doc)."""
    if session.ended or _ended(team, session):
        return "ended"
    plan = team.plans.get(session.plan)
    if plan is not None and plan.last_check and plan.last_check.get("exit") == 2:
        return "blocked"
    if plan is not None and stale_keys(team, plan.name):
        return "stale"
    return "working"


def roles(team: Team, plan: PlanState) -> dict[str, list[str]]:
    """The plan's keys and roles: from its body, else its parents' keys (role unknown)."""
    declaration = plan.body.get("declaration")
    if isinstance(declaration, dict):
        return {str(k): [str(r) for r in v] for k, v in declaration.items()}
    return {team.puts[p].key: ["read"] for p in plan.parents if p in team.puts}


def worktree_agent(team: Team, session: SessionState) -> str | None:
    """The workspace agent of the session's worktree: the one whose root is the plan's
    worktree (else the folder its `session_end` named), else the first agent of the plan's
    keys."""
    path = _plan_body(team, session.plan).get("worktree") or session.cwd
    for agent, root in team.roots.items():
        if root == path:
            return agent
    plan = team.plans.get(session.plan)
    keys = sorted(roles(team, plan)) if plan is not None else []
    agents = [k.split(":", 1)[0] for k in keys if ":" in k]
    return agents[0] if agents else None


def _ended(team: Team, session: SessionState) -> bool:
    mine = [
        team.bodies[rid]
        for rid in team.intents.values()
        if rid in team.bodies
        and team.bodies[rid].get("session") == session.session
        and team.bodies[rid].get("subagent") == session.subagent
    ]
    return bool(mine) and all(b.get("ended") for b in mine)


def _intents_of(team: Team, plan: str) -> list[dict[str, Any]]:
    found = []
    for rid in team.intents.values():
        body = team.bodies.get(rid)
        if body is not None and body.get("plan") == plan:
            found.append(
                {k: body[k] for k in ("file", "exclusive", "expires", "ended") if k in body}
            )
    return sorted(found, key=lambda i: str(i.get("file")))


def _fact(team: Team, agent: str | None, name: str) -> str | None:
    rid = team.heads.get(f"{agent}:{name}") if agent else None
    body = team.bodies.get(rid or "")
    value = body.get(name) if isinstance(body, dict) else None
    return value if isinstance(value, str) else None


def _plan_body(team: Team, name: str) -> dict[str, Any]:
    plan = team.plans.get(name)
    return plan.body if plan is not None else {}
