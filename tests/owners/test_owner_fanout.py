"""Pushing heads to many subscribers does not multiply a put's latency (a real owner process).

Before: every commit encoded, encrypted and wrote one push per subscription before the owner
read its next request, so put p50 grew with the number of subscriptions (7 ms without any,
126 ms with 960). Now (owners/pushes.py, `push_heads`) a commit only hands its rows to each
subscribing session; each session's sender pushes what has gathered when it runs, one
subscription at a time, and the rows of commits that came meanwhile travel in one push.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from planfence_net.net.client import open_session
from support.cluster import EXIT_TIMEOUT, ClusterHandle
from support.owner_client import DEADLINE
from support.owner_serve import serve_owner

pytestmark = pytest.mark.anyio
SUBSCRIBERS = Path(__file__).resolve().parents[1] / "support" / "subscribers.py"
SESSIONS = 60  # x 16 subscriptions each = 960
PUTS = 100
ATTEMPTS = 3


async def put_latencies(h: ClusterHandle, first: int) -> tuple[list[float], list[float]]:
    """PUTS puts on reqs (watched) and as many on inventory (not), alternating, each
    latency in ms: both measured under the same load of the machine."""
    watched: list[float] = []
    alone: list[float] = []
    async with (
        open_session(h.roster, h.identity("reqs"), "reqs") as reqs,
        open_session(h.roster, h.identity("inventory"), "inventory") as inventory,
    ):
        for n in range(first, first + PUTS):
            for session, key, latencies in ((reqs, "req", watched), (inventory, "inv", alone)):
                started = time.perf_counter()
                await session.request("put", {"key": f"{key}/fan-{n}", "body": n})
                latencies.append((time.perf_counter() - started) * 1000)
    return watched, alone


@pytest.mark.timeout(300)  # up to three rounds of 200 puts on a loaded machine
async def test_960_subscriptions_keep_put_p50_within_twice_none(
    cluster_dir: ClusterHandle,
) -> None:
    """Two owners alike but for their subscribers: reqs has 960 subscriptions (60 sessions
    of 16, every key), inventory none; puts alternate between them. The machine this runs on
    is shared, so a burst of someone else's load can hold either owner for a while: up to
    ATTEMPTS rounds are measured and one within 2x suffices (before: 2.6x and 3.5x)."""
    h = cluster_dir
    rounds: list[str] = []
    with serve_owner(h), serve_owner(h, "inventory"), anyio.fail_after(12 * DEADLINE):
        subscribers = subprocess.Popen(
            [sys.executable, str(SUBSCRIBERS), str(h.path), "reqs", str(SESSIONS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert subscribers.stdout is not None
            ready = await anyio.to_thread.run_sync(subscribers.stdout.readline)
            assert ready == "ready\n"
            for attempt in range(ATTEMPTS):
                watched, alone = await put_latencies(h, attempt * PUTS)
                with_, without = statistics.median(watched), statistics.median(alone)
                rounds.append(f"{with_:.2f} ms with {SESSIONS * 16}, {without:.2f} ms without")
                if with_ <= 2 * without:
                    break
        finally:
            out, _ = await anyio.to_thread.run_sync(
                lambda: subscribers.communicate(f"{len(rounds) * PUTS}\n", timeout=EXIT_TIMEOUT)
            )
    figures = "put p50: " + "; ".join(rounds)
    print(figures)
    assert out.strip() == str(len(rounds) * PUTS * SESSIONS * 16), figures  # every row, everyone
    assert with_ <= 2 * without, figures
