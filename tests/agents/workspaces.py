"""A git worktree served by `planfence workspace serve`, as the agent tests use it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PLANFENCE = Path(sys.executable).parent / "planfence"  # this installation's command
COMMAND_TIMEOUT = 30.0
FILES = {"notes.txt": "what the plan read\n", "a.txt": "old\n"}


@dataclass(frozen=True, slots=True)
class Workspace:
    """A served git worktree. `planfence(...)` runs the command here and returns it."""

    path: Path

    def planfence(
        self,
        *args: str | Path,
        executable: Path = PLANFENCE,
        check: bool = True,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(executable), *map(str, args)],
            cwd=self.path,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
        if check and proc.returncode != 0:
            pytest.fail(
                f"planfence {' '.join(map(str, args))} exited {proc.returncode}: "
                f"{proc.stdout}{proc.stderr}"
            )
        return proc

    def git(self, *args: str) -> str:
        return subprocess.run(
            ["git", *args],
            cwd=self.path,
            check=True,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
        ).stdout


def hook_calls_answered(ws: Workspace, client: str) -> int:
    """How many of `client`'s hook calls the workspace owner answered itself (its log's
    `hook` lines), rather than handing them back to the ordinary command."""
    log = ws.path / ".planfence" / "logs" / "ws.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    events = [json.loads(line) for line in lines if line.startswith("{")]
    return sum(1 for e in events if e.get("event") == "hook" and e.get("client") == client)
