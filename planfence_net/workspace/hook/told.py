"""What a session is told about its subagents' writes (automatic mode): when a subagent's
write lands on a file its parent's plan had seen (read, written, a lockfile or a test's
input), the parent's next hook call says so, once:

    tell_parent   after the subagent's write (its PostToolUse): append a note for the
                  parent's plan (CLUSTER/run/PLAN.told, one JSON line per write)
    told          the parent's next call whose answer reaches the model (a checked
                  PreToolUse; Claude Code's PostToolUse): take the notes (renamed away, so
                  each is said once) and word them, one sentence per subagent
    with_told     add them to that call's answer: after a block's reason, else as
                  `hookSpecificOutput.additionalContext` (merged with any the answer has)

Best effort: a note that cannot be written or read is lost, never a failed hook call.
Imports are deferred (each hook call is a fresh process; measured in `run`).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from ..place.paths import session_marker
from .auto import session_plan

if TYPE_CHECKING:
    from ...core.roster import Roster
    from ..model.payload import ToolCall
    from .run import Answer


def parent_of(root: Path, plan: str) -> dict[str, str | None]:
    """What `auto.note_working` noted about a subagent's plan `plan`: its parent's plan
    (`parent`), `subagent` and `type`; {} for a session's own plan."""
    try:
        note = json.loads(session_marker(root, plan).read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return note if isinstance(note, dict) and isinstance(note.get("parent"), str) else {}


SEEN_ROLES = ("read", "target", "lockfile", "input")  # a file the plan's agent has seen


def tell_parent(root: Path, plan: str, roster: Roster, keys: list[str], step: float) -> None:
    """A subagent's write of `keys` landed: note for its parent (see `told`) the files among
    them that the parent's plan holds as seen. Best effort: a failure only loses the note."""
    from ...cluster.folder import ClusterDir
    from ...core.errors import PlanfenceError
    from ..plans.session import wait_declaration

    info = parent_of(root, plan)
    parent = info.get("parent")
    if not parent:
        return
    try:
        declared = wait_declaration(roster, ClusterDir(root).identity, parent, step_timeout=step)
    except (PlanfenceError, ValueError, OSError):
        return
    seen = [k for k in keys if set(declared.get(k, ())) & set(SEEN_ROLES)]
    if not seen:
        return
    line = json.dumps({"files": seen, "subagent": info.get("subagent"), "type": info.get("type")})
    try:
        fd = os.open(root / "run" / f"{parent}.told", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (line + "\n").encode())  # one write(2): notes never interleave
        finally:
            os.close(fd)
    except OSError:
        pass


def told(root: Path, call: ToolCall) -> str:
    """What the session's subagents changed among the files it had seen since it was last
    told (each note said once), as a sentence per subagent, or ""; "" for a subagent's call."""
    from ..model.facts import file_of

    if call.agent_id or not _can_tell(call):
        return ""
    path = root / "run" / f"{session_plan(call)}.told"
    taken = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}")  # this call's
    try:
        path.rename(taken)
    except OSError:
        return ""
    try:
        rows = [json.loads(line) for line in taken.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        rows = []
    finally:
        taken.unlink(missing_ok=True)
    by_agent: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        if isinstance(row, dict) and isinstance(row.get("files"), list):
            who = (str(row.get("subagent") or "?"), str(row.get("type") or ""))
            names = by_agent.setdefault(who, [])
            names += [n for k in row["files"] if (n := file_of(str(k)) or str(k)) not in names]
    return "\n".join(
        f"PlanFence: subagent {agent}{f' ({kind})' if kind else ''} changed {', '.join(names)}, "
        f"which this session had read; re-read {'it' if len(names) == 1 else 'them'} before "
        f"relying on what you read."
        for (agent, kind), names in by_agent.items()
    )


def with_told(root: Path, call: ToolCall, answer: Answer) -> Answer:
    """`answer` with what `told` has for the call's session: on a block, after the reason;
    else as context for the model (`hookSpecificOutput.additionalContext`, added to any the
    answer carries)."""
    from .run import Answer

    text = told(root, call)
    if not text:
        return answer
    if answer.code != 0:
        return Answer(
            answer.code, f"{answer.stderr}\n{text}" if answer.stderr else text, answer.stdout
        )
    try:
        out = json.loads(answer.stdout) if answer.stdout else {}
    except ValueError:
        out = {}
    out = out if isinstance(out, dict) else {}
    spec = out.setdefault("hookSpecificOutput", {})
    spec.setdefault("hookEventName", call.event)
    had = spec.get("additionalContext")
    spec["additionalContext"] = f"{had}\n{text}" if had else text
    return Answer(answer.code, answer.stderr, json.dumps(out))


def _can_tell(call: ToolCall) -> bool:
    """Whether the answer to `call` reaches the model: a PreToolUse's (its block reason or
    `additionalContext`, both agents), or Claude Code's PostToolUse `additionalContext`.
    Notes wait for such a call (never a PostToolUseFailure, nor Codex's PostToolUse)."""
    return call.event == "PreToolUse" or (call.event == "PostToolUse" and call.agent == "claude")
