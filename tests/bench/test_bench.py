"""The ablation findings on a live cluster, and the `bench` command end to end."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

from planfence_net.bench.paper.experiments import Experiment, ablation_cases, first_of_each_family
from planfence_net.bench.paper.harness import bench_cluster, run_experiment
from planfence_net.bench.paper.workload import load_templates
from planfence_net.cli import bench as cli_bench
from planfence_net.cli.group import Group


@pytest.fixture(scope="module")
def ablation_rows(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[dict[str, Any]]]:
    """The quick ablations, run once on a live cluster that is always stopped."""
    cases = ablation_cases(first_of_each_family(load_templates()), quick=True)
    with bench_cluster(tmp_path_factory.mktemp("ablations") / "cluster") as cdir:
        yield anyio.run(
            run_experiment,
            cdir,
            Experiment("ablations", cases),
            "loopback",
            0,
            None,
            backend="asyncio",
        )


def outcomes(rows: list[dict[str, Any]], group: str, policy: str) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for r in rows:
        if r["group"] == group and r["policy"] == policy:
            found.setdefault(r["case"], []).append((r["issued"], r["invalid"], r["blocked"]))
    return found


def test_full_traversal_authorizes_depth_8_and_direct_parents_only_depth_1(
    ablation_rows: list[dict[str, Any]],
) -> None:
    full = outcomes(ablation_rows, "depth", "planfence")
    direct = outcomes(ablation_rows, "depth", "planfence-d1")
    assert full == {f"depth={n}": [(True, False, "")] for n in range(1, 9)}
    assert direct == {
        "depth=1": [(True, False, "")],
        **{f"depth={n}": [(False, False, "incomplete_declaration")] for n in range(2, 9)},
    }


def test_replanning_turns_races_into_valid_actions_and_without_it_they_block(
    ablation_rows: list[dict[str, Any]],
) -> None:
    assert outcomes(ablation_rows, "replan", "planfence") == {"replan": [(True, False, "")] * 6}
    assert outcomes(ablation_rows, "replan", "planfence-noreplan") == {
        "replan": [(False, False, "stale_plan")] * 6
    }


def test_omitting_dependencies_raises_unsafe_issuance_from_zero(
    ablation_rows: list[dict[str, Any]],
) -> None:
    found = outcomes(ablation_rows, "omission", "planfence")
    unsafe = {case: sum(bool(inv) for _, inv, _ in rows) for case, rows in found.items()}
    assert all(issued for rows in found.values() for issued, _, _ in rows)
    # The schedule is seeded: these are the actions whose revised key was left undeclared
    # (an omitting action declares 1 of its 4 dependencies: 3/4 x 50% = 37.5% expected).
    assert unsafe == {"omission=0": 0, "omission=0.25": 6, "omission=0.5": 10}
    declared = {r["declared"] for r in ablation_rows if r["group"] == "omission"}
    assert declared == {1, 4}


def test_fail_closed_blocks_each_fault_and_fail_open_issues_an_invalid_action(
    ablation_rows: list[dict[str, Any]],
) -> None:
    closed = outcomes(ablation_rows, "fault", "planfence")
    opened = outcomes(ablation_rows, "fault", "planfence-failopen")
    assert closed == {
        "fault=outage": [(False, False, "owner_unavailable")],
        "fault=missing_lineage": [(False, False, "missing_lineage")],
        "fault=malformed_heads": [(False, False, "malformed_response")],
        "fault=second_change": [(False, False, "changed_again")],
    }
    assert opened == {case: [(True, True, "")] for case in closed}


@pytest.fixture
def app() -> Group:
    app = Group("planfence", help="The bench command alone, in a group as in `planfence`.")
    cli_bench.register(app)
    return app


def test_unknown_experiment_is_one_line_and_exit_1(app: Group, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "nope", "--out", str(tmp_path / "x")])
    assert result.exit_code == 1
    assert result.output == (
        "error: unknown experiment 'nope' (known: safety, rate, keyspace, scope, ablations)\n"
    )


def test_without_matplotlib_the_bench_says_how_to_install_it(
    app: Group, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails
    result = CliRunner().invoke(app, ["bench", "scope", "--quick", "--out", str(tmp_path)])
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (
        "error: `planfence bench` draws its plots with matplotlib, which is not installed: "
        "pip install 'planfence-net[bench]'\n"
    )
    assert list(tmp_path.iterdir()) == []  # nothing ran


def test_unknown_profile_is_one_line_and_exit_1(app: Group, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["bench", "scope", "--profile", "dialup", "--quick", "--out", str(tmp_path / "x")]
    )
    assert result.exit_code == 1
    assert result.output.startswith("error: ") and "dialup" in result.output
    assert result.output.count("\n") == 1


def test_bench_scope_quick_writes_rows_report_and_plots(app: Group, tmp_path: Path) -> None:
    out = tmp_path / "scope"
    result = CliRunner().invoke(app, ["bench", "scope", "--quick", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.endswith(f"report: {out / 'report.md'}\n")
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * 2 * 6
    assert {r["policy"] for r in rows} == {"allkeys", "planfence"}
    assert all(r["issued"] and r["invalid"] is False for r in rows)
    report = (out / "report.md").read_text()
    assert "Command: `planfence bench scope --profile loopback --quick --seed 0`" in report
    # 6 actions of 3 workflows: the zero carries its exact 95% upper bound, 1 - 0.05 ** (1 / 6),
    # and an interval over 3 workflows says it is uninformative
    assert "| d=1 | planfence | 6 (3) | 6 | 0/6 (95% upper bound 39.30%) |" in report
    assert "(uninformative: 3 workflows)" in report
    assert "## Paired: each policy's mean stall relative to PlanFence's" in report
    assert {p.name for p in out.glob("*.png")} == {"traffic-vs-scope.png", "stall-vs-scope.png"}
    assert (out / "rows.csv").read_text().startswith("profile,case,group,x,policy,")
