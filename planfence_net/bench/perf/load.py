"""One owner under load: heads/s from many sessions and acknowledged durable puts/s.

    load = await owner_load(cdir, "reqs", "planner", "req/x", sessions=16, in_flight=8,
                            seconds=3.0)

The load generator must cost less per request than the owner, or it measures itself: heads
sessions are bare Noise streams that resend one encoded request as soon as its answer
arrives and check each answer byte for byte against the first (which was decoded and
checked in full); with `pipelined` > 0 they are measured again with that many requests
sent in one write per session, as a session pool shared by many executors sends them (the
owner answers every request of one read in one write). Puts go through the client library,
several in flight per session, and count only acknowledged ones; the owner's own count of
written records must agree.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ...cluster.folder import ClusterDir
from ...cluster.pids import read_pid
from ...net.client import open_session, start_session
from ...net.transport import NoiseStream, connect
from ...protocol.messages import decode_response, encode_request


@dataclass(frozen=True, slots=True)
class OwnerLoad:
    heads_per_s: float
    heads_cpu: float  # owner CPU cores used meanwhile
    puts_per_s: float
    puts_cpu: float
    puts_per_commit: float
    heads_pipelined_per_s: float = 0.0  # `pipelined` requests a write per session
    heads_pipelined_cpu: float = 0.0


async def owner_load(
    cdir: ClusterDir,
    owner: str,
    reader: str,
    key: str,
    sessions: int,
    in_flight: int,
    seconds: float,
    pipelined: int = 0,
) -> OwnerLoad:
    """Saturate `owner` with heads of `key` (as `reader`): one in flight per session, then
    (`pipelined` > 0) that many; then with puts (as itself)."""
    pid = read_pid(cdir, owner)
    assert pid is not None
    head = (await _request(cdir, reader, owner, "heads", {"keys": [key]}))["heads"][0][1]
    request = encode_request(1, "heads", {"keys": [key], "expect": {key: head}})
    heads = await _heads(cdir, reader, owner, pid, sessions, seconds, request, key, head, 1)
    more = (0.0, 0.0)
    if pipelined:
        more = await _heads(
            cdir, reader, owner, pid, sessions, seconds, request, key, head, pipelined
        )
    before = await _request(cdir, reader, owner, "stats", {})
    count, elapsed, cpu = await _puts(cdir, owner, pid, sessions, in_flight, seconds)
    after = await _request(cdir, reader, owner, "stats", {})
    written = after["records_written"] - before["records_written"]
    if written != count:
        raise AssertionError(f"{count} puts acknowledged but {written} written")
    return OwnerLoad(
        *heads, count / elapsed, cpu, written / max(1, after["commits"] - before["commits"]), *more
    )


async def _heads(
    cdir: ClusterDir,
    reader: str,
    owner: str,
    pid: int,
    sessions: int,
    seconds: float,
    request: bytes,
    key: str,
    head: bytes,
    pipelined: int,
) -> tuple[float, float]:
    """(heads/s, owner cores) from `sessions` sessions, `pipelined` requests a write each."""
    streams = [await _open(cdir, reader, owner) for _ in range(sessions)]
    try:
        loops = [_heads_loop(stream, request, key, head, pipelined) for stream in streams]
        count, elapsed, cpu = await _timed(pid, seconds, loops)
    finally:
        for stream in streams:
            await stream.aclose()
    return count / elapsed, cpu


async def _request(
    cdir: ClusterDir, who: str, owner: str, op: str, args: dict[str, Any]
) -> dict[str, Any]:
    async with open_session(cdir.roster(), cdir.identity(who), owner) as session:
        return await session.request(op, args)


async def _open(cdir: ClusterDir, who: str, owner: str) -> NoiseStream:
    roster, agent = cdir.roster(), cdir.roster().agent(owner)
    return await connect(
        agent.host,
        agent.port,
        cluster=roster.cluster,
        static_private=cdir.identity(who).noise_private,
        remote_static=agent.noise_key,
        match_responses=False,  # requests and answers are compared as bytes
    )


def _heads_loop(
    stream: NoiseStream, request: bytes, key: str, head: bytes, pipelined: int
) -> Callable[[float], Awaitable[int]]:
    async def run(stop_at: float) -> int:
        await stream.send_message(request)
        expected = await stream.receive_message()
        answer = decode_response(expected)
        if not answer.ok or answer.result["heads"] != [[key, head, answer.result["heads"][0][2]]]:
            raise AssertionError(f"unexpected heads answer: {answer}")
        done = 1
        batch = [request] * pipelined
        while time.perf_counter() < stop_at:
            stream.write_messages(batch)  # one write: the owner reads them together
            await stream.wait_writable()
            for _ in batch:
                if await stream.receive_message() != expected:
                    raise AssertionError("a heads answer changed under load")
            done += pipelined
        return done

    return run


async def _puts(
    cdir: ClusterDir, owner: str, pid: int, sessions: int, in_flight: int, seconds: float
) -> tuple[int, float, float]:
    roster, identity = cdir.roster(), cdir.identity(owner)
    async with anyio.create_task_group() as tg:
        opened = [
            await start_session(tg, roster, identity, roster.agent(owner)) for _ in range(sessions)
        ]

        def loop(session: Any, task: int) -> Callable[[float], Awaitable[int]]:
            async def run(stop_at: float) -> int:
                done = 0
                while time.perf_counter() < stop_at:
                    await session.request(
                        "put",
                        {
                            "key": f"req/put-{task}",
                            "kind": "fact",
                            "parents": [],
                            "body": {"n": done},
                        },
                    )
                    done += 1  # acknowledged: the owner answers after the commit
                return done

            return run

        result = await _timed(
            pid,
            seconds,
            [loop(s, i * in_flight + j) for i, s in enumerate(opened) for j in range(in_flight)],
        )
        for session in opened:
            await session.aclose()
        tg.cancel_scope.cancel()
    return result


async def _timed(
    pid: int,
    seconds: float,
    loops: list[Callable[[float], Awaitable[int]]],
) -> tuple[int, float, float]:
    """Run every loop until `seconds` pass; (operations done, seconds, owner CPU cores)."""
    done = 0

    async def one(run: Callable[[float], Awaitable[int]], stop_at: float) -> None:
        nonlocal done
        count = await run(stop_at)  # not `done += await ...`: that reads `done` before waiting
        done += count

    cpu, started = cpu_seconds(pid), time.perf_counter()
    async with anyio.create_task_group() as tg:
        for run in loops:
            tg.start_soon(one, run, started + seconds)
    elapsed = time.perf_counter() - started
    return done, elapsed, (cpu_seconds(pid) - cpu) / elapsed


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds process `pid` has used so far (Linux /proc); 0 for None."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
