"""The protocol core does no I/O; the whole package is mypy --strict clean."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "planfence_net"
CORE = sorted(
    str(path.relative_to(PACKAGE).with_suffix(""))
    for layer in ("core", "protocol")
    for path in (PACKAGE / layer).glob("*.py")
    if path.name != "__init__.py"
)
IO_MODULES = {"anyio", "asyncio", "socket", "trio", "aiosqlite", "subprocess", "time", "datetime"}


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("module", CORE)
def test_core_module_does_no_io(module: str) -> None:
    names = imported(PACKAGE / f"{module}.py")
    assert "__future__" in names  # the parse did find the module's imports
    assert names & IO_MODULES == set()


def test_the_purity_check_sees_an_io_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import anyio\nfrom time import monotonic\n")
    assert imported(bad) & IO_MODULES == {"anyio", "time"}


def test_package_is_mypy_strict_clean() -> None:
    # The whole package, core included (pyproject.toml: strict, no cache; about 5 s).
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", PACKAGE.name],
        capture_output=True,
        text=True,
        cwd=PACKAGE.parent,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
