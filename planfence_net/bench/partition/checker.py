"""The independent checker of a partition run: the workload's history against the owners' own
logs and stores, and the faults the orchestrator injected.

It trusts neither the executors nor the gate. From each owner's log (its `put` events, written
once a put has committed) it rebuilds every key's versions in seq order; a version v of key k
was the head from no earlier than the start of the put that made it (the history's start,
or else the log line) until no later than the log line of the next version. It asserts:

    heads     every authorized action's declared versions (its frontier) were its owners'
              heads at some instant during that authorize call
    lost      every acknowledged put is in its owner's store with the id and seq acknowledged
    blocked   an authorize call that ran wholly while an owner it declares was cut off ends
              `blocked` with `owner_unavailable` or `timeout`, within `block_bound` seconds
    healed    after each heal, an action declaring that owner's key is authorized again
              within `recovery` seconds

`check` returns the violations as lines (none when the run held) and the figures.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

UNREACHABLE = ("owner_unavailable", "timeout")


@dataclass
class Window:
    """An owner's link down from `cut` to `heal` (time.time())."""

    owner: str
    cut: float
    heal: float


@dataclass
class Verdict:
    violations: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def versions(log: Iterable[dict[str, Any]]) -> dict[str, list[tuple[int, str, float]]]:
    """key -> [(seq, id hex, log ts)] in seq order, from an owner log's `put` events."""
    found: dict[str, list[tuple[int, str, float]]] = {}
    for e in log:
        if e.get("event") == "put":
            found.setdefault(e["key"], []).append((e["seq"], e["id"], e["ts"]))
    for rows in found.values():
        rows.sort()
    return found


def check(
    history: list[dict[str, Any]],
    logs: dict[str, list[dict[str, Any]]],
    stores: dict[str, dict[bytes, int]],
    windows: list[Window],
    owner_of: dict[str, str],
    *,
    block_bound: float,
    recovery: float,
) -> Verdict:
    """The run's violations (module docstring). `logs`: owner -> its log events; `stores`:
    owner -> {record id: seq} read from its store after the run; `owner_of`: key -> owner."""
    verdict = Verdict()
    made = {e["id"]: e["start"] for e in history if e.get("ok")}
    lines = {k: rows for log in logs.values() for k, rows in versions(log).items()}
    decisions = [e for e in history if e["type"] == "authorize"]
    authorized = [e for e in decisions if e.get("outcome") == "authorized"]
    acknowledged = [e for e in history if e.get("ok")]
    blocked, checked_blocks = block_violations(decisions, windows, owner_of, block_bound)
    healed, recovered = recovery_violations(authorized, windows, owner_of, recovery)
    verdict.violations += [
        *heads_violations(authorized, lines, made, owner_of),
        *lost_violations(acknowledged, stores),
        *blocked,
        *healed,
    ]
    verdict.figures = {
        "puts_acknowledged": sum(1 for e in acknowledged if e["type"] == "put"),
        "plans": sum(1 for e in acknowledged if e["type"] == "plan"),
        "decisions": len(decisions),
        "authorized": len(authorized),
        "blocked_while_cut": checked_blocks,
        "slowest_recovery_s": round(max(recovered), 2) if recovered else None,
    }
    return verdict


def heads_violations(
    authorized: list[dict[str, Any]],
    lines: dict[str, list[tuple[int, str, float]]],
    made: dict[str, float],
    owner_of: dict[str, str],
) -> list[str]:
    """A "heads:" violation for each authorized action that declared a version of a key which was not
    its owner's head at some instant of the decision (or was never committed)."""
    v: list[str] = []
    for e in authorized:
        for key, declared in e["frontier"].items():
            rows = lines.get(key, [])
            at = [i for i, row in enumerate(rows) if row[1] == declared]
            if not at:
                v.append(
                    f"heads: {e['action']} at {e['start']:.3f} declared {key} "
                    f"{declared[:16]}, which {owner_of[key]}'s log never committed"
                )
                continue
            i = at[0]
            since = min(made.get(declared, math.inf), rows[i][2])
            until = rows[i + 1][2] if i + 1 < len(rows) else math.inf
            if not (since <= e["end"] and until >= e["start"]):
                v.append(
                    f"heads: {e['action']} authorized over {e['start']:.3f}-{e['end']:.3f} "
                    f"with {key} {declared[:16]} (seq {rows[i][0]}), the head only over "
                    f"{since:.3f}-{until:.3f}"
                )
    return v


def lost_violations(
    acknowledged: list[dict[str, Any]], stores: dict[str, dict[bytes, int]]
) -> list[str]:
    """A "lost:" violation for each acknowledged write its owner's store does not hold at its seq."""
    v: list[str] = []
    for e in acknowledged:
        seq = stores.get(e["owner"], {}).get(bytes.fromhex(e["id"]))
        if seq != e["seq"]:
            v.append(
                f"lost: {e['owner']} acknowledged {e['key']} seq {e['seq']} "
                f"{e['id'][:16]}; its store has {'seq ' + str(seq) if seq else 'nothing'}"
            )
    return v


def block_violations(
    decisions: list[dict[str, Any]],
    windows: list[Window],
    owner_of: dict[str, str],
    block_bound: float,
) -> tuple[list[str], int]:
    """A "blocked:" violation for each decision made wholly inside a cut of an owner it depends on that
    did not block as unreachable, or took over `block_bound` s; and how many there were."""
    v: list[str] = []
    checked_blocks = 0
    for w in windows:
        for e in decisions:
            owners = {owner_of[k] for k in e["deps"]}
            if w.owner not in owners or not (w.cut <= e["start"] and e["end"] <= w.heal):
                continue
            checked_blocks += 1
            took = e["end"] - e["start"]
            if e.get("outcome") != "blocked" or e.get("reason") not in UNREACHABLE:
                v.append(
                    f"blocked: {e['action']} at {e['start']:.3f} with {w.owner} cut off "
                    f"ended {e.get('outcome')} ({e.get('reason') or e.get('error')})"
                )
            elif took > block_bound:
                v.append(
                    f"blocked: {e['action']} at {e['start']:.3f} took {took:.2f} s to "
                    f"block on {w.owner} (bound {block_bound:g} s)"
                )
    return v, checked_blocks


def recovery_violations(
    authorized: list[dict[str, Any]],
    windows: list[Window],
    owner_of: dict[str, str],
    recovery: float,
) -> tuple[list[str], list[float]]:
    """A "healed:" violation for each final heal after which no action declaring that owner's key was
    authorized within `recovery` s; and the recovery times of the others."""
    v: list[str] = []
    recovered: list[float] = []
    for heal_at, owner in sorted({(w.heal, w.owner) for w in windows if _last(w, windows)}):
        after = [
            e["end"] - heal_at
            for e in authorized
            if owner in {owner_of[k] for k in e["deps"]} and e["start"] >= heal_at
        ]
        if not after or min(after) > recovery:
            v.append(
                f"healed: no action declaring {owner}'s key authorized within "
                f"{recovery:g} s of the heal at {heal_at:.3f}"
            )
        else:
            recovered.append(min(after))
    return v, recovered


def _last(window: Window, windows: list[Window]) -> bool:
    """True for the last window of its owner that no later cut of it follows within a
    second (a flapping link heals for good only once)."""
    later = [w for w in windows if w.owner == window.owner and w.cut >= window.heal]
    return not later or min(w.cut for w in later) - window.heal > 1.0
