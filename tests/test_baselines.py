"""The five policies on a live 8-owner cluster with the central store, on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from planfence_net.cluster import ClusterDir
from planfence_net.errors import RequestError
from planfence_net.bench.experiments import SAFETY_POLICIES, Case, Experiment
from planfence_net.bench.harness import bench_cluster, run_experiment
from planfence_net.bench.workload import ScheduleParams, load_templates, vary
from planfence_net.client import open_session
from planfence_net.records import make_record


@pytest.fixture(scope="module")
def bench_cdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterDir]:
    """8 owners and the central store, stopped at the end of the module even on failure."""
    with bench_cluster(tmp_path_factory.mktemp("bench") / "cluster") as cdir:
        yield cdir


def safety_case(rho: float = 0.0) -> Experiment:
    templates = load_templates()
    chosen = (templates[0], templates[11], vary(templates[22], keys=16, d=4))
    return Experiment("safety", (Case("safety", "safety", 0, chosen,
                                      ScheduleParams(actions=2, rho=rho), SAFETY_POLICIES),))


def test_freshness_issues_every_raced_action_invalid_and_the_safe_policies_none(
        bench_cdir: ClusterDir) -> None:
    rows = anyio.run(run_experiment, bench_cdir, safety_case(rho=1.0), "loopback", 0, None,
                     backend="asyncio")
    by_policy = {p: [r for r in rows if r["policy"] == p] for p in SAFETY_POLICIES}
    assert {p: len(rs) for p, rs in by_policy.items()} == {p: 6 for p in SAFETY_POLICIES}
    fresh = by_policy.pop("freshness")
    assert [r["issued"] for r in fresh] == [True] * 6
    assert [r["invalid"] for r in fresh] == [True] * 6
    for policy, mine in by_policy.items():
        assert [(r["issued"], r["invalid"], r["replanned"]) for r in mine] == \
            [(True, False, True)] * 6, policy
        assert all(r["bytes"] > 0 and r["stall_ms"] > 0 for r in mine), policy


def test_allkeys_moves_more_bytes_than_planfence_on_a_large_keyspace(
        bench_cdir: ClusterDir) -> None:
    big = vary(load_templates()[0], agents=8, keys=128, d=2)
    experiment = Experiment("keyspace", (Case("k", "keyspace", 128, (big,),
                                              ScheduleParams(actions=2, revision=0.0),
                                              ("allkeys", "planfence")),))
    rows = anyio.run(run_experiment, bench_cdir, experiment, "loopback", 0, None,
                     backend="asyncio")
    allkeys = [r["bytes"] for r in rows if r["policy"] == "allkeys"]
    fence = [r["bytes"] for r in rows if r["policy"] == "planfence"]
    assert min(allkeys) > 5 * max(fence)


def test_central_store_refuses_a_record_sent_by_someone_other_than_its_owner(
        bench_cdir: ClusterDir) -> None:
    roster = bench_cdir.roster()
    reqs = bench_cdir.identity("reqs")
    forged = make_record(reqs.signing_key, key="req/forged", owner="reqs", seq=10_000,
                         parents=(), kind="fact", body={"v": 1})

    async def send() -> None:
        async with open_session(roster, bench_cdir.identity("ops"), "central") as session:
            await session.request("put", {"record": forged.to_wire()})

    with pytest.raises(RequestError, match="a record of reqs sent by ops"):
        anyio.run(send, backend="asyncio")


def test_sync_with_k_above_one_stays_safe(
        bench_cdir: ClusterDir) -> None:
    templates = load_templates()
    experiment = Experiment("rate", (Case("rate", "rate", 4, (templates[0],),
                                          ScheduleParams(actions=4, rho=4.0), ("sync",)),))
    k1, k4 = (anyio.run(run_experiment, bench_cdir, experiment, "loopback", 0, None,
                        lambda _: None, k, backend="asyncio") for k in (1, 4))
    # with K=4 most actions find the copy behind and pull; none may act on a stale plan
    for rows in (k1, k4):
        assert [(r["issued"], r["invalid"], r["replanned"]) for r in rows] == \
            [(True, False, True)] * 4
