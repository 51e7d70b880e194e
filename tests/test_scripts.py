"""scripts/_venv.sh installs once per set of extras; scripts/demo says how to get `planfence`
on PATH (run against a stand-in venv whose `python` only records how it was called). Every
Python script in scripts/ is read by ruff, and what it imports from the package exists."""

from __future__ import annotations

import ast
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from support.source import defined_names

ROOT = Path(__file__).resolve().parents[1]


def fake_checkout(tmp_path: Path) -> tuple[Path, Path]:
    """A checkout with the real scripts and pyproject.toml and a stand-in .venv whose python
    appends its arguments to calls.txt; returns (root, calls.txt)."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    for name in ("_venv.sh", "demo"):
        shutil.copy(ROOT / "scripts" / name, root / "scripts" / name)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    calls = tmp_path / "calls.txt"
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("python", "planfence"):
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\n')
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return root, calls


def source_venv(root: Path, extras: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PLANFENCE_EXTRAS"}
    if extras:
        env["PLANFENCE_EXTRAS"] = extras
    subprocess.run(
        ["bash", "-c", f"source {root}/scripts/_venv.sh"],
        env=env,
        check=True,
        capture_output=True,
        timeout=30,
    )


def installs(calls: Path) -> list[str]:
    return [line for line in calls.read_text().splitlines() if " -e " in line]


def test_demo_and_test_do_not_reinstall_each_other(tmp_path: Path) -> None:
    root, calls = fake_checkout(tmp_path)
    source_venv(root, "test")
    source_venv(root, None)  # scripts/demo after scripts/test: the test extras cover it
    source_venv(root, "test")
    assert installs(calls) == [
        f"python -m pip install --quiet --disable-pip-version-check -e {root}[test]"
    ]
    (root / "pyproject.toml").write_text((root / "pyproject.toml").read_text() + "\n")
    source_venv(root, None)  # a changed pyproject.toml installs again
    source_venv(root, "test")  # and the test tools once more on top
    assert len(installs(calls)) == 3
    assert len(list((root / ".venv").glob(".installed-*"))) == 2


def test_demo_says_how_to_put_planfence_on_path(tmp_path: Path) -> None:
    root, calls = fake_checkout(tmp_path)
    source_venv(root, "test")
    proc = subprocess.run(
        [root / "scripts" / "demo", "--profile", "loopback"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0
    assert calls.read_text().splitlines()[-1] == "planfence demo --profile loopback"
    assert proc.stderr.splitlines()[-1] == (
        f'to use planfence by hand: export PATH="{root}/.venv/bin:$PATH"'
    )


def python_scripts(root: Path) -> list[str]:
    """The Python scripts of `root`/scripts: a `.py` suffix or a `python` shebang."""
    return sorted(
        path.name
        for path in (root / "scripts").iterdir()
        if path.is_file() and (path.suffix == ".py" or is_python_shebang(path))
    )


def is_python_shebang(path: Path) -> bool:
    first = path.read_text().partition("\n")[0]
    return first.startswith("#!") and "python" in first


def ruff_misses(root: Path) -> list[str]:
    """The Python scripts of `root`/scripts that `ruff check .`, run in `root` with its
    pyproject.toml, does not read (so neither does `ruff format`: they share the file set)."""
    shown = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--show-files", "."],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    covered = {Path(line).name for line in shown if Path(line).parent.name == "scripts"}
    return [name for name in python_scripts(root) if name not in covered]


def test_ruff_reads_every_python_script() -> None:
    assert {"_benchenv.py", "bench-latency", "bench-hook"} <= set(python_scripts(ROOT))
    assert "test" not in python_scripts(ROOT)  # a bash script is not Python
    assert ruff_misses(ROOT) == []


def test_a_python_script_outside_ruff_is_found(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for name in ("bench-new", "tool", "helper.py"):
        (tmp_path / "scripts" / name).write_text("#!/usr/bin/env python3\nprint(1)\n")
    (tmp_path / "scripts" / "run").write_text("#!/usr/bin/env bash\necho 1\n")
    assert ruff_misses(tmp_path) == ["tool"]


def missing_imports(script: Path, root: Path = ROOT) -> list[str]:
    """`module:name` for every `from planfence_net... import name` in `script` (at any depth)
    whose module or name is not in the package under `root`; read from source, not imported."""
    missing = []
    for node in ast.walk(ast.parse(script.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        name = node.module or ""
        if not name.startswith("planfence_net"):
            continue
        base = root.joinpath(*name.split("."))
        module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if not module.is_file():
            missing.append(name)
            continue
        for alias in node.names:
            submodule = base / alias.name
            if not (
                submodule.with_suffix(".py").is_file()
                or submodule.is_dir()
                or alias.name in defined_names(module)
            ):
                missing.append(f"{name}:{alias.name}")
    return missing


@pytest.mark.parametrize("name", python_scripts(ROOT))
def test_what_a_script_imports_from_the_package_exists(name: str) -> None:
    assert missing_imports(ROOT / "scripts" / name) == []


def test_a_script_importing_a_moved_module_is_found(tmp_path: Path) -> None:
    script = tmp_path / "bench-x"
    script.write_text(
        "from planfence_net.bench.paper.published.report import write_report\n"
        "from planfence_net.bench.perf import growth, nothing_here\n"
        "from planfence_net.cli.bench import _notes, _gone\n"
    )
    assert missing_imports(script) == [
        "planfence_net.bench.paper.published.report",
        "planfence_net.bench.perf:nothing_here",
        "planfence_net.cli.bench:_gone",
    ]


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "scripts").glob("bench-*")))
def test_every_bench_script_answers_help_from_a_bare_interpreter(script: str) -> None:
    """Run with no site packages (as `scripts/X` runs on a machine whose python3 lacks the
    project's dependencies), each bench script prints its usage and exits 0: it brings its own
    .venv (_benchenv.prepare) before importing anything it needs, and `--help` runs nothing."""
    env = {k: v for k, v in os.environ.items() if k != "PLANFENCE_BENCH_READY"}
    proc = subprocess.run(
        [sys.executable, "-S", ROOT / "scripts" / script, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: {script}") or proc.stdout.startswith(
        f"usage: scripts/{script}"
    ), proc.stdout
