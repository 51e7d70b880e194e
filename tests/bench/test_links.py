"""The bench's links in their own process (bench/paper/linkproc.py), on a live cluster on 127.0.0.1."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator

import anyio
import pytest

from planfence_net.bench.paper.figure2 import figure2
from planfence_net.bench.paper.harness import bench_cluster
from planfence_net.bench.paper.linkproc import LinkProcess
from planfence_net.bench.paper.network import LinkModel
from planfence_net.cluster.folder import ClusterDir
from planfence_net.executor.pool import SessionPool
from planfence_net.traces import load_profile


@pytest.fixture(scope="module")
def cdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterDir]:
    with bench_cluster(tmp_path_factory.mktemp("links") / "cluster") as cdir:
        yield cdir


async def _ping_ms(cdir: ClusterDir, wired: frozenset[str], target: str) -> tuple[float, int]:
    """The fastest of five pings from the executor to `target` through the links, and the
    links' process id (gone once the task group is cancelled)."""
    roster = cdir.roster()
    links = LinkProcess(cdir.roster_path, LinkModel(load_profile("synthetic-lte")), 0, wired)
    async with anyio.create_task_group() as tg:
        await links.start(tg)
        await links.rephase("links/a0", "planfence")
        pool = SessionPool(
            tg, roster, functools.cache(cdir.identity)("ops"), links.addresses_of("ops")
        )
        await pool.request(target, "ping", {})  # connect first
        best = float("inf")
        for _ in range(5):
            began = time.perf_counter()
            await pool.request(target, "ping", {})
            best = min(best, (time.perf_counter() - began) * 1000)
        await pool.aclose()
        assert links.process is not None
        pid = links.process.pid
        tg.cancel_scope.cancel()
    return best, pid


def _alive(pid: int) -> bool:
    try:
        return "zombie" not in open(f"/proc/{pid}/status").read()
    except FileNotFoundError:
        return False


def test_a_session_between_two_agents_crosses_both_links(cdir: ClusterDir) -> None:
    # synthetic-lte: 30 ms one way end to end, 15 ms on each agent's link: a round trip
    # crosses four half-delays
    best, pid = anyio.run(_ping_ms, cdir, frozenset(), "reqs", backend="asyncio")
    assert 60 <= best < 60 + 200
    assert not _alive(pid)


def test_a_wired_store_is_reached_across_the_executors_link_only(cdir: ClusterDir) -> None:
    best, _ = anyio.run(_ping_ms, cdir, frozenset({"central"}), "central", backend="asyncio")
    assert 30 <= best < 60


def test_figure2_sync_time_pays_at_least_two_round_trips_of_the_delay(cdir: ClusterDir) -> None:
    # a fresh session: the Noise handshake's round trip, then the put and its answer
    points = anyio.run(
        figure2,
        cdir,
        "loopback",
        1,
        0,
        [("delay", 1, 5, 0.0), ("delay", 1, 60, 0.0)],
        backend="asyncio",
    )
    assert [(p.delay_ms, p.payload_kib) for p in points] == [(5, 1), (60, 1)]
    assert points[0].sync_ms < 4 * 60 <= points[1].sync_ms
