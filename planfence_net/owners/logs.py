"""Structured owner logs: one JSON object per line, one file per agent."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import IO, Any, Iterator


class EventLog:
    """Appends events as JSON lines; each line is flushed so readers can follow it live."""

    def __init__(self, path: Path, agent: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = open(path, "a", encoding="utf-8")
        self.agent = agent

    def write(self, event: str, **fields: Any) -> None:
        entry = {"ts": round(time.time(), 6), "agent": self.agent, "event": event, **fields}
        self._file.write(json.dumps(entry, default=_jsonable, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def read_events(path: Path, *, event: str | None = None, follow: bool = False,
                poll: float = 0.25) -> Iterator[dict[str, Any]]:
    """Events from a log file, optionally only those named `event`.

    With `follow`, keeps waiting for new lines like `tail -f` (until the caller stops
    iterating). A line that is not valid JSON is yielded as {"event": "unparsed", "line": ...}
    so nothing is hidden. Raises FileNotFoundError when the log does not exist.
    """
    with open(path, encoding="utf-8") as f:
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
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                entry = {"event": "unparsed", "line": line.rstrip("\n")}
            if event is None or entry.get("event") == event:
                yield entry


def format_event(entry: dict[str, Any]) -> str:
    """One human-readable line: time, event, then the other fields as key=value."""
    stamp = time.strftime("%H:%M:%S", time.localtime(entry.get("ts", 0)))
    ms = int((entry.get("ts", 0) % 1) * 1000)
    rest = " ".join(f"{k}={_short(v)}" for k, v in entry.items()
                    if k not in ("ts", "agent", "event"))
    return f"{stamp}.{ms:03d} {entry.get('event', '?'):<17} {rest}".rstrip()


def _short(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ",".join(_short(v) for v in value) + "]"
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:16]
    return str(value)
