"""The partition checker finds each violation it is meant to find (no namespaces needed)."""

from __future__ import annotations

from typing import Any

from planfence_net.bench.partition.checker import Window, check

OWNER_OF = {"req/p": "reqs", "inv/p": "inventory"}
A, B, C = "aa" * 32, "bb" * 32, "cc" * 32


def put(key: str, rid: str, seq: int, start: float, end: float) -> dict[str, Any]:
    owner = OWNER_OF[key]
    return {
        "type": "put",
        "owner": owner,
        "key": key,
        "start": start,
        "end": end,
        "ok": True,
        "id": rid,
        "seq": seq,
    }


def decision(
    start: float,
    end: float,
    outcome: str,
    reason: str | None = None,
    frontier: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "type": "authorize",
        "action": "ship",
        "deps": ["req/p", "inv/p"],
        "start": start,
        "end": end,
        "outcome": outcome,
        "reason": reason,
        "frontier": frontier or {},
    }


LOGS = {
    "reqs": [
        {"event": "put", "key": "req/p", "id": A, "seq": 1, "ts": 1.0},
        {"event": "put", "key": "req/p", "id": B, "seq": 2, "ts": 5.0},
    ],
    "inventory": [{"event": "put", "key": "inv/p", "id": C, "seq": 1, "ts": 1.0}],
}
STORES = {"reqs": {bytes.fromhex(A): 1, bytes.fromhex(B): 2}, "inventory": {bytes.fromhex(C): 1}}
PUTS = [put("req/p", A, 1, 0.9, 1.1), put("req/p", B, 2, 4.9, 5.1), put("inv/p", C, 1, 0.9, 1.1)]


def verdict(history: list[dict[str, Any]], windows: list[Window] = (), **stores: Any) -> list[str]:
    return check(
        PUTS + history,
        LOGS,
        {**STORES, **stores},
        list(windows),
        OWNER_OF,
        block_bound=3.5,
        recovery=6.0,
    ).violations


def test_a_run_that_held_has_no_violation() -> None:
    history = [
        decision(2.0, 2.1, "authorized", frontier={"req/p": A, "inv/p": C}),
        decision(4.8, 5.2, "authorized", frontier={"req/p": A, "inv/p": C}),  # A until 5.0
        decision(10.0, 11.5, "blocked", "owner_unavailable"),
        decision(12.5, 12.6, "authorized", frontier={"req/p": B, "inv/p": C}),
    ]
    assert verdict(history, [Window("inventory", 9.5, 12.0)]) == []


def test_an_authorization_over_a_version_no_longer_the_head_is_found() -> None:
    history = [decision(6.0, 6.2, "authorized", frontier={"req/p": A, "inv/p": C})]
    assert verdict(history) == [
        "heads: ship authorized over 6.000-6.200 with req/p aaaaaaaaaaaaaaaa (seq 1), "
        "the head only over 0.900-5.000"
    ]


def test_a_version_the_owner_never_committed_is_found() -> None:
    history = [decision(2.0, 2.1, "authorized", frontier={"req/p": "dd" * 32, "inv/p": C})]
    assert verdict(history) == [
        "heads: ship at 2.000 declared req/p dddddddddddddddd, which reqs's log never committed"
    ]


def test_a_lost_acknowledged_record_is_found() -> None:
    assert verdict([], reqs={bytes.fromhex(A): 1}) == [
        "lost: reqs acknowledged req/p seq 2 bbbbbbbbbbbbbbbb; its store has nothing"
    ]


def test_authorizing_or_blocking_slowly_while_cut_off_is_found() -> None:
    cut = [Window("inventory", 9.5, 12.0), Window("inventory", 20.0, 25.0)]
    history = [
        decision(10.0, 10.2, "authorized", frontier={"req/p": B, "inv/p": C}),
        decision(12.5, 12.6, "authorized", frontier={"req/p": B, "inv/p": C}),
        decision(20.1, 24.0, "blocked", "timeout"),
        decision(25.5, 25.6, "authorized", frontier={"req/p": B, "inv/p": C}),
    ]
    assert verdict(history, cut) == [
        "blocked: ship at 10.000 with inventory cut off ended authorized (None)",
        "blocked: ship at 20.100 took 3.90 s to block on inventory (bound 3.5 s)",
    ]


def test_no_authorization_after_a_heal_is_found() -> None:
    history = [
        decision(10.0, 11.5, "blocked", "timeout"),
        decision(19.0, 19.1, "authorized", frontier={"req/p": B, "inv/p": C}),
    ]
    assert verdict(history, [Window("inventory", 9.5, 12.0)]) == [
        "healed: no action declaring inventory's key authorized within 6 s of the heal at 12.000"
    ]
