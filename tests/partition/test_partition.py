"""Partitions on separate network stacks: each owner and the executors in their own network
namespace joined by veth links; one owner isolated, the executors split from half the data
owners, a flapping link; the history checked by an independent checker (bench/partition/).

Needs root and iproute2; skips with one line elsewhere. Every namespace (and with it every
veth) is deleted when the run ends, failed or not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planfence_net.bench.partition import netns
from planfence_net.bench.partition.netns import available, leftovers
from planfence_net.bench.partition.run import run

pytestmark = pytest.mark.partition


@pytest.mark.timeout(300)  # about 60 s: 33 s of workload, five owners started and stopped
def test_partitioned_owners_block_and_recover_and_nothing_acknowledged_is_lost(
    tmp_path: Path,
) -> None:
    reason = available()
    if reason is not None:
        pytest.skip(reason)
    result = run(tmp_path)
    verdict = result.verdict
    figures = verdict.figures
    print(figures)
    assert verdict.violations == [], "\n".join(verdict.violations[:20])
    assert (result.leftovers, leftovers(result.prefix)) == ([], [])
    # the run exercised what it checks: decisions while cut, authorizations, recoveries
    assert [w.owner for w in result.windows[:3]] == ["inventory", "reqs", "inventory"]
    assert {w.owner for w in result.windows[3:]} == {"ops"} and len(result.windows) > 5
    assert figures["blocked_while_cut"] > 0 and figures["authorized"] > 0, figures
    assert figures["puts_acknowledged"] > 0 and figures["slowest_recovery_s"] is not None


def test_a_setup_that_fails_halfway_leaves_no_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    reason = available()
    if reason is not None:
        pytest.skip(reason)
    real, calls = netns.ip, []

    def failing_at_the_eighth(*args: str) -> None:
        calls.append(args)
        if len(calls) == 8:  # the second owner's link
            raise RuntimeError("ip: refused")
        real(*args)

    topology = netns.Topology(["reqs", "inventory"])
    monkeypatch.setattr(netns, "ip", failing_at_the_eighth)
    with pytest.raises(RuntimeError, match="ip: refused"):
        topology.create()
    monkeypatch.setattr(netns, "ip", real)
    made = [f"{topology.prefix}-{n}" for n in ("hub", "reqs", "inventory")]
    assert sorted(leftovers(topology.prefix)) == sorted(made)  # all made before the failure
    assert topology.close() == [] and leftovers(topology.prefix) == []
