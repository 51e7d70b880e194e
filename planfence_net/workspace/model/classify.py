"""The drift classifier (pure): how much a workspace changed since a trusted state matters.

    none           nothing the plan declared changed
    informational  only unrelated tracked files changed (git status): do not block
    relevant       a file the analysis read, a lockfile or manifest, or the input of a
                   recorded test run changed (the evidence is stale)
    critical       the repository, the branch, HEAD, or a file the plan will modify changed

`classify` takes the trusted state and the drift (key -> (body at trust time, body now)) and
returns a report with the lines a person reads; it never looks at a file or a socket.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .facts import BRANCH, HEAD, REPO, STATUS, file_of, split_key

NONE, INFORMATIONAL, RELEVANT, CRITICAL = "none", "informational", "relevant", "critical"
LEVELS = (NONE, INFORMATIONAL, RELEVANT, CRITICAL)
HEADER = "Workspace drift detected since the previous trusted state:"


@dataclass(frozen=True, slots=True)
class TrustedState:
    """A plan record, read: its name, how many times it was trusted (1 = never replanned),
    each declared key's roles, and the bodies of its evidence records; `reread`: the keys
    whose re-read spent the replan count (an automatic plan's); `inherited`: the keys a
    subagent's plan holds as its parent's plan read them."""

    plan: str
    trust: int
    roles: Mapping[str, tuple[str, ...]]
    evidence: Mapping[str, Mapping[str, Any]]
    reread: frozenset[str] = frozenset()
    inherited: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class DriftReport:
    """The class of a drift, the summary lines, and what to re-read; `again`: the files
    among the drifted ones that were already re-read once (`TrustedState.reread`)."""

    level: str
    lines: tuple[str, ...]
    reread: tuple[str, ...]
    changed_again: bool
    again: tuple[str, ...] = ()

    @property
    def blocks(self) -> bool:
        return self.level in (RELEVANT, CRITICAL)


def classify(state: TrustedState, drift: Mapping[str, tuple[Any, Any]]) -> DriftReport:
    """Classify `drift` against `state`; see the module docstring for the classes. A key
    whose new record says the same as the trusted one (a file edited and restored) did not
    change."""
    drift = {key: bodies for key, bodies in drift.items() if bodies[0] != bodies[1]}
    names = _Names(state.roles)
    lines: list[str] = []
    level = NONE
    reread: list[str] = []
    for fact, label in ((REPO, "Repository"), (BRANCH, "Branch"), (HEAD, "HEAD")):
        for key in _keys_with(drift, fact):
            old, new = (_fact_text(fact, body) for body in drift[key])
            lines.append(f"- {label} changed{names.agent_suffix(key)}: {old} -> {new}")
            level = CRITICAL
    targets = _files_with_role(state, drift, "target")
    if targets:
        lines.append(
            f"- {_count(len(targets), 'file')} the plan will modify changed: "
            f"{names.files(targets, drift)}"
        )
        level, reread = CRITICAL, reread + targets
    inspected = [k for k in _files_with_role(state, drift, "read") if k not in targets]
    own = [k for k in inspected if k not in state.inherited]
    if own:
        lines.append(
            f"- {_count(len(own), 'previously inspected file')} changed: {names.files(own, drift)}"
        )
    theirs = [k for k in inspected if k in state.inherited]
    if theirs:
        lines.append(
            f"- {_count(len(theirs), 'file')} the parent agent read changed: "
            f"{names.files(theirs, drift)}"
        )
    if inspected:
        level, reread = _max(level, RELEVANT), reread + own + theirs
    for key in _files_with_role(state, drift, "lockfile"):
        if key not in targets and key not in inspected:
            lines.append(f"- {names.file(key, drift)} changed")
            level, reread = _max(level, RELEVANT), reread + [key]
    for key, body in sorted(state.evidence.items()):
        inputs = body.get("inputs")
        stale = [k for k in inputs if k in drift] if isinstance(inputs, list) else []
        if stale or key in drift:
            why = f"ran against {names.files(stale, drift)}" if stale else "was re-run"
            lines.append(f"- Previous test result is now stale: `{body.get('command')}` {why}")
            level = _max(level, RELEVANT)
    unrelated = _unrelated(state, drift)
    if unrelated:
        lines.append(f"- Unrelated tracked files changed (informational): {', '.join(unrelated)}")
        level = _max(level, INFORMATIONAL)
    again = state.trust > 1 and level in (RELEVANT, CRITICAL)
    twice = tuple(names.file(k, {}) for k in reread if k in state.reread) if again else ()
    return DriftReport(level, tuple(lines), tuple(names.file(k, {}) for k in reread), again, twice)


def summary(report: DriftReport) -> list[str]:
    """The lines `workspace check` prints: the header and the findings, or one line."""
    if report.level == NONE:
        return ["No workspace drift since the trusted state."]
    return [HEADER, *report.lines]


class _Names:
    """How files and agents are named in lines: bare paths for a one-worktree plan."""

    def __init__(self, roles: Mapping[str, tuple[str, ...]]) -> None:
        agents = {parts[0] for key in roles if (parts := split_key(key)) is not None}
        self.many = len(agents) > 1

    def file(self, key: str, drift: Mapping[str, tuple[Any, Any]]) -> str:
        rel = file_of(key) or key
        name = f"{key.partition(':')[0]}:{rel}" if self.many else rel
        if key in drift and isinstance(drift[key][1], dict) and drift[key][1].get("missing"):
            name += " (deleted)"
        return name

    def files(self, keys: list[str], drift: Mapping[str, tuple[Any, Any]]) -> str:
        return ", ".join(self.file(k, drift) for k in keys)

    def agent_suffix(self, key: str) -> str:
        parts = split_key(key)
        return f" ({parts[0]})" if self.many and parts else ""


def _keys_with(drift: Mapping[str, Any], fact: str) -> list[str]:
    return sorted(k for k in drift if (p := split_key(k)) is not None and p[1] == fact)


def _files_with_role(state: TrustedState, drift: Mapping[str, Any], role: str) -> list[str]:
    return sorted(k for k in drift if role in state.roles.get(k, ()) and file_of(k) is not None)


def _fact_text(fact: str, body: Any) -> str:
    value = (
        body.get({REPO: "git", BRANCH: "branch", HEAD: "head"}[fact])
        if isinstance(body, dict)
        else None
    )
    if fact == REPO and value is None and isinstance(body, dict):
        value = body.get("path")
    if value is None:
        return "(none)"
    return str(value)[:7] if fact == HEAD else str(value)


def _unrelated(state: TrustedState, drift: Mapping[str, tuple[Any, Any]]) -> list[str]:
    """Tracked paths whose git status entry changed, minus the files the plan declared."""
    paths: set[str] = set()
    for key in _keys_with(drift, STATUS):
        agent = key.partition(":")[0]
        declared = {file_of(k) for k in state.roles if k.partition(":")[0] == agent}
        old, new = (_rows(body) for body in drift[key])
        paths |= {row[0] for row in old ^ new if row[0] not in declared}
    return sorted(paths)


def _rows(body: Any) -> set[tuple[Any, ...]]:
    rows = body.get("changed") if isinstance(body, dict) else None
    return (
        {tuple(r) for r in rows if isinstance(r, list) and r} if isinstance(rows, list) else set()
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _max(a: str, b: str) -> str:
    return a if LEVELS.index(a) >= LEVELS.index(b) else b
