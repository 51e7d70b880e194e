"""The fail-open ablation reads the gate's decision; the gate itself always fails closed."""

from __future__ import annotations

import pytest

from planfence_net.bench.policies.policy import fails_open
from planfence_net.core.decision import Decision


def decision(outcome: str, reason: str | None) -> Decision:
    return Decision(
        action="ship",
        outcome=outcome,
        reason=reason,
        detail="",
        replanned=False,
        frontier={},
        heads={},
        drift={},
        round_trips=1,
        bytes_sent=0,
        bytes_received=0,
        elapsed=0.0,
    )


@pytest.mark.parametrize(
    ("reason", "issued"),
    [
        ("missing_lineage", True),
        ("owner_unavailable", True),
        ("timeout", True),
        ("malformed_response", True),
        ("changed_again", True),
        ("stale_plan", False),
        ("unknown_owner", False),
        ("incomplete_declaration", False),
        ("ambiguous_frontier", False),
    ],
)
def test_fail_open_issues_only_availability_blocks(reason: str, issued: bool) -> None:
    assert fails_open(decision("blocked", reason)) is issued


def test_an_authorization_is_not_a_fail_open() -> None:
    assert fails_open(decision("authorized", None)) is False
