"""Fixtures for the end-to-end tests with the real Claude Code and Codex CLIs.

    claude, codex   the pinned executables from scripts/install-agents (a test module
                    calls clients.skip_without_clients() first: one skip line when they are absent)
    model_server    a scripted ModelServer on 127.0.0.1, closed after the test
    workspace       a git repository (notes.txt, a.txt committed) served by a real
                    `planfence workspace serve` process, stopped after the test

The clients and PlanFence run as subprocesses, as a developer runs them; the `planfence`
used is the one next to the interpreter running the tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.workspace import make_repo, served

from .clients import MISSING, find_clients
from .model_server import ModelServer
from .workspaces import FILES, Workspace


@pytest.fixture
def claude() -> Path:
    path = find_clients().claude
    assert path is not None, MISSING
    return path


@pytest.fixture
def codex() -> Path:
    path = find_clients().codex
    assert path is not None, MISSING
    return path


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    server = ModelServer().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    ws = Workspace(make_repo(tmp_path / "repo", FILES))
    # the owner runs as the clients do, with their HOME (`tmp_path / "home"`), so it answers
    # their hook calls itself (`hook.client.environment`), as on a user's machine
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    with served(ws.path, env={"HOME": str(home)}):  # once it accepts sessions; stopped after
        yield ws
