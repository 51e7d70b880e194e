"""The plan's own edits in flight: a PreToolUse that let a file-changing call through notes
it (by the call's `tool_use_id`) until its PostToolUse recorded the edit.

Agents run calls in parallel (Claude Code batches them; Codex runs hooks concurrently): edit 1
lands, and edit 2's PreToolUse runs before edit 1's PostToolUse advanced the plan, so it sees
target 1 changed. When a check blocks, the hook records the targets of the plan's other
calls still in flight (as their PostToolUse will) and checks again (also with none left: one
may have recorded its edit since the first look); any other drift still blocks. A target counts as the call's own only while it holds what that
call makes (`model.outcome`: the note keeps its digest; for a Write the content, for an Edit
the new text in place of the old): a change by another process, or by a call that never
landed, is drift whenever it comes. A PostToolUse advances the plan only for a note of its own
session (`mine`, by `tool_use_id`): a write no allowed PreToolUse checked never becomes
trusted. Notes live in CLUSTER/run/inflight-PLAN/, one small file per call,
and stop counting for others after EXPIRY seconds: a call whose PostToolUse never came (the
tool failed, the user refused it) is not waited for longer. A target whose outcome cannot be
said (a NotebookEdit, a patch's updated file) is never taken for the call's own: a parallel
call then blocks once, and the model retries after a re-read. The PostToolUse itself still
records what the target holds when it runs (`mine`).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from ..model.outcome import digest

EXPIRY = 60.0


def _folder(cluster: Path, plan: str) -> Path:
    return cluster / "run" / f"inflight-{hashlib.blake2b(plan.encode(), digest_size=8).hexdigest()}"


def _name(tool_use_id: str) -> str:
    return hashlib.blake2b(tool_use_id.encode(), digest_size=12).hexdigest() + ".json"


def add(
    cluster: Path,
    plan: str,
    tool_use_id: str,
    cwd: str,
    files: tuple[str, ...],
    owner: str,
    expect: Mapping[str, str | None],
) -> None:
    """Note the call `tool_use_id` of `plan` (its files, relative to `cwd`), let through for
    `owner` (session/subagent), as in flight; `expect`: the digest of what it makes of each
    file (`model.outcome.made`), or None where that cannot be said."""
    folder = _folder(cluster, plan)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / _name(tool_use_id)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(
        json.dumps(
            {
                "cwd": cwd,
                "files": list(files),
                "owner": owner,
                "time": time.time(),
                "expect": {f: expect.get(f) for f in files},
            }
        )
    )
    tmp.replace(path)


def others(cluster: Path, plan: str, tool_use_id: str | None) -> list[tuple[str, list[str]]]:
    """(cwd, files) of the calls of `plan` in flight besides `tool_use_id`, not expired, with
    only the files that hold what their call makes (`landed`)."""
    folder = _folder(cluster, plan)
    mine = _name(tool_use_id) if tool_use_id else None
    found = []
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return []
    now = time.time()
    for path in entries:
        if path.name == mine or not path.name.endswith(".json"):
            continue
        try:
            note = json.loads(path.read_text())
            if now - float(note["time"]) < EXPIRY:
                cwd = str(note["cwd"])
                files = [str(f) for f in note["files"] if landed(cwd, f, note["expect"].get(f))]
                if files:
                    found.append((cwd, files))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found


def landed(cwd: str, name: str, expected: object) -> bool:
    """Whether the file `name` (relative to `cwd`) holds what its call makes (`expected`,
    a digest; None or anything else: it cannot be said, so no)."""
    if not isinstance(expected, str):
        return False
    try:
        content: bytes | None = Path(cwd, name).read_bytes()
    except FileNotFoundError:
        content = None
    except OSError:
        return False
    return digest(content) == expected


def mine(cluster: Path, plan: str, tool_use_id: str, owner: str) -> tuple[str, list[str]] | None:
    """The call's PostToolUse: (cwd, files) of the note an allowed PreToolUse of the same
    `owner` left for `tool_use_id`, or None when there is none or it is another session's.
    The note counts here however old it is: a person may take minutes to approve a call its
    PreToolUse already checked. It stays until `remove` (after the advance: until then the
    plan's other calls must still see the call in flight)."""
    path = _folder(cluster, plan) / _name(tool_use_id)
    try:
        note = json.loads(path.read_text())
        if note["owner"] != owner:
            return None
        return str(note["cwd"]), [str(f) for f in note["files"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def made(cluster: Path, plan: str, tool_use_id: str) -> dict[str, object]:
    """What the call `tool_use_id` of `plan` makes of each of its files, as its note says
    (a digest, or None where it cannot be said); {} without a note."""
    try:
        expect = json.loads((_folder(cluster, plan) / _name(tool_use_id)).read_text())["expect"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return dict(expect) if isinstance(expect, dict) else {}


def remove(cluster: Path, plan: str, tool_use_id: str) -> None:
    """The call's PostToolUse recorded it: it is no longer in flight."""
    (_folder(cluster, plan) / _name(tool_use_id)).unlink(missing_ok=True)


def failed(cluster: Path, tool_use_id: str, owner: str) -> int:
    """The call `tool_use_id` of `owner` failed (its client said so): it made no change, so
    its notes, under whichever plan, are no longer in flight. Returns how many were removed."""
    removed = 0
    for path in (cluster / "run").glob(f"inflight-*/{_name(tool_use_id)}"):
        try:
            if json.loads(path.read_text())["owner"] == owner:
                path.unlink()
                removed += 1
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return removed
