"""Each baseline's requests per raced action, counted from the owners' own logs: a change that
makes a baseline cheaper or dearer fails here. Live 8-owner cluster and central store on
127.0.0.1; every action is raced (a revision of one declared key before it), so every safe
policy replans once."""

from __future__ import annotations

import collections
from collections.abc import Iterator

import anyio
import pytest

from planfence_net.bench.paper.experiments import (
    SAFETY_ABLATIONS,
    SAFETY_POLICIES,
    Case,
    Experiment,
)
from planfence_net.bench.paper.harness import bench_cluster, run_experiment
from planfence_net.bench.paper.requests import count_requests, read_requests
from planfence_net.bench.paper.workload import (
    EXECUTOR,
    ScheduleParams,
    fact_owners,
    load_templates,
    vary,
)
from planfence_net.cluster.folder import ClusterDir

EVERY = SAFETY_POLICIES + SAFETY_ABLATIONS
_ALL = load_templates()
TEMPLATES = (vary(_ALL[0], agents=5, keys=8, d=3), vary(_ALL[11], agents=4, keys=6, d=2))


@pytest.fixture(scope="module")
def counted(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[str, collections.Counter[tuple[str, str, str]]], list[dict], ClusterDir]]:
    """Two raced actions on each of two templates for every policy, and the requests each
    policy sent: policy -> Counter of (op, by, when)."""
    experiment = Experiment(
        "safety",
        (Case("count", "safety", 0, TEMPLATES, ScheduleParams(actions=2, revision=1.0), EVERY),),
    )
    with bench_cluster(tmp_path_factory.mktemp("requests") / "cluster") as cdir:
        rows = anyio.run(run_experiment, cdir, experiment, "loopback", 0, None, backend="asyncio")
        events = read_requests(cdir.log(name) for name in cdir.roster().names)
        counts, _ = count_requests(events, rows, EXECUTOR)
        by_policy: dict[str, collections.Counter[tuple[str, str, str]]] = {
            p: collections.Counter() for p in EVERY
        }
        for (policy, op, who, when), n in counts.items():
            by_policy[policy][(op, who, when)] += n
        yield by_policy, rows, cdir


def _in_stall(counts: collections.Counter[tuple[str, str, str]]) -> dict[tuple[str, str], int]:
    """Requests inside the stall, acknowledgements left out (their timing is the pushes')."""
    return {
        (op, who): n for (op, who, when), n in counts.items() if when == "stall" and op != "ack"
    }


def _owners(cdir: ClusterDir, rows: list[dict], policy: str) -> int:
    """How many owners the executor's D(a) spans, summed over the policy's actions."""
    roster = cdir.roster()
    return sum(
        len({roster.owner_of(k) for k in r["deps"].split(";")})
        for r in rows
        if r["policy"] == policy
    )


def test_every_action_of_the_count_case_is_raced_and_replanned(counted) -> None:
    _, rows, _ = counted
    assert {(r["policy"], r["replanned"], r["invalid"]) for r in rows} == {
        ("freshness", False, True),
        *((p, True, False) for p in EVERY if p != "freshness"),
    }


def test_freshness_asks_each_owner_of_the_declared_keys_once(counted) -> None:
    by_policy, rows, cdir = counted
    assert _in_stall(by_policy["freshness"]) == {
        ("heads", "executor"): _owners(cdir, rows, "freshness")
    }


def test_planfence_detects_fetches_after_the_mismatch_and_revalidates(counted) -> None:
    # heads to every owner of D(a), a get of the changed record from its owner, the replanned
    # plan written by the planner, heads again: 4 actions
    by_policy, rows, cdir = counted
    assert _in_stall(by_policy["planfence"]) == {
        ("heads", "executor"): 2 * _owners(cdir, rows, "planfence"),
        ("get", "executor"): 4,
        ("put", "others"): 4,
    }


def test_planfence_inline_takes_the_changed_record_from_the_heads_answer(counted) -> None:
    by_policy, rows, cdir = counted
    assert _in_stall(by_policy["planfence+inline"]) == {
        ("heads", "executor"): 2 * _owners(cdir, rows, "planfence+inline"),
        ("put", "others"): 4,
    }


def test_allkeys_asks_every_owner_of_the_templates_keys_twice(counted) -> None:
    by_policy, _, cdir = counted
    roster = cdir.roster()
    owners = sum(2 * len(fact_owners(roster, t)) for t in TEMPLATES)  # 2 actions each
    assert _in_stall(by_policy["allkeys"]) == {
        ("heads", "executor"): 2 * owners,
        ("get", "executor"): 4,
        ("put", "others"): 4,
    }


def test_central_validates_at_the_store_in_one_request_per_validation(counted) -> None:
    by_policy, _, _ = counted
    for policy in ("central", "central-wired"):
        assert _in_stall(by_policy[policy]) == {
            # 2 per action: detect, then the put-if (the replanned plan written at the store
            # and re-validated in one request): no put of its own
            ("validate", "executor"): 8,
        }, policy


def test_central_walk_keeps_six_sequential_round_trips(counted) -> None:
    by_policy, _, _ = counted
    assert _in_stall(by_policy["central-walk"]) == {
        # plan, its lineage, the replanned plan read back: 3 per action, less one lineage read
        # the seeded schedule makes unnecessary (an action whose inputs are all records the
        # executor read for the action before)
        ("get", "executor"): 11,
        ("heads", "executor"): 8,
        ("put", "others"): 4,
    }


def test_sync_sends_nothing_at_action_time(counted) -> None:
    by_policy, _, _ = counted
    inside = {k: n for k, n in by_policy["sync"].items() if k[2] == "stall"}
    assert inside == {("put", "others", "stall"): 4}  # only the planner's replanned plan
    # the updates complete before ready to act: each waits `synced` at its owner
    assert by_policy["sync"][("synced", "others", "action")] == 4
    # each update's push carries its record: the executor applies and acknowledges it
    # without a `get` (one ack per raced update; its puts are its own records)
    executor = {
        (op, when): n for (op, who, when), n in by_policy["sync"].items() if who == "executor"
    }
    assert executor == {("ack", "action"): 4, ("put", "action"): 4}


def test_sync_barrier_keeps_its_two_synced_rounds_and_fetch(counted) -> None:
    by_policy, rows, cdir = counted
    assert _in_stall(by_policy["sync-barrier"]) == {
        ("synced", "executor"): 2 * _owners(cdir, rows, "sync-barrier"),
        ("get", "executor"): 4,
        ("put", "others"): 4,
    }
