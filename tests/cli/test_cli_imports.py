"""Each `planfence` command imports only what it uses.

An agent hook runs `planfence` before every tool call, so a fresh process must not load the
bench lab, plotting, the owner daemon or pydantic (typer's converter) on the way to a
decision. Asserted from `python -X importtime`, which names every module a process imported.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import typer
import typer.main
from typer._coercion import build_runtime_param

from planfence_net.cli.coerce import plain_coercion
from planfence_net.cli.main import app
from support.cluster import ClusterHandle

NEVER = ("matplotlib", "pydantic", "rich", "planfence_net.owners")
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


def _param(path: list[str], name: str) -> Any:
    command = typer.main.get_command(app)
    for part in path:
        command = command.commands[part]  # type: ignore[attr-defined]
    return next(p for p in command.params if p.name == name)


@pytest.mark.parametrize(
    ("path", "name", "values"),
    [
        (["authorize"], "deadline", ["2.5", "-1", ".5", "3.", "1e3", "abc", "", " 2", "nan", 4.0]),
        (["cluster", "init"], "base_port", ["7401", "+7", "-3", "1_0", " 7", "0x10", "7.0", 5]),
        (["authorize"], "root", [("ab",), ["x", "y"], "ab", ()]),
        (["authorize"], "path", ["some/dir", "-", ""]),
        (["authorize"], "json_out", [True, False, "yes", "0"]),
        (["put"], "as_agent", ["ops", b"ops", 3]),
    ],
)
def test_plain_coercion_agrees_with_typer(path: list[str], name: str, values: list[Any]) -> None:
    """Our converter gives what typer's gives, or typer's own error, for every value."""
    param = _param(path, name)
    plain = plain_coercion(param)
    assert plain is not None
    reference = build_runtime_param(param.type_descriptor)
    ctx = typer.Context(typer.main.get_command(app))
    for value in values:
        outcomes = []
        for converter in (plain, reference):
            try:
                outcomes.append(("ok", converter.coerce(value, param=param, ctx=ctx)))
            except typer.BadParameter as exc:
                outcomes.append(("error", exc.format_message()))
        assert repr(outcomes[0]) == repr(outcomes[1]), value  # repr: nan == nan
        assert type(outcomes[0][1]) is type(outcomes[1][1])
