"""An executor's decision log (`executor.decisionlog`): the line it appends for a decision,
and a log that cannot be opened or written, which never stops or fails the decision."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest

from planfence_net.core.decision import Decision
from planfence_net.core.gate import Action
from planfence_net.executor.decisionlog import DecisionLog, decision_log_path
from planfence_net.executor.pool import SessionPool
from planfence_net.executor.replica import Replica
from planfence_net.executor.runner import GateRunner
from support.cluster import ClusterHandle

OLD, NEW, PLAN, REPLANNED = (bytes([n]) * 32 for n in (1, 2, 3, 4))


def decision(replanned: bool = True) -> Decision:
    return Decision(
        "ship", "blocked", "changed_again", "req/order changed again", replanned, {}, {},
        {"req/order": (OLD, NEW)}, 3, 120, 480, 0.020,
    )  # fmt: skip


def test_a_line_names_the_decision_the_drift_its_writer_and_the_replan(tmp_path: Path) -> None:
    log = DecisionLog.in_folder(tmp_path, "ops", {"req/order": "reqs"}.get)
    assert log.path == tmp_path / "logs" / "executors" / "ops.jsonl"
    log.write(decision(), [PLAN], [REPLANNED], stall=0.0045)
    log.write(decision(replanned=False), [PLAN], [PLAN])  # no replan: no new roots
    log.close()
    first, second = (json.loads(line) for line in log.path.read_text().splitlines())
    assert isinstance(first.pop("ts"), float)
    assert first == {
        "agent": "ops",
        "event": "gate",
        "action": "ship",
        "outcome": "blocked",
        "reason": "changed_again",
        "detail": "req/order changed again",
        "drift": [{"key": "req/order", "from": OLD.hex(), "to": NEW.hex(), "owner": "reqs"}],
        "replanned": True,
        "roots": [PLAN.hex()],
        "new_roots": [REPLANNED.hex()],
        "rounds": 3,
        "stall_ms": 4.5,
        "bytes": 600,
    }
    assert (second["replanned"], second["new_roots"], second["stall_ms"]) == (False, [], 20.0)
    assert log.statistics() == {"failed_writes": 0, "last_failure": ""}


def test_any_key_or_name_makes_a_line_json_reads_back(tmp_path: Path) -> None:
    """The line is written field by field: quotes, backslashes, control characters and
    non-ASCII text in a key, an action name or a detail come back as they were."""
    odd = 'req/"q"\\n\nß\x1b[31m\u202e'
    log = DecisionLog.in_folder(tmp_path, "ops", lambda key: "reqs" if key == odd else None)
    weird = Decision(odd, "blocked", None, odd, False, {}, {}, {odd: (OLD, NEW)}, 1, 0, 0, 0.0)
    entry = json.loads(log.line(weird, [PLAN]))
    assert (entry["action"], entry["detail"], entry["reason"]) == (odd, odd, None)
    assert entry["drift"] == [{"key": odd, "from": OLD.hex(), "to": NEW.hex(), "owner": "reqs"}]


def test_a_log_that_cannot_be_opened_or_written_drops_the_line_and_never_raises(
    tmp_path: Path,
) -> None:
    (tmp_path / "logs").write_text("")  # a file where the logs folder should be
    unopenable = DecisionLog.in_folder(tmp_path, "ops", lambda key: None)
    unopenable.write(decision(), [PLAN], [REPLANNED])
    unopenable.write(decision(), [PLAN], [REPLANNED])  # tried again, failed again
    assert unopenable.statistics()["failed_writes"] == 2
    full = DecisionLog(Path("/dev/full"), "ops", lambda key: None)  # ENOSPC, as a full disk
    full.write(decision(), [PLAN])
    assert full.statistics() == {"failed_writes": 1, "last_failure": os.strerror(28)}


@pytest.mark.anyio
async def test_a_runner_whose_log_cannot_be_opened_still_decides(
    live_cluster: ClusterHandle, tmp_path: Path
) -> None:
    """A replanned authorization through a runner handed a log it cannot open: the same
    decision, the line dropped and counted."""
    (tmp_path / "logs").write_text("")
    log = DecisionLog.in_folder(tmp_path, "ops", live_cluster.roster.owner_of)
    roster = live_cluster.roster
    async with anyio.create_task_group() as tg:
        pool = SessionPool(tg, roster, live_cluster.identity("ops"))
        writers = SessionPool(tg, roster, live_cluster.identity("reqs"))
        runner = GateRunner(pool, await Replica.open(None), timeout=10.0, log=log)
        r3 = (await writers.request("reqs", "put", {"key": "req/a", "kind": "fact",
                                                     "parents": [], "body": 3}))["id"]  # fmt: skip
        plans = SessionPool(tg, roster, live_cluster.identity("planner"))

        async def plan(parent: bytes) -> bytes:
            args = {"key": "plan/a", "kind": "plan", "parents": [parent], "body": "go"}
            rid: bytes = (await plans.request("planner", "put", args))["id"]
            return rid

        stale = await plan(r3)
        r4 = (await writers.request("reqs", "put", {"key": "req/a", "kind": "fact",
                                                     "parents": [], "body": 4}))["id"]  # fmt: skip

        async def replan(action: Action, changed: object) -> list[bytes]:
            return [await plan(r4)]

        run = await runner.wait_decision(Action("ship", (stale,), ("req/a",)), replan)
        for p in (pool, writers, plans):
            await p.aclose()
        tg.cancel_scope.cancel()
    assert (run.decision.outcome, run.decision.replanned) == ("authorized", True)
    assert log.failed_writes == 1 and "Not a directory" in log.last_failure
    assert not decision_log_path(live_cluster.path, "ops").exists()
