"""scripts/_venv.sh installs once per set of extras; scripts/demo says how to get `planfence`
on PATH. Run against a stand-in venv whose `python` only records how it was called."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

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
