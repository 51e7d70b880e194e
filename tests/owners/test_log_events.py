"""`planfence logs --event NAME` accepts every event the package writes: each name written
through `EventLog.write`/`write_soon` or as a line's "event" field is in `EVENTS`."""

from __future__ import annotations

import re
from pathlib import Path

from planfence_net.owners.logs import EVENTS

PACKAGE = Path(__file__).resolve().parents[2] / "planfence_net"
WRITTEN = re.compile(
    r"""\.write(?:_soon)?\(\s*"([a-z_]+)"|"event":\s*"([a-z_]+)"|EVENT = "([a-z_]+)"|SESSION_END = "([a-z_]+)\""""
)


def written_events() -> set[str]:
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for match in WRITTEN.finditer(path.read_text()):
            found.add(next(group for group in match.groups() if group))
    return found


def test_every_event_the_package_writes_can_be_asked_for() -> None:
    written = written_events()
    assert {"put", "request", "gate", "session_end", "hookd"} <= written  # the scan finds them
    assert sorted(written - set(EVENTS)) == []


def test_the_scan_finds_a_name_missing_from_the_list() -> None:
    assert WRITTEN.search('log.write("no_such_event", x=1)') is not None
    assert "no_such_event" not in EVENTS
