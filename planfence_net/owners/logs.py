"""Structured owner logs: one JSON object per line, one file per agent."""

from __future__ import annotations

import asyncio
import heapq
import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..core.escaping import escape
from ..core.records import Record

# Every event an owner or executor writes (`planfence logs --event` checks its argument
# against these; tests/owners/test_log_events.py finds every name the package writes).
EVENTS = (
    "listening",
    "connection",
    "connection_refused",
    "connection_evicted",
    "accept_failed",
    "handshake",
    "handshake_refused",
    "handshake_failed",
    "session_refused",
    "request",
    "put",
    "decision",  # the central store's record of a validated action (bench/policies/central.py)
    "mcp_proxy",  # an MCP proxy's owner started (mcp/owner.py)
    "check",  # a plan's check, appended by the hook or `workspace check` (workspace/plans/checklog.py)
    "gate",  # an executor's decision, in its own log (executor/decisionlog.py: logs/executors/)
    "session_end",  # a fenced session ended (workspace/plans/checklog.py)
    # a workspace owner's: what it serves, its hook doors (socket, http) and refusals there
    "workspace",
    "hook",  # one hook call the owner answered (its client, code, ms)
    "hookd",
    "hookd_error",
    "hookd_refused",
    "hookhttp",
    "hookhttp_error",
    "hook_refused",
    "hook_warm",
    "hook_abandoned",
    "unparsed",  # not written: what the readers make of a line that is not JSON
    "error",
    "subscriber_dropped",
    "disconnected",
    "store_refused",
    "shutdown",
    "stopped",
)


class EventLog:
    """Appends events as JSON lines with write(2), so readers can follow it live.

    `write` appends at once; `write_soon` (request lines) holds a line until the end of the
    current event-loop turn, so the lines of every request answered in one turn go out in
    one write(2). A write that fails (disk full, I/O error, a log on a device that refuses
    writes) never raises: its lines are dropped and counted in `failed_writes`, and the
    daemon keeps serving. At most one loop turn's lines are held, so a log that keeps
    failing costs no memory.
    """

    def __init__(self, path: Path, agent: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.agent = agent
        self._request_agent = f'"agent":{_string(agent)},"event":"request",'
        self.failed_writes = 0
        self.last_failure = ""
        self._held: list[bytes] = []
        self._flush_scheduled = False

    def write(self, event: str, **fields: Any) -> None:
        """Append one event now (after the lines `write_soon` holds)."""
        self._held.append(self._line(event, fields))
        self.flush()

    def write_soon(self, event: str, **fields: Any) -> None:
        """Append one event by the end of this event-loop turn (at once without a loop)."""
        self._held.append(self._line(event, fields))
        if not self._flush_scheduled:
            self._schedule_flush()

    def write_request_soon(self, peer: str, op_keys: str, outcome: str, latency_ms: float) -> None:
        """`write_soon("request", peer=..., op=..., keys=..., outcome=..., latency_ms=...)`:
        the same line, written field by field (one per request, on the owner's hot path),
        with `op_keys` from `request_fields` (a repeated answer renders its keys once)."""
        line = (
            f'{{"ts":{round(time.time(), 6)!r},{self._request_agent}"peer":{_string(peer)},{op_keys},'
            f'"outcome":{_string(outcome)},"latency_ms":{float(latency_ms)!r}}}\n'
        )
        self._held.append(line.encode())
        if not self._flush_scheduled:
            self._schedule_flush()

    def write_puts_soon(self, records: Iterable[Record]) -> None:
        """`write_soon("put", key=..., id=..., seq=..., kind=..., parents=[...])` for each
        of `records` (a put_many's), the same lines written field by field (a put_many of
        4096 records would spend ~30 ms in the JSON encoder)."""
        head = f'{{"ts":{round(time.time(), 6)!r},"agent":{_string(self.agent)},"event":"put",'
        for r in records:
            parents = ",".join(f'"{p.hex()}"' for p in r.parents)
            self._held.append(
                f'{head}"key":{_string(r.key)},"id":"{r.id.hex()}","seq":{r.seq},'
                f'"kind":{_string(r.kind)},"parents":[{parents}]}}\n'.encode()
            )
        if not self._flush_scheduled:
            self._schedule_flush()

    @staticmethod
    def request_fields(op: str, keys: list[str]) -> str:
        """The `"op":...,"keys":[...]` part of a request line, for `write_request_soon`."""
        return f'"op":{_string(op)},"keys":[{",".join(map(_string, keys))}]'

    def _schedule_flush(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        self._flush_scheduled = True
        loop.call_soon(self.flush)

    def _line(self, event: str, fields: dict[str, Any]) -> bytes:
        entry = {"ts": round(time.time(), 6), "agent": self.agent, "event": event, **fields}
        return (_ENCODER.encode(entry) + "\n").encode()

    def flush(self) -> None:
        """Write every held line (one write(2))."""
        self._flush_scheduled = False
        if not self._held:
            return
        lines, self._held = self._held, []
        data = b"".join(lines)
        try:
            if self._fd is None:
                raise OSError("log closed")
            if os.write(self._fd, data) != len(data):
                raise OSError("short write")
        except OSError as exc:  # the log must never take the daemon down
            self.failed_writes += len(lines)
            self.last_failure = exc.strerror or str(exc)

    def statistics(self) -> dict[str, Any]:
        return {"log_failed_writes": self.failed_writes}

    def close(self) -> None:
        self.flush()
        if self._fd is None:
            return
        try:
            os.fsync(self._fd)
        except OSError:
            self.failed_writes += 1
        finally:
            os.close(self._fd)
            self._fd = None


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


# one encoder for every line: json.dumps with options builds a new one per call
_ENCODER = json.JSONEncoder(default=_jsonable, separators=(",", ":"))
_string = json.encoder.encode_basestring_ascii  # a str as JSON, as _ENCODER writes it


def read_lines(path: Path, follow: bool = False, poll: float = 0.25) -> Iterator[str]:
    """Whole lines of a text file (without their newline). With `follow`, keeps waiting for
    new lines like `tail -f` until the caller stops iterating. Raises FileNotFoundError."""
    with open(path, encoding="utf-8", errors="replace") as f:
        partial = ""
        while True:
            line = f.readline()
            if not line:
                if not follow:
                    return
                time.sleep(poll)  # tail -f: the writer is another process
                continue
            if not line.endswith("\n"):
                partial += line
                continue
            line, partial = partial + line, ""
            yield line.rstrip("\n")


def read_events(
    path: Path, *, event: str | None = None, follow: bool = False, poll: float = 0.25
) -> Iterator[dict[str, Any]]:
    """Events from a log file, optionally only those named `event`.

    With `follow`, keeps waiting for new lines like `tail -f` (until the caller stops
    iterating). A line that is not valid JSON is yielded as {"event": "unparsed", "line": ...}
    so nothing is hidden. Raises FileNotFoundError when the log does not exist.
    """
    for line in read_lines(path, follow, poll):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            entry = {"event": "unparsed", "line": line}
        if event is None or entry.get("event") == event:
            yield entry


def read_merged(
    paths: dict[str, Path], *, event: str | None = None, follow: bool = False, poll: float = 0.25
) -> Iterator[dict[str, Any]]:
    """The events of several owners' logs (agent -> log path) as one stream: what the logs
    hold now merged by time, then, with `follow`, new lines of every log as they come (each
    batch in time order) until the caller stops iterating. Every entry names its "agent". A
    log that does not exist yet is read once it appears; without `follow`, a missing one is
    skipped (FileNotFoundError only when none exists)."""
    tails = [_Tail(agent, path) for agent, path in paths.items()]
    if not follow and not any(t.path.exists() for t in tails):
        raise FileNotFoundError(", ".join(str(t.path) for t in tails))

    def stamp(entry: dict[str, Any]) -> float:
        ts = entry.get("ts", 0)
        return float(ts) if isinstance(ts, (int, float)) else 0.0

    wanted = (lambda e: True) if event is None else (lambda e: e.get("event") == event)
    try:
        yield from filter(wanted, heapq.merge(*(t.entries() for t in tails), key=stamp))
        while follow:
            batch = sorted((e for t in tails for e in t.entries()), key=stamp)
            if not batch:
                time.sleep(poll)  # tail -f: the writers are other processes
            yield from filter(wanted, batch)
    finally:
        for t in tails:
            t.close()


class _Tail:
    """One log read from where the last read stopped; whole lines only."""

    def __init__(self, agent: str, path: Path) -> None:
        self.agent, self.path = agent, path
        self._file: Any = None
        self._partial = ""

    def entries(self) -> Iterator[dict[str, Any]]:
        """The events of the complete lines written since the last call (none yet when the
        log does not exist)."""
        if self._file is None:
            try:
                self._file = open(self.path, encoding="utf-8", errors="replace")  # noqa: SIM115
            except FileNotFoundError:
                return
        while line := self._file.readline():
            if not line.endswith("\n"):
                self._partial += line
                continue
            line, self._partial = self._partial + line, ""
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                entry = {"event": "unparsed", "line": line.rstrip("\n")}
            if not isinstance(entry, dict):
                entry = {"event": "unparsed", "line": line.rstrip("\n")}
            entry.setdefault("agent", self.agent)
            yield entry

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def format_event(entry: dict[str, Any]) -> str:
    """One human-readable line: time, event, then the other fields as key=value."""
    stamp = time.strftime("%H:%M:%S", time.localtime(entry.get("ts", 0)))
    ms = int((entry.get("ts", 0) % 1) * 1000)
    rest = " ".join(
        f"{escape(str(k))}={_short(v)}"
        for k, v in entry.items()
        if k not in ("ts", "agent", "event")
    )
    return f"{stamp}.{ms:03d} {escape(str(entry.get('event', '?'))):<17} {rest}".rstrip()


def _short(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ",".join(_short(v) for v in value) + "]"
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:16]
    return escape(str(value))
