"""Which files a session's plan already announced as intents: the hook's fast path.

Before a write, the hook asks the owners for intents only on files the plan has not
announced yet in this session (or whose intent's lease ran out); the rest costs one small
file read (`run/intents-*.json` in the cluster folder, one per session, written atomically;
a lost note only costs a query). The query itself is `intentclient.announce`.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..model.facts import file_key
from ..place.config import locate, workspaces

# `announce` is imported where used: intentclient imports this module (an import circle).

if TYPE_CHECKING:
    from ...cluster.folder import ClusterDir
    from ...core.identity import Identity
    from ...core.roster import Roster
    from ..model.payload import ToolCall

ALLOW = 0


def first_write_intents(
    call: ToolCall,
    cdir: ClusterDir,
    plan: str,
    roster: Roster,
    identity: Identity,
    plan_id: bytes | None,
    deadline: float,
) -> tuple[int, str, str]:
    """The hook's step before a write the drift check allowed: (exit code, stderr, stdout).
    Files the plan already announced (and whose lease runs) cost nothing; for the others,
    `intentclient.announce`: other plans' intents told to the model, an exclusive one
    blocks, the plan's own published."""
    if not call.files:
        return ALLOW, "", ""

    spaces = workspaces(cdir)
    noted = load_notes(cdir.root, call.session, slot(plan, call.agent_id))
    now = time.time()
    todo: list[tuple[str, str, str]] = []  # (owner, rel, as shown)
    for shown in call.files:
        found = locate(spaces, Path(call.cwd) / shown)
        if found is not None and noted.get(file_key(*found), 0.0) <= now:
            todo.append((*found, shown))
    if not todo:
        return ALLOW, "", ""
    from .intentclient import announce

    return announce(call, cdir, plan, roster, identity, plan_id, deadline, todo, spaces)


def notes_path(cluster: Path, session: str | None) -> Path:
    digest = hashlib.blake2b((session or "").encode(), digest_size=8).hexdigest()
    return cluster / "run" / f"intents-{digest}.json"


def load_notes(cluster: Path, session: str | None, slot: str) -> dict[str, float]:
    """File key -> expiry of the intents the (plan, subagent) `slot` of `session` published."""
    try:
        data = json.loads(notes_path(cluster, session).read_text())
    except (OSError, ValueError):
        return {}
    got = data.get(slot) if isinstance(data, dict) else None
    if not isinstance(got, dict):
        return {}
    return {k: float(v) for k, v in got.items() if isinstance(v, int | float)}


def save_notes(cluster: Path, session: str | None, slot: str, notes: dict[str, float]) -> None:
    """Add `notes` (atomically; a failure only costs a query at the next write)."""
    path = notes_path(cluster, session)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data = data if isinstance(data, dict) else {}
    data[slot] = {**load_notes(cluster, session, slot), **notes}
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data))
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)


def slot(plan: str, subagent: str | None) -> str:
    return f"{plan}\0{subagent or ''}"
