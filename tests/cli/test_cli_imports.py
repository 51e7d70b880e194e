"""Each `planfence` command imports only what it uses.

An agent hook runs `planfence` before every tool call, so a fresh process must not load the
bench lab, plotting, the owner daemon, rich or pydantic on the way to a decision. Asserted
from `python -X importtime`, which names every module a process imported.
"""

from __future__ import annotations

import subprocess
import sys

from support.cluster import ClusterHandle

NEVER = ("matplotlib", "pydantic", "typer", "rich", "planfence_net.owners")
LAB = "planfence_net.bench."  # the package itself only names the experiments for --help


def imported(*args: str) -> tuple[int, set[str]]:
    """Run `python -X importtime -m planfence_net ARGS`; (exit code, modules imported)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "planfence_net", *args],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return proc.returncode, modules


def loaded(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    """The modules of `packages` (and of the lab) among `modules`."""
    return sorted(
        m
        for m in modules
        if m.startswith(LAB) or any(m == p or m.startswith(p + ".") for p in packages)
    )


def test_help_loads_no_library() -> None:
    code, modules = imported("--help")
    assert code == 0
    assert "planfence_net.cli.main" in modules  # the measurement sees our own imports
    assert loaded(modules, NEVER + ("anyio", "nacl", "msgpack", "planfence_net.net.client")) == []
    # the command list comes from cli/main.py's table: no command module is imported
    assert sorted(m for m in modules if m.startswith("planfence_net")) == [
        "planfence_net",
        "planfence_net.cli",
        "planfence_net.cli.group",
        "planfence_net.cli.main",
    ]


def test_a_command_loads_only_its_own_module() -> None:
    code, modules = imported("put", "--help")
    assert code == 0
    commands = {m for m in modules if m.startswith("planfence_net.cli.")}
    assert "planfence_net.cli.records" in commands
    assert commands.isdisjoint(
        {"planfence_net.cli.executor", "planfence_net.cli.bench", "planfence_net.cli.traces"}
    )


ONE_SHOT_NEVER = (
    "click",
    "anyio",
    "asyncio",
    "uvloop",
    "planfence_net.cli.main",
    # the async executor and network (the blocking client and runner are the one-shot's own)
    "planfence_net.executor.pool",
    "planfence_net.executor.runner",
    "planfence_net.executor.replica",
    "planfence_net.net.api",
    "planfence_net.net.client",
    "planfence_net.net.slots",
    "planfence_net.net.socketwire",
    "planfence_net.net.transport",
    "planfence_net.cluster.processes",  # no shapers or links.toml: nothing to look up
)


def test_authorize_decides_without_click_or_an_event_loop(cluster_dir: ClusterHandle) -> None:
    """A real one-shot decision (blocked: no owner runs) goes through the gate, the blocking
    sessions and Noise, and nothing of click, anyio, asyncio, the lab, the daemon, SQLite
    or pydantic."""
    code, modules = imported(
        "authorize",
        str(cluster_dir.path),
        "--root",
        "ab" * 32,
        "--dep",
        "req/order-1",
        "--as",
        "ops",
    )
    assert code == 3  # blocked: missing lineage, every owner is down
    assert {
        "planfence_net.cli.oneshot",
        "planfence_net.core.drive",
        "planfence_net.net.syncclient",
        "planfence_net.protocol.noise",
    } <= modules
    assert loaded(modules, NEVER + ONE_SHOT_NEVER + ("aiosqlite",)) == []


def test_authorize_that_click_must_parse_goes_to_click(cluster_dir: ClusterHandle) -> None:
    """An id prefix (looked up in the stores) is not the one-shot path's to handle."""
    code, modules = imported(
        "authorize", str(cluster_dir.path), "--root", "abababab", "--dep", "req/order-1"
    )
    assert code == 1  # no record id starts with abababab (no store yet)
    assert {"click", "planfence_net.cli.main", "planfence_net.cli.executor"} <= modules
