"""`syncclient.SessionPool`: warm sessions between checks. A session is handed to one user at a
time; one the other side closed, or that has unread bytes, is closed and passed over; the
pool keeps at most its limit. The sessions here are socket pairs (the pool only looks at the
socket; the warm sessions to a real owner are tests/workspace/test_lean_hook.py's)."""

from __future__ import annotations

import socket

from nacl.signing import SigningKey

from planfence_net.core.roster import Agent
from planfence_net.net.syncclient import PoolKey, SessionPool, SyncSession

AGENT = Agent("ws", "127.0.0.1", 1, bytes(SigningKey.generate().verify_key), ("ws:*",))
KEY: PoolKey = ("c", b"me", "ws", b"them", ("127.0.0.1", 1))


def pair() -> tuple[SyncSession, socket.socket]:
    """A session over one end of a socket pair, and the other end (the owner's side)."""
    ours, theirs = socket.socketpair()
    ours.settimeout(5)  # as a request leaves it: idle() must not wait for it
    return SyncSession(ours, AGENT, None), theirs  # type: ignore[arg-type]


def test_an_idle_session_is_one_that_is_open_with_nothing_to_read() -> None:
    session, owner = pair()
    assert session.idle()
    owner.sendall(b"x")  # what nobody asked for
    assert not session.idle()
    session.sock.recv(1)
    assert session.idle()
    owner.close()
    assert not session.idle()
    session.close()


def test_the_pool_hands_out_open_sessions_once_and_keeps_at_most_its_limit() -> None:
    pool = SessionPool(idle=2)
    (first, first_owner), (second, second_owner), (third, third_owner) = pair(), pair(), pair()
    fourth, fourth_owner = pair()
    assert pool.take(KEY) is None
    pool.give(KEY, first)
    pool.give(KEY, second)
    second_owner.close()  # closed by the owner while idle
    assert pool.take(KEY) is first  # the closed one was passed over, and closed
    assert second.sock.fileno() == -1
    assert pool.take(KEY) is None  # each session to one user at a time
    pool.give(KEY, first)
    pool.give(("other", *KEY[1:]), third)  # type: ignore[arg-type]
    assert pool.take(("c", b"me", "ws", b"them", ("127.0.0.1", 2))) is None  # another address
    pool.give(KEY, fourth)  # over the limit: the oldest (first) is closed
    assert first.sock.fileno() == -1 and first_owner.recv(1) == b""
    assert pool.statistics() == {"idle": 2, "opened": 0, "reused": 1}
    pool.close()
    assert third.sock.fileno() == -1 and fourth.sock.fileno() == -1
    assert pool.statistics()["idle"] == 0
    for each in (first_owner, third_owner, fourth_owner):
        each.close()
