"""The live team's study on a live cluster, with a scripted model in the language model's
place (the real SmolLM2 run is in the `live` group: tests/bench/test_live_model.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from planfence_net.bench.live.run import report_md
from planfence_net.bench.live.team import (
    PLAN_SYSTEM,
    run_team,
    team_problems,
    team_rows,
    workflows,
)
from planfence_net.bench.paper.harness import bench_cluster
from planfence_net.bench.paper.scenario import Outcome


class Echo:
    """Says every value it was given: the plan repeats the requirement's values, the action
    repeats the plan. With `drop`, the plan leaves that value out (a model's own mistake)."""

    name = "echo"

    def __init__(self, drop: str | None = None) -> None:
        self.drop = drop

    def complete(self, system: str, prompt: str, max_tokens: int) -> str:
        if system == PLAN_SYSTEM:
            body = json.loads(re.search(r"Requirement: (\{.*\})\.$", prompt).group(1))  # type: ignore[union-attr]
            values = [str(v) for v in body.values() if str(v) != self.drop]
            return "Plan: " + ", ".join(values)
        return "Doing it: " + prompt.removeprefix("Plan: ")


@pytest.fixture(scope="module")
def studies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[Outcome]]]:
    """One workflow of each family under every policy, with a faithful model and with one
    that drops the deployment's version from its plan, on one live cluster."""
    with bench_cluster(tmp_path_factory.mktemp("live") / "cluster") as cdir:
        yield {
            name: anyio.run(run_team, cdir, model, workflows(1), backend="asyncio")
            for name, model in (("faithful", Echo()), ("sloppy", Echo(drop="9.4.1")))
        }


def rows_by_policy(outcomes: list[Outcome]) -> dict[str, dict[str, Any]]:
    return {row["policy"]: row for row in team_rows(outcomes)}


def test_freshness_acts_on_every_stale_plan_and_the_safe_policies_on_none(
    studies: dict[str, list[Outcome]],
) -> None:
    rows = rows_by_policy(studies["faithful"])
    assert rows["freshness"]["stale"] == 3
    assert rows["freshness"]["replans"] == 0
    for policy in ("planfence", "central"):
        assert (rows[policy]["issued"], rows[policy]["stale"]) == (3, 0)
        assert rows[policy]["replans"] == 3
    assert all(row["model_errors"] == 0 for row in rows.values())
    assert team_problems(list(rows.values())) == []


def test_the_executor_acts_on_the_plan_in_force(studies: dict[str, list[Outcome]]) -> None:
    said = {(o.policy, o.family): o.said for o in studies["faithful"]}
    # the deployment's requirement moves from 9.3.0 to 9.4.1 after planning
    assert "9.3.0" in str(said[("freshness", "deployment-0")])
    assert "9.4.1" in str(said[("planfence", "deployment-0")])


def test_a_models_own_mistake_is_counted_apart_from_stale_plans(
    studies: dict[str, list[Outcome]],
) -> None:
    rows = rows_by_policy(studies["sloppy"])
    # the replanned deployment plan leaves 9.4.1 out: a model error under every safe policy
    assert rows["planfence"]["model_errors"] == 1
    assert rows["planfence"]["stale"] == 0
    # freshness acts on the 9.3.0 plan, which is complete and stale
    assert (rows["freshness"]["model_errors"], rows["freshness"]["stale"]) == (0, 3)


def test_workflows_have_keys_and_numbers_of_their_own() -> None:
    flows = workflows(2)
    assert len(flows) == 6
    assert len({f.requirement for f in flows}) == 6
    first, second = (f for f in flows if f.name.startswith("reservation"))
    assert (first.r3["guests"], second.r3["guests"]) == (3, 4)


def test_the_report_gives_the_table_and_says_whether_the_claim_held(
    studies: dict[str, list[Outcome]],
) -> None:
    rows = team_rows(studies["faithful"])
    report = {
        "model": "echo",
        "per_family": 1,
        "model_calls": 0,
        "seconds": 1.0,
        "load_before": 0.5,
        "load_after": 0.5,
        "rows": rows,
        "problems": team_problems(rows),
    }
    text = report_md(report, "scripts/bench-live --quick")
    assert "| freshness | 3 | 3 | 3 | 0 | 0 | 0 |" in text
    assert "Claim checked: holds" in text
    broken = {**report, "problems": ["freshness acted on a stale plan in 2 of 3"]}
    assert "Claim checked: freshness acted on a stale plan in 2 of 3" in report_md(broken, "x")
