"""The live team with the real small model (SmolLM2-135M-Instruct on the CPU): the `live`
group, which skips with one line where the `live` extra is not installed."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from planfence_net.bench.live.model import load_model, missing
from planfence_net.bench.live.team import run_team, team_rows, workflows
from planfence_net.bench.paper.harness import bench_cluster

pytestmark = [pytest.mark.live, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, int]]]:
    why = missing()
    if why is not None:
        pytest.skip(f"live: {why}")
    model = load_model()
    with bench_cluster(tmp_path_factory.mktemp("live") / "cluster") as cdir:
        outcomes = anyio.run(run_team, cdir, model, workflows(1), backend="asyncio")
    yield {row["policy"]: row for row in team_rows(outcomes)}


def test_a_real_model_acts_on_every_stale_plan_only_without_the_fence(
    rows: dict[str, dict[str, int]],
) -> None:
    assert rows["freshness"]["stale"] == rows["freshness"]["workflows"] == 3
    for policy in ("planfence", "central"):
        assert (rows[policy]["issued"], rows[policy]["stale"], rows[policy]["replans"]) == (3, 0, 3)


def test_the_models_own_mistakes_are_counted_within_the_workflows(
    rows: dict[str, dict[str, int]],
) -> None:
    assert all(0 <= row["model_errors"] <= row["issued"] for row in rows.values())
