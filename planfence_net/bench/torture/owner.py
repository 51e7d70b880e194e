"""One real owner process for the torture faults, and the clients that load and check it.

`Victim` is a one-agent cluster folder (agent `planner`, keys `plan/*`) whose owner runs as
`planfence owner serve` in a child process: started, killed with SIGKILL, stopped with SIGTERM,
or expected to refuse to start. `Ledger` remembers every acknowledged put (seq -> id) and
checks what an owner serves against it.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from ...cluster.processes import ClusterDir, init_cluster
from ...core.errors import PlanfenceError, RequestError
from ...core.records import Record, record_from_wire, verify
from ...net.client import Session, open_session

AGENT = "planner"
WRITERS, IN_FLIGHT = 8, 2  # sessions, and puts each keeps in flight
START_TIMEOUT = 20.0
GET_BATCH = 1000  # ids per get request (an owner refuses more than 4096)


class Refused(Exception):
    """The owner exited instead of listening: `code` is its exit code, `stderr` its output."""

    def __init__(self, code: int, stderr: str) -> None:
        super().__init__(stderr.strip())
        self.code = code
        self.stderr = stderr


class Victim:
    """A one-owner cluster folder at `root` (made when missing) and its owner process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cdir = ClusterDir(root)
        if not self.cdir.roster_path.exists():
            init_cluster(root, agents=1, base_port=0)
        self.roster = self.cdir.roster()
        self.identity = self.cdir.identity(AGENT)
        self.db = self.cdir.db(AGENT)
        self.proc: subprocess.Popen[str] | None = None

    async def start(self, *extra: str) -> None:
        """Start the owner and wait until it listens. Raises Refused when it exits instead
        (its one-line reason in `stderr`), TimeoutError when it neither listens nor exits."""
        argv = [
            sys.executable,
            "-m",
            "planfence_net",
            "owner",
            "serve",
            str(self.root),
            "--agent",
            AGENT,
            *extra,
        ]
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.proc = proc
        assert proc.stdout is not None
        try:
            with anyio.fail_after(START_TIMEOUT):
                line = await anyio.to_thread.run_sync(proc.stdout.readline)
                if not line.startswith(f"owner {AGENT} listening on "):
                    code = await anyio.to_thread.run_sync(proc.wait)
                    raise Refused(code, proc.stderr.read() if proc.stderr else "")
        except BaseException:
            self.kill9()
            raise

    def kill9(self) -> None:
        """SIGKILL the owner (if running) and reap it."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        _close(proc)

    def stop(self) -> int:
        """SIGTERM the owner and wait for it; returns its exit code (0 when it stopped well)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return 0
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        _close(proc)
        return code

    def session(self) -> Any:
        """An async context manager: a session to the owner as the owner itself."""
        return open_session(self.roster, self.identity, AGENT)

    def stored_seqs(self) -> list[tuple[int, bytes]]:
        """(seq, id) of every record in the store file, by seq (the owner must be stopped)."""
        conn = sqlite3.connect(self.db)
        try:
            return [
                (seq, bytes(rid))
                for seq, rid in conn.execute("SELECT seq, id FROM records ORDER BY seq")
            ]
        finally:
            conn.close()


def _close(proc: subprocess.Popen[str]) -> None:
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


async def put(session: Session, key: str, body: Any) -> tuple[int, bytes]:
    """One put; returns the acknowledged (seq, id)."""
    result = await session.request("put", {"key": key, "kind": "fact", "parents": [], "body": body})
    return int(result["seq"]), bytes(result["id"])


@dataclass
class Ledger:
    """Every acknowledged put: seq -> id. `conflicts` counts seqs acknowledged twice with
    different ids (a seq signed twice)."""

    acked: dict[int, bytes] = field(default_factory=dict)
    conflicts: int = 0

    def add(self, seq: int, rid: bytes) -> None:
        if self.acked.setdefault(seq, rid) != rid:
            self.conflicts += 1

    async def lost(self, victim: Victim, seqs: list[int] | None = None) -> int:
        """How many acknowledged records (of `seqs`, default all) the running owner does not
        serve intact: absent, refused, or not verifying against the roster."""
        wanted = [self.acked[s] for s in (self.acked if seqs is None else seqs)]
        served: set[bytes] = set()
        async with victim.session() as session:
            for at in range(0, len(wanted), GET_BATCH):
                batch = wanted[at : at + GET_BATCH]
                try:
                    result = await session.request("get", {"ids": batch})
                except RequestError:
                    continue
                served.update(r.id for r in _verified(victim, result))
        return sum(rid not in served for rid in wanted)

    def check_store(self, victim: Victim) -> str | None:
        """None when the stopped owner's store holds seqs 1..n contiguously, each acknowledged
        seq with its acknowledged id; else what is wrong."""
        stored = victim.stored_seqs()
        seqs = [seq for seq, _ in stored]
        if seqs != list(range(1, len(seqs) + 1)):
            return f"seqs not contiguous: {len(seqs)} records, highest {max(seqs, default=0)}"
        ids = dict(stored)
        resigned = sum(1 for seq, rid in self.acked.items() if ids.get(seq) not in (None, rid))
        if resigned or self.conflicts:
            return f"{resigned + self.conflicts} seqs signed twice"
        return None


def _verified(victim: Victim, result: dict[str, Any]) -> list[Record]:
    records = []
    for wire in result.get("records", []):
        try:
            record = record_from_wire(wire)
            verify(
                record, public_key_of=victim.roster.public_key_of, owner_of=victim.roster.owner_of
            )
        except PlanfenceError:
            continue
        records.append(record)
    return records


async def load(victim: Victim, ledger: Ledger, count: int, *, kill: bool = False) -> int:
    """Concurrent puts (WRITERS sessions, IN_FLIGHT puts each) until `count` were
    acknowledged; with `kill`, SIGKILL the owner at that moment, puts still in flight.
    Returns the number acknowledged (every ack goes into `ledger`)."""
    acked = 0
    enough = anyio.Event()

    async def writer(session: Session, w: int) -> None:
        nonlocal acked
        n = 0
        while not enough.is_set() or kill:
            try:
                seq, rid = await put(
                    session, f"plan/w{w}", {"w": w, "n": n, "tag": f"torture-{w}-{n}"}
                )
            except PlanfenceError:
                return  # killed, or the owner refused: the put was not acknowledged
            ledger.add(seq, rid)
            acked, n = acked + 1, n + 1
            if acked >= count:
                enough.set()

    async with AsyncExitStack() as stack:
        sessions = [await stack.enter_async_context(victim.session()) for _ in range(WRITERS)]
        async with anyio.create_task_group() as tg:
            for w in range(WRITERS * IN_FLIGHT):
                tg.start_soon(writer, sessions[w % WRITERS], w)
            await enough.wait()
            if kill:
                victim.kill9()
    return acked
