"""The Claude Code status line: `planfence view --statusline`, which `hook install claude
--statusline` writes as the `statusLine` command. Claude Code runs it every few hundred ms
with the session as JSON on stdin and shows its first line of stdout.

It never asks an owner: it reads the status the collector keeps in the cluster folder
(`view/status.json`, written by a running `planfence view`), and when that is missing or
older than FRESH seconds it folds the owners' logs itself (local files, no bodies fetched)
and leaves the status there for the next call. It prints e.g. `fence ok · 3 plans · 1 stale`,
prefixed with this session's own state when that is not `working`, and `fence: no cluster
serves this folder` where none does. It always exits 0 (a status line has no error path).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import IO, Any

FRESH = 2.0  # seconds a status written by the collector (or a previous call) stays good


def status_text(data: dict[str, Any], cluster: Path | None = None) -> str:
    """The status line for the Claude Code session `data` (its stdin JSON)."""
    from ..workspace.place.config import NoCluster, find_cluster

    cwd = data.get("workspace", {}).get("current_dir") if isinstance(data, dict) else None
    start = Path(cwd or data.get("cwd") or os.getcwd())
    try:
        cdir = find_cluster(cluster, start)
    except NoCluster:
        return "fence: no cluster serves this folder"
    except Exception:  # a status line reports, never fails: an unsafe folder, a bad roster
        return "fence: no cluster serves this folder"
    status = _cached(cdir.root)
    if status is None:
        status = _fold(cdir.root)
    mine = status.get("states", {}).get(str(data.get("session_id") or ""))
    text = str(status.get("text", "fence: no status"))
    return f"this session {mine} · {text}" if mine and mine != "working" else text


def main(stdin: IO[str], cluster: Path | None = None) -> str:
    """Read the session JSON from `stdin` (anything unreadable counts as `{}`)."""
    try:
        data = json.loads(stdin.read() or "{}")
    except ValueError:
        data = {}
    return status_text(data if isinstance(data, dict) else {}, cluster)


def _cached(root: Path) -> dict[str, Any] | None:
    from .collect import STATUS

    path = root / STATUS
    try:
        if time.time() - path.stat().st_mtime > FRESH:
            return None
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _fold(root: Path) -> dict[str, Any]:
    """The status from the logs alone (no owner asked), written back for the next call."""
    from ..cluster.folder import ClusterDir
    from .collect import Collector

    collector = Collector(ClusterDir(root), fetch=False)
    collector.round()
    collector.write_status()
    return collector.team.status()
