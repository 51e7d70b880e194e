"""The team as the owners' logs tell it: one fold of log lines into rows (pure, no I/O).

`Team.feed(line)` takes one JSON line of a cluster folder's owner logs (`logs/OWNER.jsonl`:
the owners' `put` lines, the `check` and `session_end` lines the hook appends, the owners' `request` lines (who asked
for what: an executor's validation is a `heads`), `workspace`, `listening` and the central
store's `decision`s) or of its executors' decision logs (`logs/executors/NAME.jsonl`: one
`gate` line per decision, `executor.decisionlog`) and `Team.body(id, body)` the body of a record the collector
fetched (plans, intents, branch and HEAD facts: a put line names a record, not its content).
Each marks the rows it changed; `Team.take()` returns those rows, as the typed events every
reader shows (the page, the TUI, `planfence view --json`), and `Team.rows()` all of them
(their shapes and the states of a session: `rows`). Block lines carry a `writers` list (who
changed each drifted file, and the diff) when the hook wrote one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..executor.decisionlog import EVENT as GATE
from . import rows

PLAN_PREFIX = "plan/"
RECENT = 12  # puts and decisions kept per owner
BLOCKS = 200  # blocks kept (the newest)


@dataclass
class Put:
    """What a `put` line says of one record: its key, owner, seq, parents (hex) and time."""

    key: str
    owner: str
    seq: int
    parents: list[str]
    ts: float


@dataclass
class PlanState:
    """A plan as the logs tell it: its newest record, that record's body once fetched, its
    last check and the sessions seen working under it."""

    name: str
    owner: str = ""
    record: str = ""
    seq: int = 0
    parents: list[str] = field(default_factory=list)
    body: dict[str, Any] = field(default_factory=dict)
    last_check: dict[str, Any] | None = None
    sessions: set[str] = field(default_factory=set)


@dataclass
class SessionState:
    """A session (or one subagent of it): its plan, client, last call and that call's files;
    `ended` once its `session_end` line came (and no call after it), `cwd` that line's
    folder."""

    session: str
    subagent: str | None
    plan: str = ""
    client: str | None = None
    last: float = 0.0
    tool: str = ""
    files: list[str] = field(default_factory=list)
    ended: bool = False
    cwd: str = ""


def session_id(session: str, subagent: str | None) -> str:
    """The row id of a session (or of one subagent of it)."""
    return f"{session}/{subagent}" if subagent else session


class Team:
    """The fold (see module doc). Feed it lines and bodies; take the rows it changed."""

    def __init__(self) -> None:
        self.puts: dict[str, Put] = {}  # record id (hex) -> its put line
        self.heads: dict[str, str] = {}  # key -> id of its newest put
        self.bodies: dict[str, Any] = {}  # record id (hex) -> body, once fetched
        self.plans: dict[str, PlanState] = {}
        self.sessions: dict[str, SessionState] = {}
        self.holders: dict[str, set[str]] = {}  # key -> plans whose record holds it
        self.intents: dict[str, str] = {}  # intent key -> its newest record id
        self.blocks: deque[dict[str, Any]] = deque(maxlen=BLOCKS)
        self.owners: dict[str, dict[str, Any]] = {}
        self.roots: dict[str, str] = {}  # workspace agent -> its worktree
        self.executors: dict[str, dict[str, Any]] = {}  # peer -> `_validation`s, `_gate`s
        self._looked: dict[tuple[str, str], str] = {}  # (peer, key) -> head at its last look
        self.lines = 0
        self._dirty: dict[tuple[str, str], None] = {}

    # -- input ------------------------------------------------------------------------

    def feed(self, line: dict[str, Any]) -> None:
        """Fold one log line (any event; unknown ones only count)."""
        self.lines += 1
        event, agent = line.get("event"), str(line.get("agent") or "")
        if event == GATE:  # an executor's decision: its agent is no owner
            if agent:
                self._gate(line, agent)
            return
        owner = self._owner(agent) if agent else None
        if event == "put" and isinstance(line.get("id"), str) and isinstance(line.get("key"), str):
            self._put(line, agent)
        elif event == "check" and isinstance(line.get("plan"), str):
            self._check(line)
        elif event == "session_end" and isinstance(line.get("session"), str):
            self._session_end(line)
        elif event == "request" and owner is not None:
            owner["requests"].append(_pick(line, "ts", "peer", "op", "outcome", "latency_ms"))
            self._mark("owner", agent)
            if line.get("op") == "heads" and isinstance(line.get("peer"), str):
                self._validation(line, agent)
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
                if rows.worktree_agent(self, row) == agent:
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
        self.puts[rid] = Put(key, agent, seq, parents, float(line.get("ts") or 0))
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
            row = self.sessions.setdefault(sid, SessionState(session, subagent))
            row.plan, row.tool = plan.name, str(line.get("tool") or "")
            row.last = float(line.get("ts") or row.last)
            row.files = [str(f) for f in line.get("files", [])][:20]
            row.client = line.get("client") or row.client
            row.ended = False  # a call after its end: the session was resumed
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

    def _validation(self, line: dict[str, Any], owner: str) -> None:
        """A `heads` request of `peer` at `owner`: an executor's validation (the gate asks
        each owner for the heads of the plan's keys). Kept with the keys whose head moved
        since the peer's previous look at them (their put lines came between the two, in the
        owner's own log): the drift the executor was shown, as the owners' logs say it; what
        it then decided (and whether it replanned) is in its own decision log (`_gate`)."""
        peer = line["peer"]
        keys = [k for k in line.get("keys", []) if isinstance(k, str)][:64]
        moved = []
        for key in keys:
            head, before = self.heads.get(key), self._looked.get((peer, key))
            if head is not None and before is not None and head != before:
                moved.append({"key": key, "from": self.puts[before].seq, "to": self.puts[head].seq})
            if head is not None:
                self._looked[(peer, key)] = head
        row = self._executor(peer)
        row["validations"] += 1
        row["drifted"] += bool(moved)
        if moved:  # kept past the recent window: a quiet stretch does not hide the last one
            row["last_moved"] = moved
        row["recent"].append(
            {"ts": line.get("ts"), "owner": owner, "keys": len(keys), "outcome": line.get("outcome"), "moved": moved}
        )  # fmt: skip
        self._mark("executor", peer)

    def _gate(self, line: dict[str, Any], executor: str) -> None:
        """A `gate` line of `executor`'s decision log: what it decided (authorized or
        blocked, and why), the drift it found (each key from the plan's version to the head,
        by the key's owner, with both seqs when the owners' put lines named the ids), whether
        it replanned and onto which plan ids, its rounds, stall and bytes."""
        row = self._executor(executor)
        outcome = line.get("outcome")
        drift = [self._drifted(d) for d in _list(line.get("drift")) if isinstance(d, dict)][:64]
        new_roots = [r for r in _list(line.get("new_roots")) if isinstance(r, str)][:16]
        decision = {
            **_pick(line, "ts", "action", "outcome", "reason"),
            **{k: v for k in ("rounds", "stall_ms", "bytes") if _number(v := line.get(k))},
            "replanned": line.get("replanned") is True,
            "new_roots": new_roots,
            "drift": drift,
        }
        row["decisions"] += 1
        row["authorized"] += outcome == "authorized"
        row["blocked"] += outcome == "blocked"
        row["replanned"] += decision["replanned"]
        row["decided"].append(decision)
        if drift:
            row["last_drift"] = decision
        self._mark("executor", executor)

    def _drifted(self, d: dict[str, Any]) -> dict[str, Any]:
        """One drifted key of a `gate` line, with the seqs of its two ids when known and its
        writer: the line's `owner`, else the agent whose put line wrote the new head."""
        old, new = self.puts.get(str(d.get("from"))), self.puts.get(str(d.get("to")))
        return {
            **_pick(d, "key", "from", "to"),
            "owner": d.get("owner") or (new.owner if new is not None else None),
            "from_seq": old.seq if old is not None else None,
            "to_seq": new.seq if new is not None else None,
        }

    def _executor(self, peer: str) -> dict[str, Any]:
        return self.executors.setdefault(
            peer,
            {
                "validations": 0,
                "drifted": 0,
                "last_moved": [],
                "recent": deque(maxlen=RECENT),
                "decisions": 0,
                "authorized": 0,
                "blocked": 0,
                "replanned": 0,
                "decided": deque(maxlen=RECENT),
                "last_drift": None,
            },
        )

    def _session_end(self, line: dict[str, Any]) -> None:
        """The session of a `session_end` line ended, with every subagent of it (a session
        that only read has no row from a check: it gets one here)."""
        session = line["session"]
        if not session:
            return
        self.sessions.setdefault(session, SessionState(session, None))
        for sid, row in self.sessions.items():
            if row.session == session:
                row.ended = True
                row.client = row.client or line.get("client") or None
                row.cwd = str(line.get("worktree") or row.cwd)
                row.last = float(line.get("ts") or row.last)
                self._mark("session", sid)
        self._mark("status", "status")

    def _intent_changed(self, body: dict[str, Any]) -> None:
        plan = self.plans.get(str(body.get("plan")))
        if plan is not None:
            self._mark("plan", plan.name)
        session = body.get("session")
        if isinstance(session, str):
            sid = session_id(session, body.get("subagent"))
            row = self.sessions.setdefault(sid, SessionState(session, body.get("subagent")))
            row.client = body.get("agent") or row.client
            if not row.plan and plan is not None:
                row.plan = plan.name
            self._mark("session", sid)
        self._mark("status", "status")

    # -- output -----------------------------------------------------------------------

    def take(self) -> list[dict[str, Any]]:
        """The rows changed since the last `take`, in the order they changed."""
        dirty, self._dirty = list(self._dirty), {}
        return [row for kind, rid in dirty if (row := rows.row(self, kind, rid)) is not None]

    def rows(self) -> list[dict[str, Any]]:
        """Every row, as a reader that starts now needs them (owners, plans, sessions,
        executors, blocks oldest first, the overlap and the status)."""
        keys = [("owner", a) for a in sorted(self.owners)]
        keys += [("plan", p) for p in sorted(self.plans)]
        keys += [("session", s) for s in sorted(self.sessions)]
        keys += [("executor", p) for p in sorted(self.executors)]
        found = [row for kind, rid in keys if (row := rows.row(self, kind, rid)) is not None]
        return found + list(self.blocks) + [rows.overlap_row(self), self.status()]

    def status(self) -> dict[str, Any]:
        """The status row (see `rows.status_row`)."""
        return rows.status_row(self)

    def stale_keys(self, name: str) -> list[str]:
        """The keys plan `name` holds at a version older than their head."""
        return rows.stale_keys(self, name)

    def _held_keys(self, plan: PlanState) -> list[str]:
        return [self.puts[p].key for p in plan.parents if p in self.puts]

    def _plan(self, name: str) -> PlanState:
        return self.plans.setdefault(name, PlanState(name))

    def _plan_changed(self, plan: PlanState) -> None:
        self._mark("plan", plan.name)
        for sid in plan.sessions:
            self._mark("session", sid)
        session = plan.body.get("session")
        if isinstance(session, str):
            sid = session_id(session, plan.body.get("agent"))
            row = self.sessions.setdefault(sid, SessionState(session, plan.body.get("agent")))
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


def _list(value: Any) -> list[Any]:
    """`value` when it is a list, else [] (a line is data, never trusted)."""
    return value if isinstance(value, list) else []


def _number(value: Any) -> bool:
    """Whether `value` is a number (an int or a float, not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
