"""Two agent sessions of one team, planning in the worktrees `api` and `web` (served_team).

A, B    the two sessions' ids
trust   `workspace trust PLAN --session SESSION` in one worktree against the team's cluster,
        asserting it succeeds quietly; returns its output lines
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.cluster import ClusterHandle
from support.workspace import quiet, run_cli

A, B = "aaaaaaaa-1111-4111-8111-111111111111", "bbbbbbbb-2222-4222-8222-222222222222"


def trust(handle: ClusterHandle, cwd: Path, plan: str, session: str, *args: Any) -> list[str]:
    code, out, err = run_cli(
        "workspace", "trust", plan, "--cluster", handle.path, "--session", session,
        "--lockfiles", "none", *args, cwd=cwd,
    )  # fmt: skip
    assert (code, quiet(err)) == (0, ""), out + err
    return out.splitlines()
