"""The churn benchmark: its judge of wrong decisions, and a quick run on real owners."""

from __future__ import annotations

import math

import pytest

from planfence_net.bench.perf.churn import ChurnSettings, Version, churn_curve, wrong_decisions

V1, V2, V3 = b"\x01" * 32, b"\x02" * 32, b"\x03" * 32
# V1 from the start; V2 sent at 10 s, acknowledged at 11 s; V3 sent at 20 s, acknowledged at 21 s
VERSIONS: list[Version] = [(V1, -math.inf, -math.inf), (V2, 10.0, 11.0), (V3, 20.0, 21.0)]


def decision(start: float, end: float, rid: bytes | None, outcome: str = "authorized") -> list:  # type: ignore[type-arg]
    return [start, end, outcome, None, False, rid.hex() if rid else None, True]


@pytest.mark.parametrize(
    ("made", "wrong"),
    [
        (decision(5.0, 6.0, V1), 0),
        (decision(10.5, 10.6, V1), 0),  # V2 may not be committed yet
        (decision(11.5, 11.6, V1), 1),  # V2 was acknowledged before the decision began
        (decision(10.5, 10.6, V2), 0),  # V2 may be committed already
        (decision(9.0, 9.5, V2), 1),  # V2 was not even sent when the decision ended
        (decision(30.0, 31.0, V3), 0),
        (decision(30.0, 31.0, V1, outcome="blocked"), 0),  # a block is never wrong
        (decision(5.0, 6.0, b"\x09" * 32), 1),  # a version nobody wrote
    ],
)
def test_the_judge_refutes_exactly_the_stale_authorizations(made: list, wrong: int) -> None:  # type: ignore[type-arg]
    assert wrong_decisions([made], VERSIONS) == wrong


def test_an_other_key_at_a_version_nobody_wrote_is_wrong() -> None:
    made = decision(5.0, 6.0, V1)
    made[6] = False
    assert wrong_decisions([made], VERSIONS) == 1


@pytest.mark.slow
def test_quick_run_decides_through_the_churn_without_a_wrong_decision() -> None:
    settings = ChurnSettings.quick()
    rows = churn_curve(settings)
    assert [r["phase"] for r in rows] == list(settings.phases)
    for row in rows:
        assert row["wrong"] == 0, row
        assert row["decisions_per_s"] > 0 and 0 < row["p50_us"] <= row["p99_us"]
        churning = row["phase"] != "quiet"
        assert (row["changes"] > 0) == churning
        if churning:
            assert row["replanned"] > 0, row
        if row["phase"] == "churn-own":  # a replica per executor: nobody to wait for
            assert row["joined_ids"] == 0 and row["fetched_ids"] > 0
