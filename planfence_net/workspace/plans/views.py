"""The read-only use cases, each composed once: which plans the folder selects, the team's
live plans, and one plan's history (`workspace plans|show`, `mcp serve`'s `plans`).

Anyone may look: nothing here changes a plan, so no caller is asked for. Each function
returns values and raises PlanfenceError (ConfigError for a request that names nothing);
the doors print.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from ...cluster.folder import ClusterDir
from ...cluster.processes import link_addresses
from ...core.errors import ConfigError, PlanfenceError
from ...core.records import Record
from ...owners.logs import read_events
from ..model.facts import plan_key
from ..place.config import SELECTION, select_plan, workspaces
from .checklog import CHECK, plan_events
from .listing import history_rows, last_checks, plan_row, record_id, wait_plan_records, wait_records
from .usecases import run_blocking


@dataclass(frozen=True, slots=True)
class PlanList:
    """The team's live plans (`listing.plan_row` each) and {owner: why} for the owners that
    could not be asked."""

    rows: list[dict[str, Any]]
    unreachable: dict[str, str]


@dataclass(frozen=True, slots=True)
class PlanHistory:
    """One plan's trusts, recorded edits and checks, oldest first (`listing.history_rows`),
    its owner, and {owner: why} when the owner could not be asked for the records."""

    plan: str
    owner: str
    rows: list[dict[str, Any]]
    unreachable: dict[str, str]


def plan_selection(cdir: ClusterDir) -> dict[str, Any]:
    """The folder's plan selection: `current`, `shared` (trusted with no session),
    `sessions` (session -> plan) and `agents` (session -> subagent -> plan). Raises
    ConfigError when the selection file is not JSON."""
    try:
        data = json.loads((cdir.root / SELECTION).read_text())
    except FileNotFoundError:
        data = {}
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{cdir.root / SELECTION}: not JSON: {exc}") from None
    data = data if isinstance(data, dict) else {}
    return {
        "current": data.get("current"),
        "shared": data.get("shared", []),
        "sessions": data.get("sessions", {}),
        "agents": data.get("agents", {}),
    }


def list_plans(cdir: ClusterDir, timeout: float) -> PlanList:
    """The head plan record every owner holds (each owner given `timeout` seconds), with
    its last check from the owners' logs."""
    roster = cdir.roster()
    me = roster.owner_of("plan/x") or roster.agents[0].name
    records, unreachable = run_blocking(
        functools.partial(
            wait_plan_records, roster, cdir.identity(me), link_addresses(cdir), timeout
        )
    )
    last = last_checks(_events(cdir, list(roster.names)))
    spaces, current = workspaces(cdir), select_plan(cdir, None)
    rows = [plan_row(r, spaces, current, last.get(r.key.removeprefix("plan/"))) for r in records]
    return PlanList(rows, unreachable)


def plan_history(cdir: ClusterDir, plan: str, timeout: float) -> PlanHistory:
    """The history of `plan` from the owners' logs, with the records its owner wrote (asked
    for within `timeout`). Raises ConfigError when no agent owns the plan, PlanfenceError
    when the logs hold no trust or check of it."""
    roster = cdir.roster()
    owner = roster.owner_of(plan_key(plan))
    if owner is None:
        raise ConfigError(f"no agent owns {plan_key(plan)!r}")
    events = _events(cdir, list(roster.names), plan)
    if not events:
        raise PlanfenceError(
            f"no trust or check of plan {plan!r} in the logs of {cdir.root / 'logs'}"
        )
    ids = [rid for e in events if e.get("event") == "put" and (rid := record_id(e)) is not None]
    unreachable: dict[str, str] = {}
    records: dict[bytes, Record] = {}
    if ids:
        ask = functools.partial(
            wait_records, roster, cdir.identity(owner), owner, ids, link_addresses(cdir), timeout
        )
        try:
            records = run_blocking(ask)
        except PlanfenceError as exc:
            unreachable[owner] = str(exc)
    return PlanHistory(plan, owner, history_rows(events, records), unreachable)


def _events(cdir: ClusterDir, names: list[str], plan: str | None = None) -> list[dict[str, Any]]:
    """The `check` lines (and with `plan`, its key's `put` lines) of the owners' logs."""
    logs = [cdir.log(name) for name in names]
    if plan is not None:
        return list(plan_events(logs, plan))
    found: list[dict[str, Any]] = []
    for path in logs:
        try:
            found.extend(read_events(path, event=CHECK))
        except FileNotFoundError:
            continue
    return found
