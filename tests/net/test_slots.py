"""MessageSlots, no network: at most `count` large messages at once, waiters served in order,
and holders that stall are named only while someone waits."""

from __future__ import annotations

from planfence_net.net.slots import MessageSlots


def test_slots_go_to_waiters_in_order_as_holders_finish() -> None:
    slots = MessageSlots(2, stall=10.0)
    granted: list[str] = []
    assert slots.take("a", 0.0, lambda: granted.append("a"))
    assert slots.take("b", 0.0, lambda: granted.append("b"))
    assert not slots.take("c", 1.0, lambda: granted.append("c"))
    assert not slots.take("d", 1.0, lambda: granted.append("d"))
    assert (slots.held, slots.waits, granted) == (2, 2, [])
    slots.give_back("a", 2.0)
    assert granted == ["c"] and slots.waiting("d") and not slots.waiting("c")
    slots.give_back("d", 3.0)  # a waiter whose session ended leaves the queue
    slots.give_back("b", 4.0)
    slots.give_back("b", 4.0)  # twice: nothing more
    assert granted == ["c"] and slots.held == 1


def test_a_holder_is_stalled_only_while_someone_waits() -> None:
    slots = MessageSlots(1, stall=10.0)
    assert slots.take("a", 0.0, lambda: None)
    assert slots.stalled(100.0) == []  # nobody waits: a slow sender harms no one
    assert not slots.take("b", 5.0, lambda: None)
    slots.touch("a", 5.0)
    assert slots.stalled(14.9) == []
    assert slots.stalled(15.0) == ["a"]
    slots.give_back("a", 15.0)  # "b" gets the slot; its clock starts now
    assert slots.stalled(24.0) == []
