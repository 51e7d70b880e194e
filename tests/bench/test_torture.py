"""The reliability suite, short version (`scripts/torture --quick`), against real owners."""

from __future__ import annotations

import pytest

from planfence_net.bench.torture import FaultResult, format_table
from planfence_net.bench.torture.suite import groups, main, run_suite

pytestmark = pytest.mark.anyio


async def test_the_quick_suite_holds_every_crash_damage_and_disk_fault() -> None:
    # the resource attacks are judged by RSS and ping p99, which depend on the machine's load:
    # they run in scripts/torture; the limits themselves are tested in test_owner_limits.py
    rows = await run_suite(quick=True, only=("kill -9", "store damage", "disk full"))
    table = format_table(rows)
    assert table.splitlines()[0].split() == ["fault", "rounds", "acknowledged", "lost", "outcome"]
    faults = [r.fault for r in rows]
    assert faults == [
        "kill -9 under concurrent puts",
        "store truncated to half",
        "store header overwritten",
        "store emptied to 0 bytes",
        "bit flip in a stored record",
        "WAL deleted after kill -9",
        "two daemons on one store",
        "disk full (2 MiB tmpfs)",
    ]
    for row in rows:
        assert row.held or row.outcome.startswith("skipped: "), table
    crash = rows[0]
    assert (crash.rounds, crash.lost) == (3, 0) and crash.acknowledged >= 3 * 20, table
    assert all(r.acknowledged > 0 for r in rows[1:6]), table


@pytest.mark.slow
async def test_the_quick_resource_attacks_run_and_the_owner_holds() -> None:
    # Judged on what does not depend on the machine's load: each attack ran its rounds, the
    # owner survived, everything it acknowledged reads back, the bystander never failed and
    # RSS stayed under 300 MB. The ping p99 is printed in the outcome, not judged here.
    rows = await run_suite(quick=True, only=("resource limits",))
    table = format_table(rows)
    assert [r.fault for r in rows] == [
        "descriptors (cap)",
        "descriptors (EMFILE)",
        "get x1024",
        "heads repeated",
        "empty arrays",
        "unfinished messages",
        "unread replies",
        "subscribers",
        "crowd-out",
    ], table
    for row in rows:
        assert row.held and row.rounds > 0 and row.acknowledged > 0, table


def test_a_row_holds_only_when_nothing_was_lost_and_the_outcome_is_held() -> None:
    assert FaultResult("f", 1, 10, 0, "held").held
    assert FaultResult("f", 1, 10, 0, "held (peak RSS 36 MB)").held
    assert not FaultResult("f", 1, 10, 1, "held").held
    assert not FaultResult("f", 1, 10, 0, "started on a damaged store").held


def test_rounds_set_the_kill_rounds_and_must_be_positive(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert [name for name, _, _ in groups(quick=True, rounds=7)] == [
        "kill -9",
        "store damage",
        "disk full",
        "resource limits",
        "partition",
    ]
    with pytest.raises(SystemExit) as exit_:
        main(["--rounds", "0"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.endswith("error: --rounds must be at least 1\n")
