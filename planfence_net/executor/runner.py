"""The gate runner: drives the sans-IO gate against live owners (docs/ARCHITECTURE.md, "The gate").

Each event of the gate becomes at most one request per owner, all owners concurrently, under
one deadline per step. Owner failures become the gate's blocking reasons; nothing here
decides anything.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from ..core.answers import HeadsQuery
from ..core.answers import verified_records as verified_records
from ..core.answers import verify_record as verify_record
from ..core.errors import PlanfenceError, TransportError
from ..core.gate import Action, Decision, FetchRecords, Gate, GatePolicy, QueryHeads, Replan
from ..core.lineage import FetchRound, WalkCache
from ..core.records import Record
from ..core.roster import Roster
from ..net.client import Reply, get_in_parts
from .pool import SessionPool
from .replica import Replica

ReplanHook = Callable[[Action, tuple[Record, ...]], Awaitable[Sequence[bytes]]]
DEFAULT_DEADLINE = 5.0


@dataclass(frozen=True, slots=True)
class GateRun:
    """A decision plus the time the replan hook took (planning is not coordination)."""

    decision: Decision
    planning: float
    roots: tuple[bytes, ...]

    @property
    def stall(self) -> float:
        """Coordination time on the action's critical path, in seconds."""
        return max(0.0, self.decision.elapsed - self.planning)


class GateRunner:
    """Validates actions for one executor: its session pool, replica and roster."""

    def __init__(
        self,
        pool: SessionPool,
        replica: Replica,
        *,
        clock: Callable[[], float] = time.perf_counter,
        deadline: float = DEFAULT_DEADLINE,
    ) -> None:
        self.pool = pool
        self.replica = replica
        self.roster: Roster = pool.roster
        self.clock = clock
        self.deadline = deadline
        self.walks = WalkCache()  # the replica only grows, so its successful walks stay valid

    def verify(self, record: Record) -> None:
        verify_record(self.roster, record)

    async def wait_decision(
        self, action: Action, replan: ReplanHook | None = None, policy: GatePolicy = GatePolicy()
    ) -> GateRun:
        """Run the gate for `action` until it decides. Never raises for owner failures.

        Without a `replan` hook a drift blocks with `stale_plan` (the caller replans).
        """
        if replan is None:
            policy = dataclasses.replace(policy, replan=False)
        gate = Gate(
            action,
            owner_of=self.roster.owner_of,
            verify=self.verify,
            lookup=self.replica.lookup,
            clock=self.clock,
            policy=policy,
            walks=self.walks,
        )
        planning = 0.0
        roots = action.roots
        mark = self.pool.traffic()
        while True:
            now = self.pool.traffic()
            gate.add_traffic(now[0] - mark[0], now[1] - mark[1])
            mark = now
            event = gate.next_event()
            if isinstance(event, Decision):
                return GateRun(event, planning, roots)
            if isinstance(event, FetchRecords):
                fetched = await self._fetch(event.ids)
                gate.records_fetched(fetched.records, fetched.unanswered)
            elif isinstance(event, QueryHeads):
                await self._query(gate, event)
            elif isinstance(event, Replan):
                assert replan is not None
                await self.replica.add(event.changed)
                started = self.clock()
                roots = tuple(await replan(action, event.changed))
                planning += self.clock() - started
                gate.replanned(roots)

    async def _fetch(self, ids: tuple[bytes, ...]) -> FetchRound:
        """Ask every owner for `ids` (an id does not name its owner) until the round settles
        or the deadline passes; keeps what verifies in the replica."""
        fetch = FetchRound(ids, self.roster.names)

        async def ask(owner: str, scope: anyio.CancelScope) -> None:
            try:
                result = await get_in_parts(
                    lambda args: self.pool.request(owner, "get", args), list(ids)
                )
            except PlanfenceError:
                fetch.failed(owner)
            else:
                fetch.answered(owner, verified_records(self.roster, result))
            if fetch.settled:
                scope.cancel()

        with anyio.move_on_after(self.deadline):
            async with anyio.create_task_group() as tg:
                for owner in self.roster.names:
                    tg.start_soon(ask, owner, tg.cancel_scope)
        await self.replica.add(fetch.records)
        return fetch

    async def _query(self, gate: Gate, event: QueryHeads) -> None:
        """Send every owner its query, all before waiting for any, under one deadline;
        report each outcome. In the steady state (sessions open) this starts no task."""
        answers: dict[str, Any] = {}
        failures: dict[str, str] = {}
        with anyio.move_on_after(self.deadline):
            unreachable = await self.pool.connect_missing(event.queries)
            replies: dict[str, Reply] = {}
            for owner, query in event.queries.items():
                if owner in unreachable:
                    failures[owner] = "owner_unavailable"
                    continue
                try:
                    replies[owner] = await self.pool.send_request(owner, "heads", heads_args(query))
                except PlanfenceError as exc:
                    failures[owner] = _failure(exc)
            for owner, reply in replies.items():
                try:
                    answers[owner] = await reply.wait()
                except PlanfenceError as exc:
                    failures[owner] = _failure(exc)
        for owner in event.queries:
            if owner in answers:
                gate.heads_answered(owner, answers[owner])
            else:
                gate.heads_failed(owner, failures.get(owner, "timeout"))


def heads_args(query: HeadsQuery) -> dict[str, Any]:
    """A heads request's args: `expect` alone when it names every key (each key once), and
    `short` rows for keys still at their expected id (the gate knows those ids)."""
    if list(query.expect) == list(query.keys):
        return {"expect": dict(query.expect), "short": True}
    return {"keys": list(query.keys), "expect": dict(query.expect), "short": True}


def _failure(exc: PlanfenceError) -> str:
    """The gate's reason for an owner whose heads request raised `exc`."""
    return "owner_unavailable" if isinstance(exc, TransportError) else "malformed_response"
