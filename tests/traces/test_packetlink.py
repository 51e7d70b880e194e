"""The packet-level link's model (traces/packetlink.py): pacing by the trace, delay, real
drops, without a socket."""

from __future__ import annotations

import random

import pytest

from planfence_net.traces.mmlink import Schedule, parse_trace
from planfence_net.traces.packetlink import PacketLink

FULL = bytes(1500)  # with mm-link's 4-byte charge, exactly one opportunity


def link(delay_ms: int = 0, **kwargs: object) -> PacketLink:
    """Opportunities at 10, 20, ..., 100 ms, looping every 100 ms."""
    trace = parse_trace("\n".join(str(t) for t in range(10, 101, 10)), "every-10ms")
    return PacketLink(Schedule(trace), delay_ms=delay_ms, **kwargs)  # type: ignore[arg-type]


def test_without_a_trace_a_packet_only_waits_out_the_delay() -> None:
    plain = PacketLink(None, delay_ms=30)
    assert plain.push(5, b"syn")
    assert plain.poll(34) == []
    assert plain.next_event_ms() == 35
    assert plain.poll(35) == [b"syn"]


def test_full_packets_take_one_opportunity_each_then_the_delay() -> None:
    paced = link(delay_ms=25)
    for n in range(3):
        assert paced.push(0, FULL), n
    assert paced.next_event_ms() == 35
    assert paced.poll(34) == []
    assert len(paced.poll(35)) == 1
    assert len(paced.poll(45)) == 1
    assert paced.next_event_ms() == 55
    assert len(paced.poll(1000)) == 1


def test_small_packets_share_an_opportunity_and_big_ones_span_several() -> None:
    paced = link()
    paced.push(0, bytes(700))
    paced.push(0, bytes(700))  # 2 x 704 charged bytes fit in one 1504-byte opportunity
    assert len(paced.poll(10)) == 2
    big = link()
    big.push(0, bytes(3100))  # 3104 charged bytes: three opportunities
    assert big.poll(20) == []
    assert big.next_event_ms() == 30
    assert len(big.poll(30)) == 1


def test_a_packet_uses_only_opportunities_after_it_arrived() -> None:
    paced = link()
    paced.push(10, FULL)  # arrives at the 10 ms opportunity: too late for it
    assert paced.poll(19) == []
    assert len(paced.poll(20)) == 1


def test_unused_opportunities_are_lost_not_banked() -> None:
    paced = link()
    assert paced.poll(95) == []  # nine opportunities pass unused
    paced.push(95, FULL)
    paced.push(95, FULL)
    assert len(paced.poll(100)) == 1  # one opportunity at 100, not ten
    assert len(paced.poll(110)) == 1  # the next pass of the loop


def test_loss_drops_packets_for_real_and_a_full_queue_drops_the_tail() -> None:
    lossy = link(loss=0.5, rng=random.Random(1))
    kept = [lossy.push(0, bytes(100)) for _ in range(200)]
    assert 60 < kept.count(False) < 140
    assert lossy.counts().dropped_loss == kept.count(False)
    short = link(queue_bytes=2000)
    assert short.push(0, FULL)
    assert not short.push(0, FULL)
    assert short.counts().dropped_queue == 1


def test_time_never_goes_backwards_and_settings_are_checked() -> None:
    paced = link()
    paced.poll(50)
    with pytest.raises(ValueError, match="backwards"):
        paced.push(49, FULL)
    with pytest.raises(ValueError, match="loss"):
        PacketLink(None, loss=1.0)
    with pytest.raises(ValueError, match="delay"):
        PacketLink(None, delay_ms=-1)
