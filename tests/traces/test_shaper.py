"""The shaper relay on 127.0.0.1 with a real echo server upstream, and its CLI."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import pytest
from anyio.abc import SocketAttribute, SocketStream
from click.testing import CliRunner

from planfence_net.cli.group import Group
from planfence_net.cli.shape import register
from planfence_net.core.errors import ConfigError
from planfence_net.traces.link import MSS
from planfence_net.traces.profiles import Profile, list_profiles
from planfence_net.traces.shaper import Shaper, serve_shaper

HOST = "127.0.0.1"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fast_profile(tmp_path: Path) -> Profile:
    """A fast link (20 full opportunities per ms, about 240 Mbit/s) with a 10 ms delay."""
    path = tmp_path / "fast.trace"
    path.write_text("1\n" * 20)
    return Profile(name="fast", description="test", up=str(path), down=str(path), delay_ms=10)


async def echo(stream: SocketStream) -> None:
    async with stream:
        try:
            while True:
                await stream.send(await stream.receive())
        except anyio.EndOfStream:
            pass


@asynccontextmanager
async def relay(profile: str | Profile, **options: object) -> AsyncIterator[tuple[Shaper, int]]:
    """An echo server behind a shaper; yields the shaper and its port; stops both on exit."""
    listener = await anyio.create_tcp_listener(local_host=HOST, local_port=0)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, echo)
        upstream_port = listener.extra(SocketAttribute.local_port)
        shaper = Shaper(HOST, upstream_port, profile, **options)  # type: ignore[arg-type]
        port = await tg.start(shaper.serve, HOST, 0)
        try:
            yield shaper, port
        finally:
            tg.cancel_scope.cancel()


async def receive_exactly(stream: SocketStream, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        data += await stream.receive()
    return bytes(data)


@pytest.mark.anyio
async def test_bytes_arrive_intact_in_order_through_a_small_queue(fast_profile: Profile) -> None:
    payload = bytes(i * 7 % 251 for i in range(2_000_000))
    with anyio.fail_after(20):
        async with relay(fast_profile, queue_bytes=16_384) as (shaper, port):
            async with (
                await anyio.connect_tcp(HOST, port) as client,
                anyio.create_task_group() as tg,
            ):
                tg.start_soon(client.send, payload)
                assert await receive_exactly(client, len(payload)) == payload
            stats = shaper.statistics()
    for direction in (stats.uplink, stats.downlink):
        assert direction.bytes_in == direction.bytes_out == len(payload)
        # Backpressure held the queue near its limit: one 64 KiB read past it at most.
        assert 16_384 < direction.queued_bytes_max <= 16_384 + 65_536 + MSS
    assert (stats.connections_total, stats.connect_failures) == (1, 0)


@pytest.mark.anyio
async def test_a_stalled_link_pushes_back_on_the_sender(tmp_path: Path) -> None:
    trace = tmp_path / "stalled.trace"
    trace.write_text("100000\n")  # the first opportunity comes after 100 s
    stalled = Profile(name="stalled", description="", up=str(trace), down=str(trace), delay_ms=0)
    block, sent = bytes(65_536), 0
    async with relay(stalled, queue_bytes=16_384) as (shaper, port):
        async with await anyio.connect_tcp(HOST, port) as client:
            # Without backpressure 64 MiB go into the relay's memory in well under a second;
            # with it, sending stalls once the kernel's socket buffers (a few MiB) are full.
            with anyio.move_on_after(1.0):
                while sent < 64 << 20:
                    await client.send(block)
                    sent += len(block)
        queued = shaper.statistics().uplink.queued_bytes
    assert sent < 32 << 20
    assert 16_384 < queued <= 16_384 + 65_536


@pytest.mark.anyio
async def test_echo_round_trip_observes_twice_the_one_way_delay(fast_profile: Profile) -> None:
    with anyio.fail_after(10):
        async with relay(fast_profile, delay_ms=40) as (shaper, port):
            async with await anyio.connect_tcp(HOST, port) as client:
                for _ in range(3):
                    start = time.monotonic()
                    await client.send(b"x" * 64)
                    assert await receive_exactly(client, 64) == b"x" * 64
                    elapsed_ms = (time.monotonic() - start) * 1000
                    assert 80 <= elapsed_ms < 80 + 150
    assert shaper.delay_ms == 40


@pytest.mark.anyio
async def test_half_close_travels_behind_the_data(fast_profile: Profile) -> None:
    with anyio.fail_after(10):
        async with relay(fast_profile) as (shaper, port):
            async with await anyio.connect_tcp(HOST, port) as client:
                await client.send(b"last words")
                await client.send_eof()
                assert await receive_exactly(client, 10) == b"last words"
                with pytest.raises(anyio.EndOfStream):
                    await client.receive()
            assert shaper.statistics().uplink.chunks_out == 2  # the data and the FIN


async def ping_pattern(seed: int) -> tuple[list[bool], int, int]:
    """Twelve echoes through a lossy link: which were slow, and the lost chunks per direction."""
    slow: list[bool] = []
    async with relay("loopback", delay_ms=5, loss=0.25, seed=seed) as (shaper, port):
        async with await anyio.connect_tcp(HOST, port) as client:
            for _ in range(12):
                start = time.monotonic()
                await client.send(b"p" * 64)
                await receive_exactly(client, 64)
                slow.append(time.monotonic() - start > 0.15)  # a loss costs 200 ms
        stats = shaper.statistics()
    return slow, stats.uplink.chunks_lost, stats.downlink.chunks_lost


@pytest.mark.anyio
async def test_seeded_loss_is_reproducible() -> None:
    with anyio.fail_after(30):
        first = await ping_pattern(seed=3)
        assert first == await ping_pattern(seed=3)
    slow, lost_up, lost_down = first
    assert 0 < lost_up + lost_down and any(slow) and not all(slow)


@pytest.mark.anyio
async def test_cancelling_the_shaper_closes_its_connections(fast_profile: Profile) -> None:
    with anyio.fail_after(10):
        listener = await anyio.create_tcp_listener(local_host=HOST, local_port=0)
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, echo)
            upstream_port = listener.extra(SocketAttribute.local_port)
            shaper_scope = anyio.CancelScope()

            async def run_shaper(*, task_status: anyio.abc.TaskStatus[int]) -> None:
                with shaper_scope:
                    await serve_shaper(
                        HOST, 0, HOST, upstream_port, fast_profile, task_status=task_status
                    )

            port = await tg.start(run_shaper)
            async with await anyio.connect_tcp(HOST, port) as client:
                await client.send(b"hello")
                assert await receive_exactly(client, 5) == b"hello"
                shaper_scope.cancel()
                with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                    await client.receive()
            tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_unreachable_upstream_closes_the_client(fast_profile: Profile) -> None:
    free = await anyio.create_tcp_listener(local_host=HOST, local_port=0)
    dead_port = free.extra(SocketAttribute.local_port)
    await free.aclose()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            shaper = Shaper(HOST, dead_port, fast_profile)
            port = await tg.start(shaper.serve, HOST, 0)
            async with await anyio.connect_tcp(HOST, port) as client:
                with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                    await client.receive()
            assert shaper.statistics().connect_failures == 1
            tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_bad_configuration_fails_before_listening(tmp_path: Path) -> None:
    missing = Profile(name="gone", description="", up="no-such.up", down="no-such.down", delay_ms=0)
    with pytest.raises(ConfigError, match="trace 'no-such.up' not found"):
        await serve_shaper(HOST, 0, HOST, 9, missing)
    with pytest.raises(ConfigError, match="unknown profile 'nope'"):
        await serve_shaper(HOST, 0, HOST, 9, "nope")
    with pytest.raises(ConfigError, match="loss=1.5"):
        await serve_shaper(HOST, 0, HOST, 9, "loopback", loss=1.5)


def cli() -> Group:
    app = Group("planfence", help="The shaper commands alone.")
    register(app)
    return app


def test_cli_lists_profiles_as_json() -> None:
    result = CliRunner().invoke(cli(), ["profiles", "--json"])
    assert result.exit_code == 0
    listed = json.loads(result.stdout)
    assert [p["name"] for p in listed] == [p.name for p in list_profiles()]
    assert listed[1] == {
        "name": "loopback",
        "description": listed[1]["description"],
        "up": None,
        "down": None,
        "delay_ms": 0,
    }


def test_cli_rejects_a_bad_address() -> None:
    result = CliRunner().invoke(
        cli(), ["shape", "--listen", "nowhere", "--upstream", f"{HOST}:1", "--profile", "loopback"]
    )
    assert result.exit_code == 2
    assert "'nowhere' is not HOST:PORT (port 0-65535)" in result.output


def test_cli_reports_an_unknown_profile_in_one_line() -> None:
    result = CliRunner().invoke(
        cli(), ["shape", "--listen", f"{HOST}:0", "--upstream", f"{HOST}:1", "--profile", "nope"]
    )
    assert result.exit_code == 1
    assert result.stderr == (
        "error: unknown profile 'nope'; known profiles: synthetic-lte, loopback, att-lte, "
        "att-lte-2016, tmobile-lte, verizon-lte\n"
    )


async def answer_thrice(stream: SocketStream) -> None:
    """Reply to 100 bytes with 300."""
    async with stream:
        await receive_exactly(stream, 100)
        await stream.send(b"y" * 300)


@pytest.mark.anyio
async def test_routes_share_one_link_inward_through_the_downlink(fast_profile: Profile) -> None:
    # One shaper is one agent's access link: the relay in front of its server (inward) and
    # the relays its own connections take (outward) share the two directions, swapped.
    with anyio.fail_after(10):
        server = await anyio.create_tcp_listener(local_host=HOST, local_port=0)
        given = await anyio.create_tcp_listener(local_host=HOST, local_port=0)
        upstream = (HOST, server.extra(SocketAttribute.local_port))
        async with server, anyio.create_task_group() as tg:
            tg.start_soon(server.serve, answer_thrice)
            shaper = Shaper(HOST, upstream[1], fast_profile, delay_ms=1)
            ports = await tg.start(
                shaper.serve_routes, [(upstream, True, given), (upstream, False, None)]
            )
            assert ports[0] == given.extra(SocketAttribute.local_port)
            seen = []
            for port in ports:
                async with await anyio.connect_tcp(HOST, port) as client:
                    await client.send(b"x" * 100)
                    assert await receive_exactly(client, 300) == b"y" * 300
                stats = shaper.statistics()
                seen.append((stats.uplink.bytes_in, stats.downlink.bytes_in))
            tg.cancel_scope.cancel()
    assert seen == [(300, 100), (400, 400)]
