"""Members first, the pure rules (owners/admission.py): who keeps a place at the door."""

from __future__ import annotations

import pytest

from planfence_net.owners.admission import Admission, source_of
from planfence_net.owners.limits import Limits


def door(**limits: int) -> Admission:
    return Admission(Limits(**{"max_connections": 100, **limits}))


def test_at_the_strangers_limit_the_oldest_stranger_makes_room() -> None:
    a = door(max_strangers=2)
    first, _, _ = a.arrive("10.0.0.1", "c1", 0)
    second, _, _ = a.arrive("10.0.0.2", "c2", 1)
    third, evicted, reason = a.arrive("10.0.0.3", "c3", 2)
    assert (evicted, reason) == (first, "2 strangers")
    assert first is not None and first.evicted == "2 strangers"
    assert list(a.strangers) == [second, third] and a.unproven == 2


def test_one_address_pushes_out_only_its_own_oldest() -> None:
    a = door(strangers_per_address=2)
    other, _, _ = a.arrive("10.0.0.9", "c0", 0)
    mine = [a.arrive("10.0.0.1", f"c{i}", i + 1)[0] for i in range(2)]
    newcomer, evicted, reason = a.arrive("10.0.0.1", "c3", 3)
    assert (evicted, reason) == (mine[0], "2 strangers from 10.0.0.1")
    assert list(a.strangers) == [other, mine[1], newcomer]


def test_a_claim_leaves_the_strangers_and_the_oldest_claim_makes_room() -> None:
    a = door(max_handshakes=1, max_strangers=1)
    one, _, _ = a.arrive("10.0.0.1", "c1", 0)
    assert one is not None and a.claim(one) is None
    assert (list(a.strangers), list(a.claimants)) == ([], [one])
    two, evicted, _ = a.arrive("10.0.0.1", "c2", 1)  # the stranger place is free again
    assert evicted is None and two is not None
    assert a.claim(two) is one and one.evicted == "1 handshakes in progress"
    assert list(a.claimants) == [two]


def test_a_newcomer_is_refused_only_when_every_connection_is_claimed_or_proven() -> None:
    a = door(max_connections=2)
    one, _, _ = a.arrive("10.0.0.1", "c1", 0)
    assert one is not None
    a.claim(one)
    place, evicted, reason = a.arrive("10.0.0.2", "c2", 2)  # two open: one claimed, one proven
    assert (place, evicted, reason) == (None, None, "2 connections open")
    a.leave(one)
    a.leave(one)  # idempotent
    assert a.unproven == 0 and a.by_address == {}


@pytest.mark.parametrize(
    "remote, source",
    [
        ("127.0.0.1:5000", "127.0.0.1"),
        ("[2001:db8:1:2:3:4:5:6]:5000", "2001:db8:1:2::/64"),
        ("2001:db8:1:2::9:5000", "2001:db8:1:2::/64"),
        ("::ffff:10.1.2.3:5000", "10.1.2.3"),
        ("?", "?"),
    ],
)
def test_an_ipv6_source_is_counted_by_its_64(remote: str, source: str) -> None:
    assert source_of(remote) == source
