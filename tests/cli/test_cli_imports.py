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


def test_authorize_loads_only_the_executor(cluster_dir: ClusterHandle) -> None:
    """A real decision (blocked: no owner runs) goes through the gate, the session pool and
    Noise, and nothing of the lab, the daemon, SQLite or pydantic."""
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
    assert {"planfence_net.executor.runner", "planfence_net.protocol.noise"} <= modules
    assert loaded(modules, NEVER + ("aiosqlite",)) == []
