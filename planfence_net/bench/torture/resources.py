"""Resource attacks on a real owner: descriptors, reply amplification, decoding, subscribers.

Each attack runs against a fresh `reqs` owner process (so its peak resident set, VmHWM, is
the attack's) while a legitimate client in another process pings it every 10 ms and writes a
record every 50 ms (`probe.Bystander`). A row holds when the owner survived, every record it
acknowledged during the attack reads back, none of the bystander's requests failed and the
owner's peak RSS stayed under 300 MB. The outcome also gives the bystander's ping p99 and
says when it missed the 100 ms target: a timing figure (it depends on the machine's load),
reported, not a promise the row is judged by.

    descriptors (cap)    300 connections to an owner limited to 256 descriptors
    descriptors (EMFILE) the same with the connection limits raised: accept() hits EMFILE
    get x1024            `get` naming one 1 MiB record 1024 times, from 8 sessions
    heads repeated       `heads` naming one key 4096 times with `expect`, from 8 sessions
    empty arrays         16 MiB requests of empty arrays (known and unknown arguments)
    unfinished messages  all but the last chunk of a 16 MiB put, from 24 sessions, held
    unread replies       4.2 MB `heads` requests whose replies are never read
    subscribers          2,000 subscriptions that never read, over 400 commits
    crowd-out            80 connections that send nothing and reconnect when closed, while a
                         member opens new sessions: none may be refused
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

from ...cluster.processes import ClusterDir, init_cluster
from ...core.errors import PlanfenceError, TransportError, collapse
from ...core.records import record_from_wire
from ...net.client import open_session
from ...net.transport import NoiseStream, connect
from ...protocol.framing import DEFAULT_MAX_MESSAGE, split_message
from ...protocol.messages import encode_request
from . import FaultResult
from .probe import Bystander, OwnerProcess

OWNER = "reqs"
RSS_LIMIT_MB = 300.0
PING_P99_LIMIT_MS = 100.0
MIB = 1024 * 1024
RECONNECTS = 20
Attack = Callable[["Target", bool], Awaitable[int]]  # returns the rounds it ran


class Target:
    """The cluster folder and the running owner an attack aims at."""

    def __init__(self, root: Path, owner: OwnerProcess) -> None:
        self.root = root
        self.cdir = ClusterDir(root)
        self.roster = self.cdir.roster()
        self.owner = owner
        self.port = self.roster.agent(OWNER).port

    async def session(self, as_agent: str = "planner") -> NoiseStream:
        """A raw Noise session to the owner (requests are sent as bytes)."""
        agent = self.roster.agent(OWNER)
        return await connect(
            "127.0.0.1",
            self.port,
            cluster=self.roster.cluster,
            static_private=self.cdir.identity(as_agent).noise_private,
            remote_static=agent.noise_key,
            match_responses=False,
        )


async def run(workdir: Path, *, quick: bool) -> list[FaultResult]:
    """Run every resource attack once against a fresh owner; one row per attack."""
    root = workdir / "resources"
    init_cluster(root, agents=5, base_port=0)
    big_id = await _prepare(root)
    results = []
    for name, attack, owner_args in _attacks(big_id):
        results.append(await _one(root, name, attack, owner_args, quick))
    return results


def _attacks(big_id: bytes) -> list[tuple[str, Attack, dict[str, Any]]]:
    raised = ("max_connections", "max_handshakes", "max_strangers", "strangers_per_address")
    emfile = {"nofile": 256, "limits": tuple(f"{name}=1000" for name in raised)}
    return [
        ("descriptors (cap)", _descriptors, {"nofile": 256}),
        ("descriptors (EMFILE)", _descriptors, emfile),
        ("get x1024", lambda t, q: _amplify(t, q, _get_request(big_id)), {}),
        ("heads repeated", lambda t, q: _amplify(t, q, _heads_request()), {}),
        ("empty arrays", _empty_arrays, {}),
        ("unfinished messages", _unfinished_messages, {}),
        ("unread replies", _unread_replies, {}),
        ("subscribers", _subscribers, {}),
        ("crowd-out", _crowd_out, {}),
    ]


async def _prepare(root: Path) -> bytes:
    """Write the 1 MiB record the amplification attacks name; returns its id."""
    async with OwnerProcess(root, OWNER):
        cdir = ClusterDir(root)
        async with open_session(cdir.roster(), cdir.identity(OWNER), OWNER) as writer:
            result = await writer.request("put", {"key": "req/big", "body": bytes(MIB)})
    big_id: bytes = result["id"]
    return big_id


async def _one(
    root: Path, name: str, attack: Attack, owner_args: dict[str, Any], quick: bool
) -> FaultResult:
    async with OwnerProcess(root, OWNER, **owner_args) as owner:
        bystander = Bystander(root, OWNER)
        await bystander.start()
        error = ""
        try:
            rounds = await attack(Target(root, owner), quick)
        except Exception as exc:  # the attacker's own failure, reported in the row
            failure = collapse(exc) if isinstance(exc, BaseExceptionGroup) else exc
            if not isinstance(failure, PlanfenceError):
                raise
            rounds, error = 0, f"attack failed: {failure}"
        watch = await bystander.stop()
        alive = owner.alive
        peak = owner.peak_rss_mb() if alive else math.nan
        try:
            lost = await _lost(root, watch.acknowledged) if alive else len(watch.acknowledged)
        except PlanfenceError as exc:
            lost, error = len(watch.acknowledged), f"could not read back: {exc}"
    problems = [error] if error else []
    if not alive:
        problems.append("owner died")
    if not peak < RSS_LIMIT_MB:
        problems.append(f"RSS over {RSS_LIMIT_MB:g} MB")
    if watch.failures:
        problems.append(f"{watch.failures} bystander requests failed")
    figures = f"peak RSS {peak:.0f} MB, ping p99 {watch.p99_ms:.1f} ms"
    if watch.p99_ms >= PING_P99_LIMIT_MS:
        figures += f": over the {PING_P99_LIMIT_MS:g} ms target"
    outcome = f"held ({figures})" if not problems else f"{'; '.join(problems)} ({figures})"
    return FaultResult(name, rounds, len(watch.acknowledged), lost, outcome)


async def _lost(root: Path, ids: list[bytes]) -> int:
    """How many of the acknowledged `ids` the owner no longer serves. Connecting is retried
    for a while: right after a connection flood the owner may still be closing the flood's
    connections and refuse new ones over its limits."""
    if not ids:
        return 0
    for _ in range(RECONNECTS):
        try:
            return await _read_back(root, ids)
        except TransportError:
            await anyio.sleep(0.5)
    return await _read_back(root, ids)


async def _read_back(root: Path, ids: list[bytes]) -> int:
    cdir = ClusterDir(root)
    found: set[bytes] = set()
    async with open_session(cdir.roster(), cdir.identity("planner"), OWNER) as reader:
        for start in range(0, len(ids), 1024):
            result = await reader.request("get", {"ids": ids[start : start + 1024]})
            # a record's id is recomputed from its fields, never taken from the answer
            found.update(record_from_wire(w).id for w in result["records"])
    return len(set(ids) - found)


# -- the attacks ----------------------------------------------------------------------------------


async def _descriptors(target: Target, quick: bool) -> int:
    """300 TCP connections that never speak, held for a while, then closed."""
    rounds = 1 if quick else 3
    for _ in range(rounds):
        streams = []
        try:
            for _ in range(300):
                streams.append(await anyio.connect_tcp("127.0.0.1", target.port))
            await anyio.sleep(1.0 if quick else 3.0)  # hold them: the owner is at its limit
        finally:
            for stream in streams:
                await stream.aclose()
    return rounds


def _get_request(big_id: bytes) -> bytes:
    return encode_request(1, "get", {"ids": [big_id] * 1024})


def _heads_request() -> bytes:
    return encode_request(
        1, "heads", {"keys": ["req/big"] * 4096, "expect": {"req/big": bytes(32)}}
    )


async def _amplify(target: Target, quick: bool, request: bytes) -> int:
    """8 sessions send `request` (which names one 1 MiB record many times) and read the
    answers, `rounds` times each."""
    rounds = 5 if quick else 40

    async def attacker() -> None:
        stream = await target.session()
        try:
            for _ in range(rounds):
                await stream.send_message(request)
                await stream.receive_message()
        finally:
            await stream.aclose()

    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(attacker)
    return rounds


async def _empty_arrays(target: Target, quick: bool) -> int:
    """Sessions (2, 4 in the long run) each send 16 MiB requests of empty arrays: as an
    argument the op does not know, and as its `keys`."""
    count = DEFAULT_MAX_MESSAGE - 100
    flood = b"\xdd" + count.to_bytes(4, "big") + b"\x90" * count
    unknown = b"\x93\x01\xa5heads\x82\xa4keys\x91\xa5req/a\xa4junk" + flood
    as_keys = b"\x93\x02\xa5heads\x81\xa4keys" + flood
    rounds = 1 if quick else 5

    async def attacker() -> None:
        stream = await target.session()
        try:
            for _ in range(rounds):
                for message in (unknown, as_keys):
                    await stream.send_message(message)
                    await stream.receive_message()
        finally:
            await stream.aclose()

    async with anyio.create_task_group() as tg:
        for _ in range(2 if quick else 4):
            tg.start_soon(attacker)
    return rounds


async def _unfinished_messages(target: Target, quick: bool) -> int:
    """Sessions (8, 24 in the long run) each send all but the last chunk of a 16 MiB put
    (a body only the whole message could show is not theirs to write) and hold it there."""
    size = DEFAULT_MAX_MESSAGE - 100
    put = encode_request(1, "put", {"key": "req/unfinished", "body": bytes(size)})
    chunks = split_message(put)[:-1]
    sessions = 8 if quick else 24
    streams: list[NoiseStream] = []

    async def send_all_but_last(stream: NoiseStream) -> None:
        with anyio.move_on_after(2.0 if quick else 5.0):  # the owner may stop reading
            for chunk in chunks:
                stream.write_chunk(chunk)
                await stream.wait_writable()

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(sessions):
                stream = await target.session()
                await stream.send_message(encode_request(0, "ping", {}))  # proven
                await stream.receive_message()
                streams.append(stream)
                tg.start_soon(send_all_but_last, stream)
    finally:
        for stream in streams:
            await stream.aclose()
    return sessions


async def _unread_replies(target: Target, quick: bool) -> int:
    """Sessions each send six 4.2 MB `heads` requests (4096 keys of 512 two-byte characters,
    echoed in the reply) and never read a reply; held for a while, then closed."""
    keys = [f"req/{i:04d}" + "\u00e9" * 504 for i in range(4096)]
    request = encode_request(1, "heads", {"keys": keys})
    sessions = 2 if quick else 6
    streams: list[NoiseStream] = []
    try:
        for _ in range(sessions):
            # Each session sends as soon as it is open: the owner closes a session that has
            # sent nothing for 5 s after its handshake, which is not what this attack tests.
            stream = await target.session()
            streams.append(stream)
            with anyio.move_on_after(1.0):  # the owner stops reading a session not reading
                try:
                    for _ in range(6):
                        await stream.send_message(request)
                except TransportError:
                    pass  # the owner closed the session that does not read: a defence
        await anyio.sleep(2.0 if quick else 10.0)
    finally:
        for stream in streams:
            await stream.aclose()
    return sessions


async def _subscribers(target: Target, quick: bool) -> int:
    """2,000 subscriptions (125 sessions of 16, from four agents) that never read, while the
    owner commits 400 records."""
    sessions = 25 if quick else 125
    commits = 100 if quick else 400
    agents = ["planner", "inventory", "ops", "audit"]
    streams = []
    try:
        for i in range(sessions):  # each subscribes at once: a session proves itself so
            streams.append(stream := await target.session(agents[i % len(agents)]))
            for n in range(16):
                await stream.send_message(encode_request(n, "subscribe", {}))
        cdir = ClusterDir(target.root)
        async with open_session(target.roster, cdir.identity(OWNER), OWNER) as writer:
            for n in range(commits):
                await writer.request("put", {"key": f"req/sub-{n}", "body": "x" * 200})
    finally:
        for stream in streams:
            await stream.aclose()
    return commits


async def _crowd_out(target: Target, quick: bool) -> int:
    """80 TCP connections that never send a byte and reconnect whenever closed, while a
    member opens sessions one after the other (each connect, handshake, ping). Raises
    PlanfenceError naming how many of the member's sessions failed."""
    sessions = 50 if quick else 500
    failed = 0
    cdir = ClusterDir(target.root)

    async def hold() -> None:
        while True:
            try:
                stream = await anyio.connect_tcp("127.0.0.1", target.port)
            except OSError:
                await anyio.lowlevel.checkpoint()
                continue
            try:
                await stream.receive()
            except (anyio.EndOfStream, OSError, anyio.BrokenResourceError):
                pass
            finally:
                await stream.aclose()

    async with anyio.create_task_group() as crowd:
        for _ in range(80):
            crowd.start_soon(hold)
        await anyio.sleep(0.5)  # the crowd is in
        for _ in range(sessions):
            try:
                async with open_session(target.roster, cdir.identity("planner"), OWNER) as member:
                    await member.request("ping")
            except PlanfenceError:
                failed += 1
        crowd.cancel_scope.cancel()
    if failed:
        raise PlanfenceError(f"{failed} of {sessions} member sessions failed")
    return sessions
