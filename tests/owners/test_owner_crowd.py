"""Members first: strangers cannot crowd a roster member out of a real owner process.

A stranger (a connection whose first handshake message has not named a member) never holds
one of the places of handshakes in progress; at the strangers' own limits the oldest stranger
is closed and the newcomer admitted, and a stranger that says nothing is closed after
`stranger_timeout` (owners/admission.py, docs/FAULTS.md).
"""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from planfence_net.core.errors import PlanfenceError
from planfence_net.net.client import open_session
from planfence_net.protocol.framing import encode_frame
from planfence_net.protocol.noise import HandshakeState
from support.cluster import EXIT_TIMEOUT, ClusterHandle
from support.owner_client import DEADLINE, RawClient
from support.owner_serve import serve_owner

pytestmark = pytest.mark.anyio
CROWD = Path(__file__).resolve().parents[1] / "support" / "crowd.py"
ATTACKERS = 80
REQUESTS = 60  # member requests measured idle, then as many under the attack
ATTEMPTS = 3


async def member_requests(h: ClusterHandle, count: int) -> tuple[list[float], list[str]]:
    """`count` member requests, each on a new session (connect, handshake, ping): their
    latencies in ms and the errors of those that failed."""
    latencies: list[float] = []
    errors: list[str] = []
    for _ in range(count):
        started = time.perf_counter()
        try:
            async with open_session(h.roster, h.identity("planner"), "reqs") as session:
                assert (await session.request("ping"))["agent"] == "reqs"
        except PlanfenceError as exc:
            errors.append(str(exc))
            continue
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies, errors


async def attacked_requests(h: ClusterHandle) -> tuple[list[float], list[str], str]:
    """`member_requests` while the crowd process holds ATTACKERS connections; also the
    number of connections it opened."""
    attacker = subprocess.Popen(
        [sys.executable, str(CROWD), str(h.port("reqs")), str(ATTACKERS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert attacker.stdout is not None
        ready = await anyio.to_thread.run_sync(attacker.stdout.readline)
        assert ready == "ready\n"
        latencies, errors = await member_requests(h, REQUESTS)
    finally:
        out, _ = attacker.communicate(timeout=EXIT_TIMEOUT)  # closes its stdin: it stops
    return latencies, errors, out.strip()


@pytest.mark.timeout(300)  # up to three rounds on a loaded machine
async def test_eighty_idle_strangers_do_not_crowd_out_a_member(
    cluster_dir: ClusterHandle,
) -> None:
    """80 connections that send nothing and reconnect whenever closed (from the same address
    as the member, 127.0.0.1): no member request is refused and its p50 stays within 2x of
    the p50 without them. Before members first, 64 of them held every place of the
    handshakes in progress and 96% of the member's requests were refused. The machine is
    shared, so up to ATTEMPTS rounds (idle, then attacked) are measured; one within 2x
    suffices, and no round may refuse a member request."""
    h = cluster_dir
    rounds: list[str] = []
    with serve_owner(h), anyio.fail_after(12 * DEADLINE):
        for _ in range(ATTEMPTS):
            idle, idle_errors = await member_requests(h, REQUESTS)
            attacked, errors, opened = await attacked_requests(h)
            p50_idle = statistics.median(idle)
            p50 = statistics.median(attacked) if attacked else math.inf
            rounds.append(
                f"member p50 idle {p50_idle:.2f} ms, attacked {p50:.2f} ms, "
                f"{len(errors)}/{REQUESTS} refused, attacker opened {opened} connections"
            )
            assert (idle_errors, errors) == ([], []), "; ".join(rounds)
            if p50 <= 2 * p50_idle:
                break
    figures = "; ".join(rounds)
    print(figures)
    assert p50 <= 2 * p50_idle, figures


async def test_at_the_strangers_limit_the_oldest_stranger_is_closed(
    cluster_dir: ClusterHandle,
) -> None:
    h = cluster_dir
    with serve_owner(h, limits=("max_strangers=2",)), anyio.fail_after(DEADLINE):
        silent = [await RawClient.tcp(h) for _ in range(3)]
        await silent[0].wait_closed()  # the oldest lost its place to the third
        h.wait_events("reqs", "connection_evicted", 1)
        async with open_session(h.roster, h.identity("planner"), "reqs") as session:
            figures = await session.request("stats")  # evicts the second: a member gets in
        for raw in silent:
            await raw.aclose()
    assert (figures["evicted_connections"], figures["refused_connections"]) == (2, 0)
    assert [e["reason"] for e in h.events("reqs", "connection_evicted")] == ["2 strangers"] * 2


async def test_one_address_can_push_out_only_its_own_strangers(cluster_dir: ClusterHandle) -> None:
    h = cluster_dir
    with (
        serve_owner(h, limits=("strangers_per_address=2", "max_strangers=10")),
        anyio.fail_after(DEADLINE),
    ):
        silent = [await RawClient.tcp(h) for _ in range(3)]
        await silent[0].wait_closed()
        for raw in silent:
            await raw.aclose()
    assert [e["reason"] for e in h.events("reqs", "connection_evicted")] == [
        "2 strangers from 127.0.0.1"
    ]


async def test_a_stranger_that_says_nothing_is_closed_at_its_deadline(
    cluster_dir: ClusterHandle,
) -> None:
    h = cluster_dir
    with serve_owner(h, limits=("stranger_timeout=0.5",)), anyio.fail_after(DEADLINE):
        raw = await RawClient.tcp(h)
        started = time.monotonic()
        await raw.wait_closed()
        waited = time.monotonic() - started
        await raw.aclose()
    assert 0.4 < waited < 5.0
    failed = [e["reason"] for e in h.events("reqs", "handshake_failed")]
    assert failed == ["no first message naming a member within 0.5 s"]


async def test_a_claim_over_the_handshakes_in_progress_closes_the_oldest_claim(
    cluster_dir: ClusterHandle,
) -> None:
    """Two connections whose first message names a member and which then say nothing (as a
    replayer would): with one place for handshakes in progress the second pushes out the
    first; a member's session after them is served."""
    h = cluster_dir

    async def claim() -> RawClient:
        raw = await RawClient.tcp(h)
        state = HandshakeState(
            "IK",
            True,
            b"planfence-net/1\x00" + h.roster.cluster.encode(),
            s=h.identity("planner").noise_private,
            rs=h.roster.agent("reqs").noise_key,
        )
        await raw.send_raw(encode_frame(state.write_message(b"")))
        assert len(await raw.read_frame() or b"") == 48  # message 2: the claim was taken
        return raw

    with serve_owner(h, limits=("max_handshakes=1",)), anyio.fail_after(DEADLINE):
        first = await claim()
        second = await claim()
        await first.wait_closed()
        async with open_session(h.roster, h.identity("ops"), "reqs") as session:
            assert (await session.request("ping"))["agent"] == "reqs"
        for raw in (first, second):
            await raw.aclose()
    assert [e["reason"] for e in h.events("reqs", "connection_evicted")] == [
        "1 handshakes in progress"
    ] * 2  # the first claim by the second, the second by the member's session
