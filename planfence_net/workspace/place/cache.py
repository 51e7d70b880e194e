"""The hook's cache of one plan's records between calls (CLUSTER/run/hook-*): records are
immutable and each is verified again when read, so a plan checked before needs no fetch.
Kept apart from the check's loop so a hook call that only records a read loads no gate."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ...core.answers import verified_records, verifier
from ...core.errors import PlanfenceError
from ...core.records import Record
from ...core.roster import Roster
from ...protocol.messages import pack, unpack


def load_records(path: Path, roster: Roster) -> dict[bytes, Record]:
    """The records cached at `path` that parse and verify against `roster` ({} when none)."""
    try:
        wires = unpack(path.read_bytes())
    except (OSError, PlanfenceError):
        return {}
    return {r.id: r for r in verified_records(wires, verifier(roster), bad="drop")}


def save_records(path: Path, records: list[Record]) -> None:
    """Cache `records` at `path` (atomically; a failure to write only costs speed)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(pack([r.to_wire() for r in {r.id: r for r in records}.values()]))
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
