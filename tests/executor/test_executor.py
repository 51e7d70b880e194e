"""The PlanFence gate against real owner processes on 127.0.0.1 (issue 3 acceptance)."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import pytest

from planfence_net.bench.policies.writers import OwnerWriter
from planfence_net.core.answers import HeadsQuery
from planfence_net.core.gate import Action
from planfence_net.core.records import Record
from planfence_net.executor.pool import SessionPool
from planfence_net.executor.replica import Replica, settle
from planfence_net.executor.runner import GateRun, GateRunner
from planfence_net.net.api import wait_owner_ready
from support.cluster import REPO

pytestmark = pytest.mark.anyio
DEADLINE = 1.5


@dataclass
class World:
    """A live cluster with writers for every agent and an executor (agent `ops`)."""

    cluster: object
    writer: OwnerWriter
    runner: GateRunner

    async def put(
        self, key: str, body: object, parents: list[bytes] | None = None, kind: str = "fact"
    ) -> bytes:
        """Write as the key's owner; returns the record id."""
        return (await self.writer.put(key, body, tuple(parents or ()), kind)).id

    async def plan(self, suffix: str = "") -> tuple[bytes, bytes, bytes]:
        """r3 (req), a fact (inv), and a plan derived from both; returns (r3, fact, plan)."""
        r3 = await self.put(f"req/order{suffix}", {"qty": 3})
        fact = await self.put(f"inv/stock{suffix}", {"on_hand": 40})
        plan = await self.put(f"plan/ship{suffix}", {"steps": ["ship 3"]}, [r3, fact], kind="plan")
        return r3, fact, plan

    async def decide(
        self, plan: bytes, deps: tuple[str, ...] = ("req/order", "inv/stock"), replan=None
    ) -> GateRun:  # type: ignore[no-untyped-def]
        return await self.runner.wait_decision(Action("ship", (plan,), deps), replan)


@asynccontextmanager
async def world(cluster) -> AsyncIterator[World]:  # type: ignore[no-untyped-def]
    async with anyio.create_task_group() as tg:
        writer = OwnerWriter(tg, cluster.roster, cluster.identity)
        pool = SessionPool(tg, cluster.roster, cluster.identity("ops"))
        yield World(cluster, writer, GateRunner(pool, await Replica.open(None), timeout=DEADLINE))
        await pool.aclose()
        await writer.aclose()
        tg.cancel_scope.cancel()


def heads_requests(cluster, agent: str) -> list[dict]:  # type: ignore[no-untyped-def]
    return [
        e for e in cluster.events(agent, "request") if e["op"] == "heads" and e["peer"] == "ops"
    ]


async def test_match_is_authorized_in_one_round_trip_per_owner(live_cluster) -> None:  # type: ignore[no-untyped-def]
    async with world(live_cluster) as w:
        r3, fact, plan = await w.plan()
        await w.runner.fetch((plan, r3, fact))  # into the replica
        run = await w.decide(plan)
    d = run.decision
    assert (d.outcome, d.reason, d.replanned, d.round_trips) == ("authorized", None, False, 1)
    assert d.frontier == {"req/order": r3, "inv/stock": fact}
    assert d.heads["req/order"][0] == r3 and d.heads["inv/stock"][0] == fact
    for owner in ("reqs", "inventory"):  # the log line is written after the reply is sent
        live_cluster.wait_event(owner, "request", lambda e: e["op"] == "heads")
        assert len(heads_requests(live_cluster, owner)) == 1
    # every key has an expected id, so the request names each key once (`expect` alone)
    assert heads_requests(live_cluster, "reqs")[0]["keys"] == ["req/order"]
    assert heads_requests(live_cluster, "planner") == []  # undeclared: never asked
    assert d.bytes_sent > 0 and d.bytes_received > 0


async def test_revision_after_planning_replans_once_then_authorizes(live_cluster) -> None:  # type: ignore[no-untyped-def]
    calls: list[tuple[Record, ...]] = []
    async with world(live_cluster) as w:
        r3, fact, plan = await w.plan()
        r4 = await w.put("req/order", {"qty": 4})

        async def replan(action: Action, changed: tuple[Record, ...]) -> list[bytes]:
            calls.append(changed)
            return [await w.put("plan/ship", {"steps": ["ship 4"]}, [r4, fact], kind="plan")]

        run = await w.decide(plan, replan=replan)
    d = run.decision
    assert (d.outcome, d.replanned) == ("authorized", True)
    assert d.drift == {"req/order": (r3, r4)}
    assert [[r.id for r in changed] for changed in calls] == [[r4]]
    assert d.frontier["req/order"] == r4
    assert run.roots != (plan,)


async def test_second_revision_during_replan_blocks_changed_again(live_cluster) -> None:  # type: ignore[no-untyped-def]
    async with world(live_cluster) as w:
        r3, fact, plan = await w.plan()
        r4 = await w.put("req/order", {"qty": 4})

        async def replan(action: Action, changed: tuple[Record, ...]) -> list[bytes]:
            new_plan = await w.put("plan/ship", {"steps": ["ship 4"]}, [r4, fact], kind="plan")
            await w.put("req/order", {"qty": 5})  # r5 lands while replanning
            return [new_plan]

        d = (await w.decide(plan, replan=replan)).decision
    assert (d.outcome, d.reason, d.replanned) == ("blocked", "changed_again", True)


async def test_without_replan_hook_a_drift_is_a_stale_plan(live_cluster) -> None:  # type: ignore[no-untyped-def]
    async with world(live_cluster) as w:
        r3, _, plan = await w.plan()
        r4 = await w.put("req/order", {"qty": 4})
        d = (await w.decide(plan)).decision
    assert (d.outcome, d.reason) == ("blocked", "stale_plan")
    assert d.drift == {"req/order": (r3, r4)}


async def test_a_cached_walk_still_checks_the_owners_heads(live_cluster) -> None:  # type: ignore[no-untyped-def]
    async with world(live_cluster) as w:
        r3, _, plan = await w.plan()
        assert (await w.decide(plan)).decision.authorized
        assert len(w.runner.walks) == 1
        r4 = await w.put("req/order", {"qty": 4})
        d = (await w.decide(plan)).decision  # the walk comes from the cache
    assert len(w.runner.walks) == 1
    assert (d.outcome, d.reason, d.round_trips) == ("blocked", "stale_plan", 1)
    assert d.drift == {"req/order": (r3, r4)}


async def test_killed_owner_blocks_owner_unavailable_within_the_deadline(live_cluster) -> None:  # type: ignore[no-untyped-def]
    async with world(live_cluster) as w:
        _, _, plan = await w.plan()
        await w.decide(plan)  # sessions are open and warm
        live_cluster.kill9("inventory")
        started = time.monotonic()
        d = (await w.decide(plan)).decision
        elapsed = time.monotonic() - started
    assert (d.outcome, d.reason) == ("blocked", "owner_unavailable")
    assert elapsed < DEADLINE


async def test_stopped_owner_blocks_timeout_at_the_deadline(live_cluster) -> None:  # type: ignore[no-untyped-def]
    async with world(live_cluster) as w:
        _, _, plan = await w.plan()
        await w.decide(plan)
        pid = live_cluster.owner_pid("inventory")
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            d = (await w.decide(plan)).decision
            elapsed = time.monotonic() - started
        finally:
            os.kill(pid, signal.SIGCONT)
    assert (d.outcome, d.reason) == ("blocked", "timeout")
    assert DEADLINE * 0.9 <= elapsed < DEADLINE * 2


async def test_heads_rounds_in_flight_together_each_end_at_their_own_deadline(live_cluster) -> None:  # type: ignore[no-untyped-def]
    """The runner gives owed answers up with one timer for all its rounds: a round asked
    after another but with an earlier deadline ends at it, and the other at its own."""
    async with world(live_cluster) as w:
        _, fact, plan = await w.plan()
        await w.decide(plan)  # sessions open and writable: the rounds take the timer path
        action = Action("ship", (plan,), ("inv/stock",))
        queries = {"inventory": HeadsQuery(("inv/stock",), {"inv/stock": fact})}
        ended: dict[str, tuple[float, object]] = {}
        pid = live_cluster.owner_pid("inventory")
        os.kill(pid, signal.SIGSTOP)
        try:
            start = anyio.current_time()

            async def ask(name: str, after: float) -> None:
                heads = await w.runner.query(action, queries, start + after)
                ended[name] = (anyio.current_time() - start, heads.outcomes)

            async with anyio.create_task_group() as tg:
                tg.start_soon(ask, "late", 1.0)  # runs first: its deadline is set first
                tg.start_soon(ask, "early", 0.3)
        finally:
            os.kill(pid, signal.SIGCONT)
    assert ended["early"][1] == ended["late"][1] == {"inventory": None}
    assert 0.3 <= ended["early"][0] < 0.6
    assert 1.0 <= ended["late"][0] < 1.5


async def test_a_stopped_unrelated_owner_does_not_delay_the_lineage_fetch(live_cluster) -> None:  # type: ignore[no-untyped-def]
    """Issue 9 D11: the fetch settles once every id has a verified record; it used to wait
    for every owner, so a stopped `audit` cost the whole deadline once per fetch round."""
    async with world(live_cluster) as w:
        r3, fact, plan = await w.plan()
        pid = live_cluster.owner_pid("audit")
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            run = await w.decide(plan)  # an empty replica: two fetch rounds (plan, parents)
            elapsed = time.monotonic() - started
        finally:
            os.kill(pid, signal.SIGCONT)
    d = run.decision
    assert (d.outcome, d.reason, d.round_trips) == ("authorized", None, 3)
    assert d.frontier == {"req/order": r3, "inv/stock": fact}
    assert elapsed < DEADLINE


async def test_a_stopped_owner_holding_lineage_blocks_owner_unavailable(live_cluster) -> None:  # type: ignore[no-untyped-def]
    """Issue 9: a parent that no answering owner has, while its owner did not answer, is
    `owner_unavailable` (it was reported as `missing_lineage`)."""
    async with world(live_cluster) as w:
        r3, _, plan = await w.plan()
        pid = live_cluster.owner_pid("reqs")
        os.kill(pid, signal.SIGSTOP)
        try:
            d = (await w.decide(plan)).decision
        finally:
            os.kill(pid, signal.SIGCONT)
    assert (d.outcome, d.reason) == ("blocked", "owner_unavailable")
    assert d.detail == (
        f"records {r3.hex()[:12]} not found at any owner that answered; no answer from reqs"
    )


async def test_missing_lineage_blocks(live_cluster) -> None:  # type: ignore[no-untyped-def]
    async with world(live_cluster) as w:
        r3 = await w.put("req/order", {"qty": 3})
        ghost = bytes(range(32))  # a parent no owner has
        plan = await w.put("plan/ship", {}, [r3, ghost], kind="plan")
        d = (await w.decide(plan, deps=("req/order",))).decision
    assert (d.outcome, d.reason) == ("blocked", "missing_lineage")


async def test_undeclared_dependency_in_lineage_blocks_incomplete_declaration(live_cluster) -> None:  # type: ignore[no-untyped-def]
    async with world(live_cluster) as w:
        _, _, plan = await w.plan()
        d = (await w.decide(plan, deps=("req/order", "audit/never-read"))).decision
    assert (d.outcome, d.reason) == ("blocked", "incomplete_declaration")


@pytest.fixture
def faulty(live_cluster) -> Iterator:  # type: ignore[no-untyped-def]
    """Replace the `inventory` owner with a faulty one on the same port and identity."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(fault: str) -> None:
        live_cluster.kill9("inventory")
        script = REPO / "tests" / "support" / "faulty_owner.py"
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), str(live_cluster.path), "inventory", fault],
                stdin=subprocess.DEVNULL,
            )
        )
        deadline = time.monotonic() + 20
        anyio.run(
            lambda: wait_owner_ready(
                live_cluster.roster,
                live_cluster.identity("ops"),
                "inventory",
                deadline,
                lambda: procs[-1].poll() is None,
            )
        )

    try:
        yield start
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)


@pytest.mark.parametrize(
    ("fault", "found"),
    [
        ("wrong_key", "('inv/stock-not-asked')"),
        ("missing_key", "keys not answered: inv/stock"),
        ("garbage_id", "head entry 0 ('inv/stock'): id is not 32 bytes or nil"),
        ("duplicate_key", "'inv/stock' answered twice"),
    ],
)
def test_faulty_owner_answers_block_malformed_response(live_cluster, faulty, fault, found) -> None:  # type: ignore[no-untyped-def]
    """Each fault reaches the answer check (not the owner's internal error, which the faulty
    owner sent for every fault while its `heads` did not take `short`)."""
    faulty(fault)

    async def scenario() -> GateRun:
        async with world(live_cluster) as w:
            _, _, plan = await w.plan()
            return await w.decide(plan)

    d = anyio.run(scenario).decision
    assert (d.outcome, d.reason) == ("blocked", "malformed_response")
    assert "inventory" in d.detail and found in d.detail


def test_the_timeout_bounds_the_whole_decision_not_each_step(live_cluster, faulty) -> None:  # type: ignore[no-untyped-def]
    """Issue 18: an owner answering each step in 0.9 s (under the 1.5 s timeout) used to get
    a decision after two steps, 1.8 s; the timeout now ends the decision itself."""
    faulty("slow")

    async def scenario() -> tuple[GateRun, float]:
        async with world(live_cluster) as w:
            _, _, plan = await w.plan()
            started = time.monotonic()
            run = await w.decide(plan)  # an empty replica: fetch plan, fetch parents, heads
            return run, time.monotonic() - started

    run, elapsed = anyio.run(scenario)
    d = run.decision
    assert (d.outcome, d.reason, d.detail) == ("blocked", "timeout", "owner 'inventory': timeout")
    assert d.round_trips == 3
    assert DEADLINE * 0.9 <= elapsed < DEADLINE * 1.3


async def test_executors_sharing_a_replica_fetch_a_new_plan_once(live_cluster) -> None:  # type: ignore[no-untyped-def]
    """Eight executors of one process (each its own sessions, one replica) replan onto the
    same new plan at once: one of them asks the owners for it, the others wait for that
    answer, and every one is authorized on the new fact."""
    executors = 8
    async with world(live_cluster) as w:
        r3, fact, plan = await w.plan()
        await w.runner.fetch((plan, r3, fact))
        r4 = await w.put("req/order", {"qty": 4})
        new_plan = await w.put("plan/ship", {"steps": ["ship 4"]}, [r4, fact], kind="plan")
        all_replanning = anyio.Event()
        replanning = 0

        async def replan(action: Action, changed: tuple[Record, ...]) -> list[bytes]:
            nonlocal replanning
            replanning += 1
            if replanning == executors:
                all_replanning.set()
            await all_replanning.wait()  # every executor misses the new plan at once
            return [new_plan]

        runs: list[GateRun] = []
        async with anyio.create_task_group() as tg:
            identity = w.runner.pool.identity
            pools = [SessionPool(tg, live_cluster.roster, identity) for _ in range(executors)]
            runners = [GateRunner(p, w.runner.replica, timeout=DEADLINE) for p in pools]

            async def decide(runner: GateRunner) -> None:
                action = Action("ship", (plan,), ("req/order", "inv/stock"))
                runs.append(await runner.wait_decision(action, replan))

            async with anyio.create_task_group() as deciding:
                for runner in runners:
                    deciding.start_soon(decide, runner)
            for pool in pools:
                await pool.aclose()
            tg.cancel_scope.cancel()
        flights = w.runner.replica.flights.statistics()
    assert [(r.decision.outcome, r.decision.replanned) for r in runs] == [("authorized", True)] * 8
    assert {r.decision.frontier["req/order"] for r in runs} == {r4}
    # asked of the owners: the first lineage (3 ids), then the new plan once
    assert flights == {"in_flight": 0, "flown": 3 + 1, "joined": executors - 1}


def test_settle_leaves_the_warm_state_out_of_the_collector() -> None:
    warm = [[n] for n in range(1000)]  # lists: tracked by the collector
    try:
        settle()
        assert gc.get_freeze_count() >= len(warm)
        assert gc.get_count()[0] < 100  # the young generation starts empty
    finally:
        gc.unfreeze()
