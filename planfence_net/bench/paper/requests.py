"""Requests per protected action, counted from the owners' (and central store's) own logs.

Every request an owner serves is logged with its op, the peer that sent it, the time its line
was written (`ts`, the same wall clock as the harness's rows) and how long it was served
(`latency_ms`); a request counts at the time it began to be served (`ts` less its latency),
which falls between its sending and its answer. The harness's rows say when each
action began, when it was ready to act, when the policy decided (`ready_ts`, `done_ts`) and
when the action ended. A request belongs to the action whose span holds its `ts`; it is
**in the stall** when it falls between ready and decided, else it is the action's other work
(the plan, the updates and their acknowledgements, the action record). Requests outside every
action (key setup, subscriptions, connection checks) are not counted. Policies run one after
the other, so spans never overlap.
"""

from __future__ import annotations

import bisect
import collections
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

Row = dict[str, Any]
Count = tuple[str, str, str, str]  # (policy, op, "executor" | "others", "stall" | "action")


def read_requests(logs: Iterable[Path]) -> list[dict[str, Any]]:
    """The `request` events of every log, each with `at` (when it began to be served),
    oldest first (ping and stats left out)."""
    events = []
    for log in logs:
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == "request" and event.get("op") not in ("ping", "stats"):
                event["at"] = event["ts"] - float(event.get("latency_ms", 0.0)) / 1000
                events.append(event)
    return sorted(events, key=lambda e: e["at"])


def count_requests(
    events: list[dict[str, Any]], rows: list[Row], executor: str
) -> tuple[collections.Counter[Count], collections.Counter[str]]:
    """(requests per (policy, op, by, when), actions per policy) for `rows` (module docstring)."""
    spans = sorted(rows, key=lambda r: r["began_ts"])
    starts = [r["began_ts"] for r in spans]
    counts: collections.Counter[Count] = collections.Counter()
    for event in events:
        at = bisect.bisect_right(starts, event["at"]) - 1
        if at < 0 or event["at"] > spans[at]["ended_ts"]:
            continue
        row = spans[at]
        when = "stall" if row["ready_ts"] <= event["at"] <= row["done_ts"] else "action"
        who = "executor" if event.get("peer") == executor else "others"
        counts[(row["policy"], event["op"], who, when)] += 1
    return counts, collections.Counter(r["policy"] for r in rows)


def per_action(
    counts: collections.Counter[Count], actions: collections.Counter[str]
) -> dict[Count, float]:
    """Each count over its policy's number of actions."""
    return {key: n / actions[key[0]] for key, n in sorted(counts.items())}


def format_table(rates: dict[Count, float], policies: Iterable[str]) -> list[str]:
    """Text lines, one per (policy, op, by, when), in `policies` order."""
    lines = [f"{'policy':<18} {'op':<9} {'by':<9} {'when':<7} requests per action"]
    for policy in policies:
        for (p, op, who, when), rate in rates.items():
            if p == policy:
                lines.append(f"{p:<18} {op:<9} {who:<9} {when:<7} {rate:6.2f}")
    return lines
