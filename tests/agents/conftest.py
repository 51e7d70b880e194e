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

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .clients import MISSING, find_clients
from .model_server import ModelServer
from .workspaces import COMMAND_TIMEOUT, FILES, PLANFENCE, Workspace


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
    ws = Workspace(tmp_path / "repo")
    ws.path.mkdir()
    ws.git("init", "-q", "-b", "main")
    ws.git("config", "user.email", "test@example.invalid")
    ws.git("config", "user.name", "test")
    for name, text in FILES.items():
        (ws.path / name).write_text(text)
    ws.git("add", ".")
    ws.git("commit", "-q", "-m", "initial")
    proc = subprocess.Popen(
        [str(PLANFENCE), "workspace", "serve", str(ws.path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed once the owner accepts sessions
        if "serving" not in line:
            pytest.fail(f"workspace serve did not start: {line}")
        yield ws
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=COMMAND_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
