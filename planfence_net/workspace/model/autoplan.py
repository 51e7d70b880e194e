"""An automatic plan's record rule (pure): what the plan record says after one hook call's
`Change` (see `plans.session` for when each change comes), given the records at hand.

`recorded` takes the plan's current record, its lineage, the current record of every key
the change names and the change, and returns the new record's body and parents (or None:
nothing to write). It never looks at a file or a socket; `plans.session.wait_record` is the
I/O around it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...core.records import Record
from .facts import BRANCH, HEAD, OBSERVED, REPO, STATUS, fact_key, file_of, split_key

MAX_PARENTS = 256  # a put carries at most 256 parents (PROTOCOL.md): reads past that are dropped
FACT_ROLES = {REPO: "repo", BRANCH: "branch", HEAD: "head", STATUS: "status"}


@dataclass(frozen=True, slots=True)
class Change:
    """What one hook call adds to a session's plan. `files` maps file keys to the role they
    join with ("read" or "target"); `agents` are workspace agents whose repo, branch, HEAD and
    status the plan must hold (the session's worktree at its first call); `evidence` is an
    evidence key and its record, joined with the plan's read and target files as inputs;
    `rebase` moves those facts to their current versions (refresh); `landed`: the targets'
    write went through (its PostToolUse), so the replan count starts over. A file with
    role "lockfile" (beside a manifest read) joins at its current version but never moves
    when it is already held: only its own re-read moves it. `derive`: the plan of the
    subagent's parent, whose record the new plan derives from (see `recorded`)."""

    files: Mapping[str, str] = field(default_factory=dict)
    agents: tuple[str, ...] = ()
    evidence: tuple[str, Record] | None = None
    rebase: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)
    landed: bool = False  # the targets' write went through (its PostToolUse): count anew
    derive: str | None = None  # a subagent's: its parent's plan, inherited when it starts


def fact_keys(agent: str) -> list[str]:
    return [fact_key(agent, fact) for fact in OBSERVED]


def recorded(
    plan: Record | None,
    lineage: Mapping[bytes, Record],
    current: Mapping[str, Record],
    change: Change,
    now: float,
    parent: Record | None = None,
) -> tuple[dict[str, Any], list[bytes]] | None:
    """The body and parents of the plan record after `change`, given the current record of
    every key it names (`current`), or None when the plan already says exactly that. Raises
    ValueError when a parent of `plan` (or of `parent`) is not in `lineage`, a needed
    current record is missing, or the plan would hold more than MAX_PARENTS facts.

    A re-read (a file joining as read that moves from the version the plan held) spends the
    replan count (`trust` + 1, the key listed under `reread`) unless the plan's repository,
    branch or HEAD drifted (`current` holds them then): no re-read fixes that. A landed
    write or a rebase starts the count over.

    `parent` (used only when `plan` is None): the record of the parent's plan
    (`change.derive`); the new plan starts as its copy: its facts at the versions it held
    (its targets as reads), its replan count, its record as a lineage parent (the link, kept
    as long as none of those facts moves), the keys listed under `inherited` until they
    move."""
    draft = _Draft(plan, lineage, current, parent, change.derive or "")
    body, declaration, held = draft.body, draft.declaration, draft.held
    inherited = set(_listed(body, "inherited"))
    reread = _listed(body, "reread")
    trust = int(body.get("trust", 1))
    before = lineage_bodies(lineage, held)  # the held records' bodies, before the change
    based = not _base_drifted(declaration, held, current)
    trust, reread = _join_change(draft, change, trust, reread, based)
    _drop_stale_evidence(declaration, held, before, draft.moved)
    if change.evidence is not None:
        draft.evidence(*change.evidence)
    if draft.link is not None and (draft.moved & inherited or change.rebase):
        draft.link, draft.changed = None, True  # the plan no longer holds what the parent's did
    if trust != int(body.get("trust", 1)) or reread != _listed(body, "reread"):
        draft.changed = True
    if not draft.changed:
        return None
    parents = draft.parents()
    body.update(
        declaration={k: v for k, v in declaration.items() if v},
        trust=trust,
        auto=True,
        previous=plan.id if plan is not None else None,
        time=round(now, 3),
        **change.extra,
    )
    if reread or "reread" in body:
        body["reread"] = reread
    if "derived_from" in body:
        body["inherited"] = sorted(k for k in inherited - draft.moved if k in declaration)
    return body, parents


def _join_change(
    draft: _Draft, change: Change, trust: int, reread: list[str], based: bool
) -> tuple[int, list[str]]:
    """Join what `change` names to `draft` (the facts of every agent it touches, a rebase's
    facts, its files); returns the replan count and the re-read keys after it (`based`: the
    plan's repository, branch and HEAD did not drift)."""
    agents = {*change.agents, *filter(None, map(key_agent, change.files))}
    for agent in sorted(agents):
        for fact, role in FACT_ROLES.items():
            if fact_key(agent, fact) not in draft.declaration:
                draft.join(fact_key(agent, fact), role, move=True)
    if change.rebase:
        for key, roles in list(draft.declaration.items()):
            if is_fact(key):
                draft.join(key, roles[0], move=True)
        trust, reread = 1, []
    for key, role in change.files.items():
        lock = role == "lockfile" and key in draft.held  # a lockfile moves by its own re-read only
        if draft.join(key, role, move=not lock) and role != "target" and based:
            trust += 1  # a re-read of a drifted fact: the plan's one replan
            reread = [*reread, key] if key not in reread else reread
    if change.landed:
        trust, reread = 1, []  # the write went through: the single-replan rule holds per write
    return trust, reread


class _Draft:
    """The plan record being made: its body, declaration, held ids (key -> parent id, in
    `order`), its link to a parent's plan record, and what moved or changed so far."""

    def __init__(
        self,
        plan: Record | None,
        lineage: Mapping[bytes, Record],
        current: Mapping[str, Record],
        parent: Record | None,
        name: str,
    ) -> None:
        self.link: bytes | None
        if plan is None and parent is not None:
            self.body, self.declaration, self.held, self.order, self.link = _derived(
                parent, lineage, name
            )
        else:
            self.body = dict(plan.body) if plan is not None else {"trust": 1}
            declared = dict(self.body.get("declaration", {}))
            self.declaration = {k: list(v) for k, v in declared.items()}
            self.held, self.order, self.link = _held(plan, lineage)
        self.current = current
        self.extra: dict[str, Record] = {}
        self.moved: set[str] = set()
        self.changed = plan is None

    def join(self, key: str, role: str, *, move: bool) -> bool:
        """Declare `key` with `role`; move it to its current version when `move` (or new).
        Returns whether its version moved from one the plan held before. Raises ValueError
        when its current record is needed and missing."""
        roles = self.declaration.setdefault(key, [])
        if role not in roles:
            roles.append(role)
            self.changed = True
        if not move and key in self.held:
            return False
        record = self.extra.get(key) or self.current.get(key)
        if record is None:
            raise ValueError(f"no current record of {key!r}")
        if key not in self.held:
            self.order.append(key)
        elif self.held[key] == record.id:
            return False
        else:
            self.moved.add(key)
        new = key not in self.held
        self.held[key] = record.id
        self.changed = True
        return not new

    def evidence(self, key: str, record: Record) -> None:
        """Join the evidence record `record` of `key`; its inputs get the role `input`."""
        inputs = record.body.get("inputs", []) if isinstance(record.body, dict) else []
        for name in inputs:
            if name in self.declaration and "input" not in self.declaration[name]:
                self.declaration[name].append("input")
        self.extra[key] = record
        self.join(key, "evidence", move=True)

    def parents(self) -> list[bytes]:
        """The record's parents: the link first, then the held ids of declared keys. Raises
        ValueError past MAX_PARENTS."""
        held, declared = self.held, self.declaration
        parents = [held[k] for k in dict.fromkeys(self.order) if k in held and k in declared]
        parents = [self.link, *parents] if self.link is not None else parents
        if len(parents) > MAX_PARENTS:
            raise ValueError(f"the plan would hold {len(parents)} facts, more than {MAX_PARENTS}")
        return parents


INHERITED_ROLES = {"target": "read"}  # what the parent wrote, its subagent knows as read
BASE_ROLES = ("repo", "branch", "head")


def _derived(
    parent: Record, lineage: Mapping[bytes, Record], name: str
) -> tuple[dict[str, Any], dict[str, list[str]], dict[str, bytes], list[str], bytes]:
    """A subagent's new plan as a copy of its parent's plan record `parent` (named `name`):
    body, declaration, held ids, key order, and the link (the parent record's id)."""
    pbody = parent.body if isinstance(parent.body, dict) else {}
    held, order, _ = _held(parent, lineage)
    declaration = {
        k: list(dict.fromkeys(INHERITED_ROLES.get(r, r) for r in v))
        for k, v in dict(pbody.get("declaration", {})).items()
        if k in held
    }
    body: dict[str, Any] = {
        "trust": int(pbody.get("trust", 1)),
        "parent_plan": name,
        "derived_from": parent.id.hex(),
        "inherited": sorted(declaration),
    }
    return body, declaration, held, order, parent.id


def _held(
    plan: Record | None, lineage: Mapping[bytes, Record]
) -> tuple[dict[str, bytes], list[str], bytes | None]:
    """Key -> the parent id `plan` holds for it, the keys in order, and its link to a
    parent's plan record (a parent of kind "plan"), if any. Raises ValueError for a parent
    not in `lineage`."""
    held: dict[str, bytes] = {}
    order: list[str] = []
    link = None
    for rid in plan.parents if plan is not None else ():
        parent = lineage.get(rid)
        if parent is None:
            raise ValueError(f"parent {rid.hex()[:12]} of the plan is not at hand")
        if parent.kind == "plan":
            link = rid
            continue
        held[parent.key] = rid
        order.append(parent.key)
    return held, order, link


def _listed(body: Mapping[str, Any], name: str) -> list[str]:
    found = body.get(name)
    return [k for k in found if isinstance(k, str)] if isinstance(found, list) else []


def _base_drifted(
    declaration: Mapping[str, list[str]], held: Mapping[str, bytes], current: Mapping[str, Record]
) -> bool:
    """Whether a repository, branch or HEAD fact the plan holds has another current record
    (only facts `current` has are looked at)."""
    return any(
        key in current and key in held and current[key].id != held[key]
        for key, roles in declaration.items()
        if set(roles) & set(BASE_ROLES)
    )


def _drop_stale_evidence(
    declaration: dict[str, list[str]],
    held: dict[str, bytes],
    before: Mapping[str, Any],
    moved: set[str],
) -> None:
    """Evidence that ran against a version that moved leaves the plan."""
    for key, roles in list(declaration.items()):
        inputs = before.get(key, {}).get("inputs") if "evidence" in roles else None
        if isinstance(inputs, list) and set(inputs) & moved:
            del declaration[key]
            held.pop(key, None)


def lineage_bodies(lineage: Mapping[bytes, Record], held: Mapping[str, bytes]) -> dict[str, Any]:
    """The bodies (maps only) of the held records at hand, by key."""
    out = {}
    for key, rid in held.items():
        record = lineage.get(rid)
        if record is not None and isinstance(record.body, dict):
            out[key] = record.body
    return out


def inputs_of(plan: Record | None) -> list[str]:
    """The file keys a test run depends on: the plan's read and target files."""
    if plan is None or not isinstance(plan.body, dict):
        return []
    declaration = plan.body.get("declaration", {})
    return [
        k
        for k, roles in declaration.items()
        if file_of(k) is not None and ({"read", "target"} & set(roles))
    ]


def key_agent(key: str) -> str | None:
    parts = split_key(key)
    return parts[0] if parts else None


def is_fact(key: str) -> bool:
    parts = split_key(key)
    return parts is not None and parts[1] in FACT_ROLES
