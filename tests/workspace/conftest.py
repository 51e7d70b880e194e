"""Fixtures shared by the workspace tests.

team   worktrees `api` (main) and `web` (branch web) of one repository, each served by its
       owner as a real process on 127.0.0.1 (support.workspace.served_team); stopped after
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cluster import ClusterHandle
from support.workspace import served_team


@pytest.fixture
def team(tmp_path: Path) -> Iterator[tuple[ClusterHandle, Path, Path]]:
    """Worktrees `api` (main) and `web` (branch web) of one repository, each served."""
    with served_team(tmp_path, {"src/lib.py": "v = 1\n", "src/other.py": "w = 1\n"}) as team:
        yield team
