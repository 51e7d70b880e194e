"""The team as the owners' logs tell it: one fold of log lines into rows (pure, no I/O).

`Team.feed(line)` takes one JSON line of a cluster folder's owner logs (`logs/OWNER.jsonl`:
the owners' `put` lines, the `check` lines the hook appends, the owners' `request` lines (who asked
for what: an executor's validation is a `heads`), `workspace`, `listening` and the central
store's `decision`s) and `Team.body(id, body)` the body of a record the collector
fetched (plans, intents, branch and HEAD facts: a put line names a record, not its content).
Each marks the rows it changed; `Team.take()` returns those rows, as the typed events every
reader shows (the page, the TUI, `planfence view --json`), and `Team.rows()` all of them:

    {"type": "session", "id", "session", "subagent", "client", "plan", "worktree",
     "path", "branch", "head", "state": working|blocked|stale|ended, "last", "tool",
     "files"}
    {"type": "plan", "id", "plan", "owner", "record", "seq", "session", "subagent",
     "worktree", "reads", "targets", "evidence", "intents", "stale", "trust", "last_check"}
    {"type": "block", "id", "ts", "plan", "session", "subagent", "tool", "files", "class",
     "lines", "reread", "held", "writers", "record", "changed_again"}
    {"type": "owner", "id", "agent", "address", "root", "keys", "puts", "requests",
     "decisions"}
    {"type": "overlap", "id": "overlap", "plans", "cells": [[i, j, [file, ...]], ...]}
    {"type": "status", "id": "status", "text", "plans", "stale", "blocked", "sessions",
     "states": {session: state}, "lines"}

A session is `ended` once every intent it published is ended (SessionEnd ends them; a
session that never wrote has none, and stays as it was), else `blocked` when its plan's last
check blocked, `stale` when a key its plan holds has a newer head than the version the plan
recorded (status facts aside: they only inform), else `working`. Block lines carry a
`writers` list (who changed each drifted file, and the diff) when the hook wrote one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

PLAN_PREFIX = "plan/"
RECENT = 12  # puts and decisions kept per owner
BLOCKS = 200  # blocks kept (the newest)
QUIET = (":status",)  # keys whose change only informs: never makes a plan stale


@dataclass
class _Put:
    key: str
    owner: str
    seq: int
    parents: list[str]
    ts: float


@dataclass
class _Plan:
    name: str
    owner: str = ""
    record: str = ""
    seq: int = 0
    parents: list[str] = field(default_factory=list)
    body: dict[str, Any] = field(default_factory=dict)
    last_check: dict[str, Any] | None = None
    sessions: set[str] = field(default_factory=set)


@dataclass
class _Session:
    session: str
    subagent: str | None
    plan: str = ""
    client: str | None = None
    last: float = 0.0
    tool: str = ""
    files: list[str] = field(default_factory=list)


def session_id(session: str, subagent: str | None) -> str:
    """The row id of a session (or of one subagent of it)."""
    return f"{session}/{subagent}" if subagent else session


class Team:
    """The fold (see module doc). Feed it lines and bodies; take the rows it changed."""

    def __init__(self) -> None:
        self.puts: dict[str, _Put] = {}  # record id (hex) -> its put line
        self.heads: dict[str, str] = {}  # key -> id of its newest put
        self.bodies: dict[str, Any] = {}  # record id (hex) -> body, once fetched
        self.plans: dict[str, _Plan] = {}
        self.sessions: dict[str, _Session] = {}
        self.holders: dict[str, set[str]] = {}  # key -> plans whose record holds it
        self.intents: dict[str, str] = {}  # intent key -> its newest record id
        self.blocks: deque[dict[str, Any]] = deque(maxlen=BLOCKS)
        self.owners: dict[str, dict[str, Any]] = {}
        self.roots: dict[str, str] = {}  # workspace agent -> its worktree
        self.lines = 0
        self._dirty: dict[tuple[str, str], None] = {}

    # -- input ------------------------------------------------------------------------

    def feed(self, line: dict[str, Any]) -> None:
        """Fold one log line (any event; unknown ones only count)."""
        self.lines += 1
        event, agent = line.get("event"), str(line.get("agent") or "")
        owner = self._owner(agent) if agent else None
        if event == "put" and isinstance(line.get("id"), str) and isinstance(line.get("key"), str):
            self._put(line, agent)
        elif event == "check" and isinstance(line.get("plan"), str):
            self._check(line)
        elif event == "request" and owner is not None:
            owner["requests"].append(_pick(line, "ts", "peer", "op", "outcome", "ms"))
            self._mark("owner", agent)
        elif event == "decision" and owner is not None:
            owner["decisions"].append(_pick(line, "ts", "action", "outcome", "reason", "keys"))
            self._mark("owner", agent)
        elif event in ("listening", "workspace") and owner is not None:
            if event == "workspace" and isinstance(line.get("root"), str):
                self.roots[agent] = line["root"]
            owner.update(_pick(line, "address", "root"))
            self._mark("owner", agent)

    def body(self, rid: str, body: Any) -> None:
        """The body of record `rid` (hex), fetched from its owner."""
        put = self.puts.get(rid)
        if put is None or not isinstance(body, dict):
            return
        self.bodies[rid] = body
        if put.key.startswith(PLAN_PREFIX):
            plan = self.plans.get(put.key.removeprefix(PLAN_PREFIX))
            if plan is not None and plan.record == rid:
                plan.body = body
                self._plan_changed(plan)
                self._mark("overlap", "overlap")  # the roles are known now
        elif ":intent/" in put.key:
            self._intent_changed(body)
        elif put.key.endswith((":branch", ":head")):
            agent = put.key.split(":", 1)[0]
            for sid, row in self.sessions.items():
                if self._worktree_agent(row) == agent:
                    self._mark("session", sid)

    def wanted(self, rid: str) -> bool:
        """Whether the body of the record `rid` (just put) is worth fetching."""
        put = self.puts.get(rid)
        return put is not None and (
            put.key.startswith(PLAN_PREFIX)
            or ":intent/" in put.key
            or put.key.endswith((":branch", ":head"))
        )

    def _put(self, line: dict[str, Any], agent: str) -> None:
        rid, key = line["id"], line["key"]
        parents = [p for p in line.get("parents", []) if isinstance(p, str)]
        seq = line["seq"] if isinstance(line.get("seq"), int) else 0
        self.puts[rid] = _Put(key, agent, seq, parents, float(line.get("ts") or 0))
        self.heads[key] = rid
        owner = self._owner(agent)
        owner["keys"].add(key)
        owner["puts"].append({"ts": line.get("ts"), "key": key, "seq": seq, "id": rid})
        self._mark("owner", agent)
        if key.startswith(PLAN_PREFIX):
            plan = self._plan(key.removeprefix(PLAN_PREFIX))
            for old in self._held_keys(plan):
                self.holders.get(old, set()).discard(plan.name)
            plan.owner, plan.record, plan.seq, plan.parents = agent, rid, seq, parents
            for held in self._held_keys(plan):
                self.holders.setdefault(held, set()).add(plan.name)
            self._plan_changed(plan)
            self._mark("overlap", "overlap")
        elif ":intent/" in key:
            self.intents[key] = rid
        for name in self.holders.get(key, ()):  # a newer head of a key a plan holds
            self._plan_changed(self.plans[name])
        self._mark("status", "status")

    def _check(self, line: dict[str, Any]) -> None:
        plan = self._plan(line["plan"])
        plan.last_check = _pick(line, "ts", "class", "exit", "source", "session", "tool")
        session = line.get("session")
        if isinstance(session, str) and session:
            subagent = line.get("subagent") if isinstance(line.get("subagent"), str) else None
            sid = session_id(session, subagent)
            row = self.sessions.setdefault(sid, _Session(session, subagent))
            row.plan, row.tool = plan.name, str(line.get("tool") or "")
            row.last = float(line.get("ts") or row.last)
            row.files = [str(f) for f in line.get("files", [])][:20]
            row.client = line.get("client") or row.client
            plan.sessions.add(sid)
            self._mark("session", sid)
        if line.get("exit") == 2:
            block = {
                "type": "block",
                "id": f"{plan.name}@{line.get('ts')}",
                **_pick(line, "ts", "plan", "session", "subagent", "tool", "class", "record"),
                "files": list(line.get("files", [])),
                "lines": list(line.get("lines", [])),
                "reread": list(line.get("reread", [])),
                "held": line.get("held", ""),
                "writers": [w for w in line.get("writers", []) if isinstance(w, dict)],
                "changed_again": bool(line.get("changed_again")),
            }
            for old in [b for b in self.blocks if b["id"] == block["id"]]:
                self.blocks.remove(old)  # the same block written again, with more said
            self.blocks.append(block)
            self._dirty[("block", block["id"])] = None
        owner = self._owner(str(line.get("agent") or ""))
        owner["decisions"].append(
            _pick(line, "ts", "plan", "session", "tool", "class", "exit", "trust")
        )
        self._mark("owner", str(line.get("agent") or ""))
        self._plan_changed(plan)

    def _intent_changed(self, body: dict[str, Any]) -> None:
        plan = self.plans.get(str(body.get("plan")))
        if plan is not None:
            self._mark("plan", plan.name)
        session = body.get("session")
        if isinstance(session, str):
            sid = session_id(session, body.get("subagent"))
            row = self.sessions.setdefault(sid, _Session(session, body.get("subagent")))
            row.client = body.get("agent") or row.client
            if not row.plan and plan is not None:
                row.plan = plan.name
            self._mark("session", sid)
        self._mark("status", "status")

    # -- output -----------------------------------------------------------------------

    def take(self) -> list[dict[str, Any]]:
        """The rows changed since the last `take`, in the order they changed."""
        dirty, self._dirty = list(self._dirty), {}
        return [row for kind, rid in dirty if (row := self._row(kind, rid)) is not None]

    def rows(self) -> list[dict[str, Any]]:
        """Every row, as a reader that starts now needs them (owners, plans, sessions,
        blocks oldest first, the overlap and the status)."""
        keys = [("owner", a) for a in sorted(self.owners)]
        keys += [("plan", p) for p in sorted(self.plans)]
        keys += [("session", s) for s in sorted(self.sessions)]
        rows = [row for kind, rid in keys if (row := self._row(kind, rid)) is not None]
        return rows + list(self.blocks) + [self._overlap(), self.status()]

    def status(self) -> dict[str, Any]:
        """The status row: counts and the status line's text (`fence ok · 3 plans · 1 stale`)."""
        live = [s for s in self.sessions if self._state(self.sessions[s]) != "ended"]
        states = [self._state(self.sessions[s]) for s in live]
        stale = sum(1 for p in self.plans.values() if self.stale_keys(p.name))
        blocked = states.count("blocked")
        head = "fence BLOCKED" if blocked else "fence ok"
        plans = len(self.plans)
        parts = [head, f"{plans} plan" + ("" if plans == 1 else "s"), f"{stale} stale"]
        if blocked:
            parts.append(f"{blocked} blocked")
        return {
            "type": "status",
            "id": "status",
            "text": " · ".join(parts),
            "plans": len(self.plans),
            "stale": stale,
            "blocked": blocked,
            "sessions": len(live),
            "states": {self.sessions[s].session: self._state(self.sessions[s]) for s in live},
            "lines": self.lines,
        }

    def stale_keys(self, name: str) -> list[str]:
        """The keys plan `name` holds at a version older than their head."""
        plan = self.plans.get(name)
        if plan is None:
            return []
        found = []
        for rid in plan.parents:
            put = self.puts.get(rid)
            if put is not None and not put.key.endswith(QUIET) and self.heads[put.key] != rid:
                found.append(put.key)
        return sorted(found)

    def _row(self, kind: str, rid: str) -> dict[str, Any] | None:
        if kind == "session" and rid in self.sessions:
            return self._session_row(rid)
        if kind == "plan" and rid in self.plans:
            return self._plan_row(self.plans[rid])
        if kind == "owner" and rid in self.owners:
            return self._owner_row(rid)
        if kind == "block":
            return next((b for b in self.blocks if b["id"] == rid), None)
        if kind == "overlap":
            return self._overlap()
        if kind == "status":
            return self.status()
        return None

    def _session_row(self, sid: str) -> dict[str, Any]:
        row = self.sessions[sid]
        agent = self._worktree_agent(row)
        return {
            "type": "session",
            "id": sid,
            "session": row.session,
            "subagent": row.subagent,
            "client": row.client,
            "plan": row.plan,
            "worktree": agent,
            "path": self.roots.get(agent or "") or self._plan_body(row.plan).get("worktree"),
            "branch": self._fact(agent, "branch"),
            "head": self._fact(agent, "head"),
            "state": self._state(row),
            "last": row.last,
            "tool": row.tool,
            "files": row.files,
        }

    def _plan_row(self, plan: _Plan) -> dict[str, Any]:
        roles = self._roles(plan)
        by_role: dict[str, list[str]] = {"read": [], "target": [], "evidence": []}
        for key, names in roles.items():
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
            "intents": self._intents_of(plan.name),
            "stale": self.stale_keys(plan.name),
            "trust": body.get("trust"),
            "last_check": plan.last_check,
        }

    def _owner_row(self, agent: str) -> dict[str, Any]:
        owner = self.owners[agent]
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

    def _overlap(self) -> dict[str, Any]:
        """Which plans target or read the same files: files compared by their path in the
        worktree (two worktrees of one repository meet at merge time)."""
        files: dict[str, set[str]] = {}
        for plan in self.plans.values():
            for key, roles in self._roles(plan).items():
                rel = key.split(":file/", 1)[1] if ":file/" in key else None
                if rel is not None and {"read", "target"} & set(roles):
                    files.setdefault(plan.name, set()).add(rel)
        names = sorted(files)
        cells = [
            [i, j, sorted(files[a] & files[b])]
            for i, a in enumerate(names)
            for j, b in enumerate(names)
            if i < j and files[a] & files[b]
        ]
        return {"type": "overlap", "id": "overlap", "plans": names, "cells": cells}

    # -- helpers ----------------------------------------------------------------------

    def _state(self, row: _Session) -> str:
        if self._ended(row):
            return "ended"
        plan = self.plans.get(row.plan)
        if plan is not None and plan.last_check and plan.last_check.get("exit") == 2:
            return "blocked"
        if plan is not None and self.stale_keys(plan.name):
            return "stale"
        return "working"

    def _ended(self, row: _Session) -> bool:
        mine = [
            self.bodies[rid]
            for rid in self.intents.values()
            if rid in self.bodies
            and self.bodies[rid].get("session") == row.session
            and self.bodies[rid].get("subagent") == row.subagent
        ]
        return bool(mine) and all(b.get("ended") for b in mine)

    def _intents_of(self, plan: str) -> list[dict[str, Any]]:
        found = []
        for rid in self.intents.values():
            body = self.bodies.get(rid)
            if body is not None and body.get("plan") == plan:
                found.append(_pick(body, "file", "exclusive", "expires", "ended"))
        return sorted(found, key=lambda i: str(i.get("file")))

    def _roles(self, plan: _Plan) -> dict[str, list[str]]:
        """The plan's keys and roles: from its body, else its parents' keys (role unknown)."""
        declaration = plan.body.get("declaration")
        if isinstance(declaration, dict):
            return {str(k): [str(r) for r in v] for k, v in declaration.items()}
        return {self.puts[p].key: ["read"] for p in plan.parents if p in self.puts}

    def _held_keys(self, plan: _Plan) -> list[str]:
        return [self.puts[p].key for p in plan.parents if p in self.puts]

    def _worktree_agent(self, row: _Session) -> str | None:
        """The workspace agent of the session's worktree: from its files' keys, else from
        the plan's worktree path."""
        path = self._plan_body(row.plan).get("worktree")
        for agent, root in self.roots.items():
            if root == path:
                return agent
        plan = self.plans.get(row.plan)
        keys = sorted(self._roles(plan)) if plan is not None else []
        agents = [k.split(":", 1)[0] for k in keys if ":" in k]
        return agents[0] if agents else None

    def _fact(self, agent: str | None, fact: str) -> str | None:
        rid = self.heads.get(f"{agent}:{fact}") if agent else None
        body = self.bodies.get(rid or "")
        value = body.get(fact) if isinstance(body, dict) else None
        return value if isinstance(value, str) else None

    def _plan_body(self, name: str) -> dict[str, Any]:
        plan = self.plans.get(name)
        return plan.body if plan is not None else {}

    def _plan(self, name: str) -> _Plan:
        return self.plans.setdefault(name, _Plan(name))

    def _plan_changed(self, plan: _Plan) -> None:
        self._mark("plan", plan.name)
        for sid in plan.sessions:
            self._mark("session", sid)
        session = plan.body.get("session")
        if isinstance(session, str):
            sid = session_id(session, plan.body.get("agent"))
            row = self.sessions.setdefault(sid, _Session(session, plan.body.get("agent")))
            row.plan = row.plan or plan.name
            plan.sessions.add(sid)
            self._mark("session", sid)
        self._mark("status", "status")

    def _owner(self, agent: str) -> dict[str, Any]:
        return self.owners.setdefault(
            agent,
            {
                "keys": set(),
                "puts": deque(maxlen=RECENT),
                "requests": deque(maxlen=RECENT),
                "decisions": deque(maxlen=RECENT),
            },
        )

    def _mark(self, kind: str, rid: str) -> None:
        self._dirty.pop((kind, rid), None)  # moved to the end: rows come out in change order
        self._dirty[(kind, rid)] = None


def _pick(line: dict[str, Any], *names: str) -> dict[str, Any]:
    return {name: line[name] for name in names if name in line}
