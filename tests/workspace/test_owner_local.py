"""The workspace owner's own keys read in-process (`owner/local.py`): the same answers as a
session to the owner gives, on a drift too, and the same refusals (a caller outside the
roster, a malformed request, a passed deadline) as errors the checks already fail closed on.

The owner runs in the test's event loop (its store, service and listening daemon); the
in-process requests are made from a worker thread, as the hook doors' checks make them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from nacl.signing import SigningKey

from planfence_net.core.errors import HandshakeError, RequestError, TransportError
from planfence_net.core.identity import Identity
from planfence_net.net.syncclient import SessionPool, SyncSessions, keeping
from planfence_net.owners.daemon import OwnerDaemon
from planfence_net.owners.logs import EventLog
from planfence_net.owners.startup import open_store
from planfence_net.workspace.owner.daemon import MAX_MESSAGE, Workspace
from planfence_net.workspace.owner.local import LocalOwner
from planfence_net.workspace.place.config import ensure_local_cluster
from planfence_net.workspace.place.observe import Observer
from support.workspace import write

KEY = "ws:file/auth.ts"


class ThreadNoting(Observer):
    """An Observer that notes the thread of each look."""

    threads: list[int] = []

    def observe(self, facts: list[str]) -> dict[str, Any]:
        ThreadNoting.threads.append(threading.get_ident())
        return super().observe(facts)


def with_owner(wt: Path, check: Callable[[LocalOwner, Any, Any], None]) -> None:
    """Serve the worktree `wt` in this loop and run `check(local, roster, identity)` in a
    worker thread."""
    cdir, _ = ensure_local_cluster(wt, "ws")
    roster, me = cdir.roster(), cdir.identity("ws")

    async def main() -> None:
        log = EventLog(cdir.log("ws"), "ws")
        store = await open_store(me, cdir.db("ws"), log, signs=True, accept_loss=False)
        try:
            workspace = Workspace(ThreadNoting(wt))
            service = workspace.service()
            daemon = OwnerDaemon(roster, me, store, log, max_message=MAX_MESSAGE, service=service)
            async with anyio.create_task_group() as tg:
                await tg.start(daemon.serve)
                local = LocalOwner(daemon, workspace.looking)
                await anyio.to_thread.run_sync(check, local, roster, me)
                tg.cancel_scope.cancel()
        finally:
            await store.close()
            log.close()

    anyio.run(main)


def heads(roster: Any, me: Identity, local: LocalOwner | None) -> dict[str, Any]:
    """The `heads` answer for KEY, through `local` when given, else over a session."""
    pool = SessionPool()
    with keeping(pool, local):
        sessions = SyncSessions(roster, me)
        try:
            answer = sessions.request("ws", "heads", {"keys": [KEY]}, time.monotonic() + 20)
        finally:
            sessions.close()
            pool.close()
    assert sessions.local_requests == (1 if local is not None else 0)
    return answer


def test_in_process_answers_are_a_sessions_on_a_drift_too(tmp_path: Path) -> None:
    ThreadNoting.threads.clear()
    write(tmp_path / "wt", {"auth.ts": "export const timeout = 30;\n"})

    def check(local: LocalOwner, roster: Any, me: Identity) -> None:
        first = heads(roster, me, local)
        assert heads(roster, me, None) == first
        write(tmp_path / "wt", {"auth.ts": "export const timeout = 60;\n"})  # a drift
        drifted = heads(roster, me, local)
        assert drifted != first
        assert heads(roster, me, None) == drifted
        assert local.answered == 2
        # The in-process requests looked at the worktree in their caller's thread.
        assert ThreadNoting.threads[0] == ThreadNoting.threads[2] == threading.get_ident()
        assert ThreadNoting.threads[1] != threading.get_ident()

    with_owner(tmp_path / "wt", check)


def test_in_process_refusals_are_the_errors_a_session_gives(tmp_path: Path) -> None:
    write(tmp_path / "wt", {"auth.ts": "x\n"})

    def check(local: LocalOwner, roster: Any, me: Identity) -> None:
        later = time.monotonic() + 20
        assert local.serves(roster, roster.agent("ws"))
        stranger = Identity("ws", SigningKey.generate())
        with pytest.raises(HandshakeError, match="not in its roster"):
            local.request(stranger, "heads", {"keys": [KEY]}, later)
        with pytest.raises(RequestError) as refused:
            local.request(me, "heads", {"keys": "not a list"}, later)
        assert refused.value.code == "bad_request"
        with pytest.raises(RequestError) as unknown:
            local.request(me, "no_such_op", {}, later)
        assert unknown.value.code == "unknown_op"
        with pytest.raises(RequestError) as observed:  # the service's own rules hold
            local.request(me, "put", {"key": KEY, "kind": "fact", "parents": [], "body": 1}, later)
        assert observed.value.code == "forbidden"
        with pytest.raises(TransportError, match="deadline"):
            local.request(me, "heads", {"keys": [KEY]}, time.monotonic() - 1)

    with_owner(tmp_path / "wt", check)


pytestmark = pytest.mark.timeout(60)
