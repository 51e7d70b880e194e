"""The policies and their ablation rows on a live 8-owner cluster with the central store, on
127.0.0.1."""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import msgpack
import pytest

from planfence_net.bench.paper import harness
from planfence_net.bench.paper.experiments import (
    SAFETY_ABLATIONS,
    SAFETY_POLICIES,
    Case,
    Experiment,
)
from planfence_net.bench.paper.harness import bench_cluster, run_experiment
from planfence_net.bench.paper.oracle import Oracle
from planfence_net.bench.paper.workload import (
    EXECUTOR,
    PLANNER,
    ScheduleParams,
    load_templates,
    vary,
)
from planfence_net.bench.policies import baselines
from planfence_net.bench.policies.baselines import make_baseline
from planfence_net.bench.policies.policy import Parts, Workflow
from planfence_net.bench.policies.writers import CentralWriter, OwnerWriter
from planfence_net.cluster.folder import ClusterDir
from planfence_net.core.errors import RequestError
from planfence_net.core.gate import Action
from planfence_net.core.records import Record, make_record, record_from_wire
from planfence_net.net.client import open_session
from planfence_net.net.transport import connect
from planfence_net.owners.logs import read_events
from support.cluster import PLANFENCE


@pytest.fixture(scope="module")
def bench_cdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterDir]:
    """8 owners and the central store, stopped at the end of the module even on failure."""
    with bench_cluster(tmp_path_factory.mktemp("bench") / "cluster") as cdir:
        yield cdir


EVERY = SAFETY_POLICIES + SAFETY_ABLATIONS


def safety_case(rho: float = 0.0, policies: tuple[str, ...] = EVERY) -> Experiment:
    templates = load_templates()
    chosen = (templates[0], templates[11], vary(templates[22], keys=16, d=4))
    return Experiment(
        "safety",
        (Case("safety", "safety", 0, chosen, ScheduleParams(actions=2, rho=rho), policies),),
    )


def test_freshness_issues_every_raced_action_invalid_and_the_safe_policies_none(
    bench_cdir: ClusterDir,
) -> None:
    rows = anyio.run(
        run_experiment, bench_cdir, safety_case(rho=1.0), "loopback", 0, None, backend="asyncio"
    )
    by_policy = {p: [r for r in rows if r["policy"] == p] for p in EVERY}
    assert {p: len(rs) for p, rs in by_policy.items()} == {p: 6 for p in EVERY}
    fresh = by_policy.pop("freshness")
    assert [r["issued"] for r in fresh] == [True] * 6
    assert [r["invalid"] for r in fresh] == [True] * 6
    for policy, mine in by_policy.items():
        assert [(r["issued"], r["invalid"], r["replanned"]) for r in mine] == [
            (True, False, True)
        ] * 6, policy
        assert all(r["bytes"] > 0 and r["stall_ms"] > 0 for r in mine), policy


def test_allkeys_moves_more_bytes_than_planfence_on_a_large_keyspace(
    bench_cdir: ClusterDir,
) -> None:
    big = vary(load_templates()[0], agents=8, keys=128, d=2)
    experiment = Experiment(
        "keyspace",
        (
            Case(
                "k",
                "keyspace",
                128,
                (big,),
                ScheduleParams(actions=2, revision=0.0),
                ("allkeys", "planfence"),
            ),
        ),
    )
    rows = anyio.run(run_experiment, bench_cdir, experiment, "loopback", 0, None, backend="asyncio")
    allkeys = [r["bytes"] for r in rows if r["policy"] == "allkeys"]
    fence = [r["bytes"] for r in rows if r["policy"] == "planfence"]
    assert min(allkeys) > 5 * max(fence)


def test_central_store_refuses_a_record_sent_by_someone_other_than_its_owner(
    bench_cdir: ClusterDir,
) -> None:
    roster = bench_cdir.roster()
    reqs = bench_cdir.identity("reqs")
    forged = make_record(
        reqs.signing_key,
        key="req/forged",
        owner="reqs",
        seq=10_000,
        parents=(),
        kind="fact",
        body={"v": 1},
    )

    async def send() -> None:
        async with open_session(roster, bench_cdir.identity("ops"), "central") as session:
            await session.request("put", {"record": forged.to_wire()})

    with pytest.raises(RequestError, match="a record of reqs sent by ops"):
        anyio.run(send, backend="asyncio")


def test_central_store_reads_a_record_without_building_what_no_record_holds(
    bench_cdir: ClusterDir,
) -> None:
    """Any roster member writes to the central store; a `record` of 12 MiB of nested empty
    arrays used to be decoded whole (12 million lists, about 700 MB); now it is refused
    from its first field."""
    roster = bench_cdir.roster()
    central = roster.agent("central")
    count = 12 * 1024 * 1024
    record = (
        b"\x99\xdd"
        + count.to_bytes(4, "big")
        + b"\x90" * count  # its first field
        + b"\x01" * 3
        + b"\x90"
        + b"\x01" * 4
    )  # and the other eight

    async def send() -> list[object]:
        stream = await connect(
            central.host,
            central.port,
            cluster=roster.cluster,
            static_private=bench_cdir.identity("ops").noise_private,
            remote_static=central.noise_key,
            match_responses=False,
        )
        try:
            await stream.send_message(b"\x93\x07\xa3put\x81\xa6record" + record)
            reply: list[object] = msgpack.unpackb(await stream.receive_message())
        finally:
            await stream.aclose()
        return reply

    assert anyio.run(send, backend="asyncio") == [
        7,
        False,
        {
            "code": "bad_request",
            "message": "record rejected: an array or map where a record field belongs",
        },
    ]
    status = Path(f"/proc/{int(bench_cdir.pid_file('central').read_text())}/status")
    peak_kb = next(
        int(line.split()[1])
        for line in status.read_text().splitlines()
        if line.startswith("VmHWM:")
    )
    assert peak_kb < 300 * 1024


async def _sync_against_an_outside_put(cdir: ClusterDir, k: int) -> tuple[bool, bool, bool]:
    """A plan on two keys; then a separate `planfence put` process (unknown to anything
    here) revises one; then `sync` with K = k validates. Returns (issued, replanned,
    invalid as judged by the oracle from the owners' logs)."""
    roster = cdir.roster()
    identity_of = functools.cache(cdir.identity)
    keys = (f"req/outside-k{k}/x0", f"inv/outside-k{k}/x1")
    async with anyio.create_task_group() as tg:
        writer = OwnerWriter(tg, roster, identity_of)
        facts = [await writer.put(key, {"v": 1}) for key in keys]
        parts = Parts(
            tg,
            roster,
            identity_of,
            EXECUTOR,
            {},
            writer,
            sync_k=k,
            workflows=(Workflow(f"outside-k{k}", keys, (PLANNER, EXECUTOR, "reqs", "inventory")),),
        )
        sync = make_baseline("sync-barrier", parts)
        await sync.start(list(keys))
        plan = await writer.put(
            f"plan/outside-k{k}", {"units": ["u0"]}, tuple(f.id for f in facts), kind="plan"
        )
        await sync.replica.add([*facts, plan])
        put = await anyio.to_thread.run_sync(
            functools.partial(
                subprocess.run,
                [str(PLANFENCE), "put", str(cdir.root), keys[0], "--body", '{"v": 2}'],
                capture_output=True,
                text=True,
            )
        )
        assert put.returncode == 0, put.stderr

        async def replan(_: Action, changed: tuple[Record, ...]) -> list[bytes]:
            latest = {r.key: r.id for r in (*facts, *changed)}  # the planner sees `changed`
            new = await writer.put(
                f"plan/outside-k{k}",
                {"units": ["u0"], "attempt": 1},
                tuple(latest[key] for key in keys),
                kind="plan",
            )
            await sync.replica.add([new])
            return [new.id]

        verdict = await sync.validate(Action(f"outside-k{k}", (plan.id,), keys), replan, list(keys))
        action_id = ""
        if verdict.issued:
            action_id = (
                await writer.put(f"ops/outside-k{k}", {"action": 1}, verdict.roots, kind="action")
            ).id.hex()
        await sync.aclose()
        await writer.aclose()
        tg.cancel_scope.cancel()
    oracle = Oracle.from_logs(cdir.log(name) for name in roster.names)
    invalid = bool(action_id) and oracle.judge(action_id, keys).invalid
    return verdict.issued, verdict.replanned, invalid


@pytest.mark.parametrize("k", [1, 4])
def test_sync_barrier_stays_safe_against_a_revision_written_by_another_process(
    bench_cdir: ClusterDir, k: int
) -> None:
    # With K = 4 the owner holds the push back: `synced` must flush it. Nothing here knows
    # the outside revision; sync learns it from the owners (pushes, acks, `synced`).
    assert anyio.run(_sync_against_an_outside_put, bench_cdir, k, backend="asyncio") == (
        True,
        True,
        False,
    )


class TickingClock:
    """A fake clock: every read returns the next whole second."""

    def __init__(self) -> None:
        self.now = -1.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_every_policy_times_the_same_span_with_the_model_call_apart(bench_cdir: ClusterDir) -> None:
    template = vary(load_templates()[3], keys=8, d=2)
    experiment = Experiment(
        "safety",
        (Case("span", "safety", 0, (template,), ScheduleParams(actions=1), EVERY),),
    )
    rows = anyio.run(
        run_experiment,
        bench_cdir,
        experiment,
        "loopback",
        0,
        None,
        lambda _: None,
        1,
        TickingClock(),
        backend="asyncio",
    )
    # The harness's clock is read at "ready to act" (t), around the replanning model call
    # (t+1, t+2) and at "authorized or blocked" (t+3), for every policy alike: stall 2 s,
    # model call 1 s apart. Freshness never replans: ready (t), done (t+1).
    assert {r["policy"]: (r["stall_ms"], r["replan_ms"], r["replanned"]) for r in rows} == {
        "freshness": (1000.0, 0.0, False),
        **{p: (2000.0, 1000.0, True) for p in EVERY if p != "freshness"},
    }


def test_central_validate_records_the_decision_only_when_every_key_matches(
    bench_cdir: ClusterDir,
) -> None:
    roster = bench_cdir.roster()
    identity_of = functools.cache(bench_cdir.identity)

    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        async with anyio.create_task_group() as tg:
            writer = CentralWriter(tg, roster, identity_of, lambda _: {})
            old = await writer.put("req/validate/x0", {"v": 1})
            other = await writer.put("inv/validate/x1", {"v": 1})
            new = await writer.put("req/validate/x0", {"v": 2})
            async with open_session(roster, identity_of("ops"), "central") as session:
                keys = ["req/validate/x0", "inv/validate/x1"]
                stale = await session.request(
                    "validate",
                    {
                        "keys": keys,
                        "expect": {keys[0]: old.id, keys[1]: other.id},
                        "short": True,
                        "action": "validate/stale",
                    },
                )
                fresh = await session.request(
                    "validate",
                    {
                        "keys": keys,
                        "expect": {keys[0]: new.id, keys[1]: other.id},
                        "short": True,
                        "action": "validate/fresh",
                    },
                )
            await writer.aclose()
            tg.cancel_scope.cancel()
        return stale, fresh

    stale, fresh = anyio.run(run, backend="asyncio")
    assert stale["matched"] is False
    assert [len(row) for row in stale["heads"]] == [3, 2]  # the changed key in full
    assert [record_from_wire(w).body for w in stale["records"]] == [{"v": 2}]
    assert fresh["matched"] is True
    assert [len(row) for row in fresh["heads"]] == [2, 2]
    decisions = [
        e["action"]
        for e in read_events(bench_cdir.log("central"), event="decision")
        if e["action"].startswith("validate/")
    ]
    assert decisions == ["validate/fresh"]


def test_sync_with_k4_batches_and_still_acts_on_a_complete_replica(bench_cdir: ClusterDir) -> None:
    # K = 4: owners hold pushes back until 4 updates gather; the writer completes each
    # action's burst of updates with one `synced` (which pushes what is held back), so at
    # ready to act the executor's replica holds the revision and it replans, never invalid.
    rows = anyio.run(
        run_experiment,
        bench_cdir,
        safety_case(rho=4.0, policies=("sync",)),
        "loopback",
        0,
        None,
        lambda _: None,
        4,
        backend="asyncio",
    )
    assert [(r["issued"], r["invalid"], r["replanned"]) for r in rows] == [(True, False, True)] * 6
    assert all(r["update_ms"] > 0 for r in rows)


def test_the_replan_never_reads_the_harness_view_of_the_heads(
    bench_cdir: ClusterDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside a policy's validation (the replan hook included) nothing reads the writer's
    `heads`, the harness's own view of every key: the replan plans from what the planner
    read before and the records the policy fetched."""
    inside = [False]
    reads_inside: list[str] = []

    class WatchedHeads(dict[str, Record]):
        def __getitem__(self, key: str) -> Record:
            if inside[0]:
                reads_inside.append(key)
            return super().__getitem__(key)

    real_writer, real_baseline = baselines.make_writer, baselines.make_baseline

    def watched_writer(*args: Any) -> Any:
        writer = real_writer(*args)
        writer.heads = WatchedHeads(writer.heads)
        return writer

    def watched_baseline(name: str, parts: Parts) -> Any:
        baseline: Any = real_baseline(name, parts)
        validate = baseline.validate

        async def wrapped(*args: Any) -> Any:
            inside[0] = True
            try:
                return await validate(*args)
            finally:
                inside[0] = False

        baseline.validate = wrapped
        return baseline

    monkeypatch.setattr(harness, "make_writer", watched_writer)
    monkeypatch.setattr(harness, "make_baseline", watched_baseline)
    rows = anyio.run(
        run_experiment,
        bench_cdir,
        safety_case(policies=("planfence", "sync")),
        "loopback",
        0,
        None,
        backend="asyncio",
    )
    assert [r["replanned"] for r in rows] == [True] * 12
    assert reads_inside == []


def test_the_central_writers_puts_of_one_owner_overlap_on_its_one_session(
    bench_cdir: ClusterDir,
) -> None:
    """No per-owner lock: concurrent puts of one owner are on the wire at once (their
    in-flight intervals intersect), on one session, and the store takes every one in seq
    order."""
    roster = bench_cdir.roster()

    async def run() -> tuple[dict[str, int], list[Record], int]:
        async with anyio.create_task_group() as tg:
            writer = CentralWriter(tg, roster, functools.cache(bench_cdir.identity), lambda _: {})
            try:
                first = await writer.put("req/overlap/x0", {"v": 0})  # opens the session
                async with anyio.create_task_group() as puts:
                    for i in range(1, 9):
                        puts.start_soon(writer.put, f"req/overlap/x{i % 3}", {"v": i})
                return (
                    writer.statistics(),
                    [first, *writer.heads.values()],
                    writer.pools["reqs"].connects,
                )
            finally:
                await writer.aclose()
                tg.cancel_scope.cancel()

    stats, records, connects = anyio.run(run, backend="asyncio")
    assert stats["peak_in_flight"] >= 2 and stats["in_flight"] == 0
    assert connects == 1
    stored = [
        e["seq"]
        for e in read_events(bench_cdir.log("central"), event="put")
        if e["key"].startswith("req/overlap/")
    ]
    assert len(stored) == 9 and stored == sorted(stored)
    assert stored[-1] - stored[0] == 8  # contiguous: no put was refused


def test_central_writes_the_replanned_plan_and_revalidates_in_one_request(
    bench_cdir: ClusterDir,
) -> None:
    """The put-if: a raced action under `central` costs two `validate` requests, the second
    carrying the replanned plan, which the store logs as a put by the planner."""
    template = vary(load_templates()[3], agents=4, keys=8, d=2)
    experiment = Experiment(
        "safety",
        (Case("putif", "safety", 0, (template,), ScheduleParams(actions=2), ("central",)),),
    )
    rows = anyio.run(run_experiment, bench_cdir, experiment, "loopback", 0, None, backend="asyncio")
    assert [(r["issued"], r["replanned"], r["invalid"]) for r in rows] == [(True, True, False)] * 2
    plans = [
        e
        for e in read_events(bench_cdir.log("central"), event="put")
        if e["owner"] == PLANNER
        and "/putif/" not in e["key"]
        and e["kind"] == "plan"
        and e["key"].startswith(f"plan/central/{template.name}/")
    ]
    assert len(plans) == 4  # each action's plan, and its replanned plan via the put-if


def test_the_central_store_never_draws_an_owners_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in a clean-clone run: a bench cluster's central store drew its port apart from
    the owners', and a draw that met an owner's port left that owner unable to start."""
    import planfence_net.bench.paper.benchcluster as benchcluster

    ports = iter([7311, 7312])  # the first central draw meets an owner's port
    owners_draw = iter(range(7300, 7320))
    monkeypatch.setattr("planfence_net.cluster.processes.free_port", lambda host: next(owners_draw))
    monkeypatch.setattr(benchcluster, "free_port", lambda: next(ports))
    cdir = benchcluster.init_bench_cluster(tmp_path / "cluster", agents=12)
    addresses = [agent.address for agent in cdir.roster().agents]
    assert len(set(addresses)) == len(addresses) == 13
    assert cdir.roster().agent("central").port == 7312
