"""The checks of a plan, in the owners' logs: what `workspace plans` and `workspace show`
read back.

A check runs in the process that asks (the hook, `workspace check`), not in an owner, so no
owner sees its outcome. `log_check` appends it to the log of the plan key's owner in the
cluster folder (`logs/OWNER.jsonl`), as one JSON line of the owners' own format:
    {"ts": 1764610000.123456, "agent": OWNER, "event": "check", "plan": PLAN,
     "source": "hook" | "cli", "class": "none" | "informational" | "relevant" |
     "critical" | "undecided", "exit": 0 | 2 | 3, "trust": N, "changed_again": BOOL,
     "record": PLAN RECORD ID (hex) or null, "reread": [PATH, ...], "lines": [SUMMARY, ...],
     "detail": WHY UNDECIDED, "held": WHY BLOCKED AFTER THE CHECK, "writers": [WRITER, ...],
     and for the hook "session", "subagent", "client" ("claude" | "codex"), "tool", "files"}

Each WRITER says who changed one drifted file (or HEAD) of a block (`model.writers.Writer`):
    {"path": PATH (as the block names it, "HEAD" for a HEAD change),
     "writer": HUMAN SENTENCE ("written by session S of CLIENT in WORKTREE", "outside any
               fenced session", "commit SHA7 by AUTHOR (SUBJECT)"),
     "session": SESSION ID or null, "agent": SUBAGENT ID or null (the session's main agent),
     "agent_type": SUBAGENT TYPE or null, "client": "claude" | "codex" | null,
     "worktree": THE WRITING SESSION'S WORKTREE or null, "commit": SHA or null,
     "at": TS (of the write, the commit, or the file's modification) or null,
     "diff": TEXT (a unified diff since the version the plan read, at most 20 lines; for
             HEAD the paths the commits changed) or null, "note": WHY NO DIFF or ""}
A session is named only when its recorded write left exactly the file's current content.

(`lines` and `writers` only for a drift that blocks, `detail` only when undecided,
`reread` when not empty; `held` when another plan's exclusive intent blocked the write the check allowed,
whose line then has exit 2; `files` relative to the call's folder when inside it). One write(2) with O_APPEND, the
way the owner appends its own lines, so lines never interleave. Logging never fails a
check: a log that cannot be written is skipped. The owner's own `put` lines of the plan key
are the other half of a plan's history (trusts, recorded edits).

A session that ends (the hook's SessionEnd, `log_session_end`) leaves one line in the log of
the owner of `plan/*`, so a reader of the logs (`planfence view`) can grey it out, also when
it only read (it then has no intent whose end would say so):
    {"ts": ..., "agent": OWNER, "event": "session_end", "session": SESSION ID,
     "client": "claude" | "codex", "worktree": THE SESSION'S FOLDER}
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..model.facts import plan_key

# Imports inside functions are deliberate: the hook logs its checks here, and each hook call
# is a fresh process that must not load the owner daemon, `owners.logs` (measured in
# `workspace/hook/run.py`).

if TYPE_CHECKING:
    from ...core.roster import Roster
    from ..model.machine import Verdict
    from ..model.payload import ToolCall

CHECK = "check"
SESSION_END = "session_end"


def check_event(
    verdict: Verdict, source: str, call: ToolCall | None = None, held: str = ""
) -> dict[str, Any]:
    """The fields of the `check` line of `verdict` (see module doc), without ts and agent;
    `held`: why the write the check allowed was blocked after it (another plan's
    exclusive intent), making the line a block."""
    event: dict[str, Any] = {
        "plan": verdict.plan,
        "source": source,
        "class": verdict.level,
        "exit": 2 if held else verdict.exit_code,
        "trust": verdict.trust,
        "changed_again": verdict.changed_again,
        "record": verdict.plan_id.hex() if verdict.plan_id else None,
    }
    for name, value in (
        ("reread", list(verdict.reread)),
        ("lines", list(verdict.lines) if verdict.exit_code else []),
        ("detail", verdict.detail if verdict.level == "undecided" else ""),
        ("held", held),
        ("writers", [w.to_json() for w in verdict.writers] if verdict.exit_code else []),
    ):
        if value:
            event[name] = value
    if call is not None:
        event.update(
            session=call.session or None,
            subagent=call.agent_id,
            client=call.agent,
            tool=call.tool,
            files=[_relative(f, call.cwd) for f in call.files],
        )
    return event


def log_check(
    cluster: Path,
    roster: Roster,
    verdict: Verdict,
    source: str,
    call: ToolCall | None = None,
    held: str = "",
) -> None:
    """Append the `check` line of `verdict` to the log of the plan key's owner in the
    cluster folder `cluster` (`held`: see `check_event`). Never raises for a log that
    cannot be written."""
    owner = roster.owner_of(plan_key(verdict.plan))
    if owner is not None:
        _append(cluster, owner, CHECK, check_event(verdict, source, call, held))


def log_session_end(call: ToolCall, explicit: Path | None) -> None:
    """Append the `session_end` line of the session of `call` (a SessionEnd) to the log of
    the owner of `plan/*` in the cluster folder serving its folder (`explicit`, else found
    from the call's folder). Never raises: no cluster or no log, no line."""
    from ...core.errors import PlanfenceError
    from ..place.config import find_cluster

    if not call.session:
        return
    try:
        cdir = find_cluster(explicit, Path(call.cwd))
        owner = cdir.roster().owner_of(plan_key("x"))
    except (PlanfenceError, OSError, ValueError):
        return  # no cluster serves the folder (or it cannot be read): nothing to grey out
    if owner is not None:
        fields = {"session": call.session, "client": call.agent, "worktree": call.cwd}
        _append(cdir.root, owner, SESSION_END, fields)


def _append(cluster: Path, owner: str, event: str, fields: dict[str, Any]) -> None:
    """Append one `event` line with `fields` to `logs/OWNER.jsonl` in `cluster`: one
    write(2) with O_APPEND. Never raises."""
    try:
        line = {"ts": round(time.time(), 6), "agent": owner, "event": event, **fields}
        data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
        logs = cluster / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        fd = os.open(logs / f"{owner}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    except (OSError, ValueError):
        pass  # the answer matters, its log line does not


def plan_events(logs: list[Path], plan: str) -> Iterator[dict[str, Any]]:
    """The `check` lines of `plan` and the owners' `put` lines of its key, from the log
    files `logs` (missing ones skipped), each file in order."""
    from ...owners.logs import read_events

    key = plan_key(plan)
    for path in logs:
        try:
            for entry in read_events(path):
                name = entry.get("event")
                if (name == CHECK and entry.get("plan") == plan) or (
                    name == "put" and entry.get("key") == key
                ):
                    yield entry
        except FileNotFoundError:
            continue


def _relative(path: str, cwd: str) -> str:
    """`path` relative to `cwd` when it lies inside it, else as the call named it."""
    inside = os.path.normpath(os.path.join(cwd, path))
    base = os.path.normpath(cwd)
    return os.path.relpath(inside, base) if inside.startswith(base.rstrip("/") + "/") else path
