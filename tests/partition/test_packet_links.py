"""Figure 2 on packet-level links (bench/packets/): an owner in a namespace of its own behind
TUN devices whose packets a trace paces, beside the relay. Needs root; skips with one line
elsewhere. The namespace and the devices are gone when the run ends."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from planfence_net.bench.packets.compare import QUICK, run
from planfence_net.bench.packets.net import available

pytestmark = pytest.mark.partition

RTT_MS = 60  # synthetic-lte: 30 ms one way in each direction


@pytest.mark.timeout(300)
def test_the_packet_level_link_charges_the_tcp_handshake_and_drops_for_real(
    tmp_path: Path,
) -> None:
    reason = available()
    if reason is not None:
        pytest.skip(reason)
    rows, counts = run(tmp_path, "synthetic-lte", reps=2, seed=0, points=QUICK)
    packet = [r for r in rows if r.variant == "packet"]
    relay = [r for r in rows if r.variant == "relay"]
    assert len(packet) == len(relay) == 2 * len(QUICK)
    # TCP's handshake, Noise's and the put's round trip: at least three round trips through
    # the link; the relay accepts TCP itself, so it can do with two
    assert min(r.sync_ms for r in packet) >= 3 * RTT_MS
    assert min(r.sync_ms for r in relay) >= 2 * RTT_MS
    for count in counts:
        # every segment sent is acknowledged on the reverse link, which pays for it
        assert count["far_to_near"]["packets_out"] > 0
        assert count["near_to_far"]["packets_in"] >= 3  # SYN, the handshake, the put
    lossy = counts[QUICK.index(("loss", 16, 0, 0.05))]
    assert lossy["near_to_far"]["dropped_loss"] + lossy["far_to_near"]["dropped_loss"] > 0
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert [line for line in listed.stdout.splitlines() if line.startswith("pk")] == []
