"""An executor's decisions in the cluster folder: one JSON line per gate decision, appended to
`logs/executors/NAME.jsonl` beside the owners' logs and in their format (`ts`, `agent`,
`event`, then the fields), so `planfence logs` and `planfence view` read them as they read
the owners'.

One line, event `gate` (`agent` is the executor, the roster member it runs as):

    {"ts", "agent", "event": "gate", "action", "outcome": "authorized" | "blocked",
     "reason" (null when authorized), "detail",
     "drift": [{"key", "from", "to", "owner"}, ...], "replanned": true | false,
     "roots" (the action's plan ids), "new_roots" (the replanned plan's; [] without a replan),
     "rounds", "stall_ms", "bytes"}

`drift` is the first drifting round's: each declared key whose head was not the plan's
version, `from` the plan's record id, `to` the head's, `owner` the key's owner (who wrote the
new head). Ids are lowercase hex. `stall_ms` is the coordination time (planning excluded),
`bytes` what the decision sent and received, `rounds` its round trips.

Writing never raises and never waits on anything but the one write(2): the log is opened
(O_APPEND) at the first line and each line is one write. A log that cannot be opened or
written (a read-only folder, a full disk) drops the line and counts it (`failed_writes`,
`last_failure`); the decision is the executor's answer, its line is not. Nothing logs unless
handed a `DecisionLog`: the library's `GateRunner` only with `log=`. Standard library only, so
a one-shot `planfence authorize` pays nothing to import it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.roster import check_name

if TYPE_CHECKING:
    from ..core.decision import Decision

EVENT = "gate"  # the event name of a decision line (owners/logs.py EVENTS lists it)
FOLDER = Path("logs") / "executors"  # inside the cluster folder


def decision_log_path(root: Path, executor: str) -> Path:
    """ROOT/logs/executors/EXECUTOR.jsonl; raises ConfigError for a name that is not an agent
    name."""
    return Path(root) / FOLDER / f"{check_name(executor)}.jsonl"


def executor_logs(root: Path, names: Iterable[str]) -> dict[str, Path]:
    """The decision log of each of `names` (roster members), as `owners.logs.read_merged`
    takes them: a label (`NAME executor`) -> its path, whether it exists yet or not."""
    return {f"{name} executor": decision_log_path(root, name) for name in names}


class DecisionLog:
    """Appends an executor's decisions to `path` (see module doc); `owner_of` names a key's
    owner (the roster's `owner_of`), for the drift's `owner`."""

    __slots__ = ("path", "executor", "owner_of", "failed_writes", "last_failure", "_fd")

    def __init__(self, path: Path, executor: str, owner_of: Callable[[str], str | None]) -> None:
        self.path = path
        self.executor = executor
        self.owner_of = owner_of
        self.failed_writes = 0
        self.last_failure = ""
        self._fd: int | None = None

    @classmethod
    def in_folder(
        cls, root: Path, executor: str, owner_of: Callable[[str], str | None]
    ) -> DecisionLog:
        """The log of `executor` in the cluster folder `root` (`decision_log_path`)."""
        return cls(decision_log_path(root, executor), executor, owner_of)

    def write(
        self,
        decision: Decision,
        roots: Sequence[bytes],
        new_roots: Sequence[bytes] = (),
        stall: float | None = None,
    ) -> None:
        """Append the line of `decision`, made for the action on `roots`; `new_roots` are the
        replanned plan's (when it replanned), `stall` the coordination seconds (default: the
        decision's elapsed time). Never raises."""
        try:
            data = self.line(decision, roots, new_roots, stall)
        except (TypeError, ValueError, AttributeError) as exc:  # a value no line can hold
            self._failed(str(exc))
            return
        try:
            if self._fd is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            if os.write(self._fd, data) != len(data):
                raise OSError("short write")
        except OSError as exc:  # the log must never stop or fail the decision
            self._failed(exc.strerror or str(exc))

    def line(
        self,
        decision: Decision,
        roots: Sequence[bytes],
        new_roots: Sequence[bytes] = (),
        stall: float | None = None,
    ) -> bytes:
        """The JSON line (with its newline) `write` appends for `decision`. Written field by
        field: a one-shot `authorize` then never imports `json` (a millisecond and a half of
        its start-up) unless a string needs escaping."""
        owner_of = self.owner_of
        drift = ",".join(
            f'{{"key":{_string(key)},"from":"{old.hex()}","to":"{new.hex()}",'
            f'"owner":{_optional(owner_of(key))}}}'
            for key, (old, new) in decision.drift.items()
        )
        replanned = decision.replanned
        stall_ms = round((decision.elapsed if stall is None else stall) * 1000, 3)
        return (
            f'{{"ts":{round(time.time(), 6)!r},"agent":{_string(self.executor)},'
            f'"event":"{EVENT}","action":{_string(decision.action)},'
            f'"outcome":{_string(decision.outcome)},"reason":{_optional(decision.reason)},'
            f'"detail":{_string(decision.detail)},"drift":[{drift}],'
            f'"replanned":{"true" if replanned else "false"},"roots":[{_ids(roots)}],'
            f'"new_roots":[{_ids(new_roots) if replanned else ""}],'
            f'"rounds":{int(decision.round_trips)},"stall_ms":{float(stall_ms)!r},'
            f'"bytes":{int(decision.bytes_sent + decision.bytes_received)}}}\n'
        ).encode()

    def statistics(self) -> dict[str, Any]:
        """Lines that could not be written, and why the last one was not."""
        return {"failed_writes": self.failed_writes, "last_failure": self.last_failure}

    def close(self) -> None:
        """Close the log (a later `write` opens it again)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.close(fd)
            except OSError:
                pass

    def _failed(self, why: str) -> None:
        self.failed_writes += 1
        self.last_failure = why
        self.close()  # the next line tries again from the start (the disk may have room)


def _string(text: str) -> str:
    """`text` as a JSON string (json's own escaping for anything but plain printable ASCII
    without quotes or backslashes)."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    import json

    return json.dumps(text)


def _optional(text: str | None) -> str:
    return "null" if text is None else _string(text)


def _ids(ids: Sequence[bytes]) -> str:
    return ",".join(f'"{rid.hex()}"' for rid in ids)
