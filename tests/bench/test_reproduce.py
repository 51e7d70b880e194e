"""`scripts/reproduce` (bench/paper/reproduce.py): its help, where it writes, and a quick run
that leaves the checkout as it found it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from planfence_net.bench.paper import reproduce

ROOT = Path(__file__).resolve().parents[2]
SKIP_DIRS = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".hypothesis"}


def checkout_state() -> dict[str, tuple[int, int]]:
    """Every file of the checkout (caches and the venv aside) with its mtime and size."""
    found = {}
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in files:
            path = Path(folder) / name
            stat = path.stat()
            found[str(path.relative_to(ROOT))] = (stat.st_mtime_ns, stat.st_size)
    return found


def test_help_lists_every_experiment_with_what_it_takes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        reproduce.main(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for run in reproduce.RUNS:
        line = next(line for line in text.splitlines() if line.split()[:1] == [run.name])
        assert "min" in line or " s" in line  # how long it takes
    assert "--quick" in text and "--out" in text
    assert "safety-att-lte" in text and "traces" in text.split("safety-att-lte ")[1].split("\n")[0]


def test_without_out_the_reports_go_to_a_new_folder_outside_the_checkout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert reproduce.main(["--dry-run", "--quick"]) == 0
    commands = capsys.readouterr().out.splitlines()
    assert len(commands) == len(reproduce.RUNS)
    outs = {Path(line.split("--out ")[1].split()[0]).parent for line in commands}
    assert len(outs) == 1
    out = outs.pop()
    assert not out.resolve().is_relative_to(ROOT)
    assert all("--quick" in c or "--reps 2" in c for c in commands)


def test_an_unknown_experiment_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert reproduce.main(["safety-mars"]) == 2
    assert capsys.readouterr().err == "error: unknown experiment 'safety-mars' (see --help)\n"


def test_a_run_without_its_traces_is_skipped_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLANFENCE_TRACES", str(tmp_path / "none"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    said: list[str] = []
    runs = reproduce.choose(["figure2-att-lte"], loopback_only=False)
    failed = reproduce.reproduce(
        runs, tmp_path / "out", True, 0, said.append, execute=lambda *_: pytest.fail("ran")
    )
    assert failed == 0
    assert len(said) == 1 and said[0].startswith("skipped: figure2-att-lte (trace ")


def _quick(tmp_path: Path, *names: str, loopback_only: bool = False) -> None:
    before = checkout_state()
    done = subprocess.run(
        [sys.executable, "-m", "planfence_net.bench.paper.reproduce", "--quick"]
        + ["--out", str(tmp_path / "out"), *names]
        + (["--loopback-only"] if loopback_only else []),
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for name in names or [r.name for r in reproduce.RUNS if r.profile == "loopback"]:
        assert (tmp_path / "out" / name / "report.md").is_file(), done.stdout
    assert checkout_state() == before


def test_a_quick_run_writes_its_report_into_out_and_nothing_into_the_checkout(
    tmp_path: Path,
) -> None:
    _quick(tmp_path, "scope-loopback")


@pytest.mark.slow
@pytest.mark.reproduce  # not in the default suite: .ci/run runs it as a group of its own
@pytest.mark.timeout(1800)
def test_every_quick_loopback_run_writes_nothing_into_the_checkout(tmp_path: Path) -> None:
    _quick(tmp_path, loopback_only=True)
