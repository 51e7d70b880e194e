"""The gate runner: drives the sans-IO gate against live owners (docs/ARCHITECTURE.md, "The gate").

`core.drive` is the loop and decides what is sent and what answers mean; this module is its
asyncio I/O: each event becomes at most one request per owner (more only for records an
owner omitted), all owners concurrently, and the whole decision ends by one deadline,
`timeout` seconds after it starts (time in the replan hook is not counted: planning is not
coordination). Nothing here decides anything.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from ..core.answers import HeadsQuery, verifier
from ..core.decision import Decision
from ..core.drive import Fetched, FetchRound, HeadsRound, drive
from ..core.errors import PlanfenceError
from ..core.gate import Action, Gate, GatePolicy, Replan
from ..core.records import Record
from ..core.roster import Roster
from ..core.timeouts import DEFAULT_TIMEOUT
from ..net.client import Reply, Session
from .decisionlog import DecisionLog
from .pool import SessionPool
from .replica import Replica

ReplanHook = Callable[[Action, tuple[Record, ...]], Awaitable[Sequence[bytes]]]
# a decision's two I/O steps, each given the decision's deadline (anyio's clock)
FetchStep = Callable[[tuple[bytes, ...], float], Awaitable[FetchRound | Fetched]]
QueryStep = Callable[[Action, dict[str, HeadsQuery], float], Awaitable[HeadsRound]]
_DEFAULT_POLICY = GatePolicy()  # wait_decision's default
_NO_REPLAN = GatePolicy(replan=False)  # the default for a decision without a replan hook


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
    """Validates actions for one executor: its session pool, replica and roster.

    `timeout` bounds each decision's coordination, in seconds (module docstring). `fetch`
    and `query`, when given, replace the decision's steps `self.fetch` and `self.query` (the
    bench's baselines ask a central store, or fetch changed records after the heads answer):
    a runner is extended by the steps it is handed, not by subclassing. Runners handed one
    replica (the executors of one process) share its records, walks and fetches in flight.
    `log`, when given, gets a line per decision (`decisionlog`); without it nothing is logged.
    """

    def __init__(
        self,
        pool: SessionPool,
        replica: Replica,
        *,
        clock: Callable[[], float] = time.perf_counter,
        timeout: float = DEFAULT_TIMEOUT,
        fetch: FetchStep | None = None,
        query: QueryStep | None = None,
        log: DecisionLog | None = None,
    ) -> None:
        self.pool = pool
        self.log = log
        self.replica = replica
        self.roster: Roster = pool.roster
        self.clock = clock
        self.timeout = timeout
        self.verify = verifier(self.roster, replica.records)  # a known record: checked once
        self.walks = replica.walks  # shared by the runners of one replica
        self._give_ups = _GiveUps()
        # the decision's steps, bound once: no lookup or check per decision
        self._fetch_step: FetchStep = self.fetch if fetch is None else fetch
        self._query_step: QueryStep = self.query if query is None else query

    async def wait_decision(
        self, action: Action, replan: ReplanHook | None = None, policy: GatePolicy = _DEFAULT_POLICY
    ) -> GateRun:
        """Run the gate for `action` until it decides, within `timeout` seconds of
        coordination. Never raises for owner failures.

        Without a `replan` hook a drift blocks with `stale_plan` (the caller replans).
        """
        if replan is None and policy.replan:
            policy = _NO_REPLAN if policy is _DEFAULT_POLICY else _without_replan(policy)
        gate = Gate(
            action,
            owner_of=self.roster.owner_of,
            verify=self.verify,
            lookup=self.replica.lookup,
            clock=self.clock,
            policy=policy,
            walks=self.walks,
        )
        deadline = asyncio.get_running_loop().time() + self.timeout  # anyio's clock
        planning = 0.0
        roots = action.roots

        fetch_step, query_step = self._fetch_step, self._query_step

        # the steps' own coroutines, under the deadline of the moment (a replan moves it)
        def fetch(ids: tuple[bytes, ...]) -> Awaitable[FetchRound | Fetched]:
            return fetch_step(ids, deadline)

        def query(queries: dict[str, HeadsQuery]) -> Awaitable[HeadsRound]:
            return query_step(action, queries, deadline)

        async def replanned(event: Replan) -> Sequence[bytes]:
            nonlocal deadline, planning, roots
            assert replan is not None
            await self.replica.add(event.changed)
            started, began = self.clock(), anyio.current_time()
            roots = tuple(await replan(action, event.changed))
            planning += self.clock() - started
            deadline += anyio.current_time() - began
            return roots

        decision = await drive(gate, fetch, query, replanned, traffic=self.pool.traffic)
        run = GateRun(decision, planning, roots)
        if self.log is not None:
            self.log.write(decision, action.roots, roots, run.stall)
        return run

    async def fetch(self, ids: tuple[bytes, ...], deadline: float | None = None) -> Fetched:
        """Get `ids` into the replica, until found or `deadline` (anyio's clock; default
        `timeout` from now): ids another runner of this replica is fetching are waited for,
        the others asked of every owner (`wait_round`); what the others' fetches did not
        find is then asked again. Returns the records found and the owners that did not
        answer this runner's rounds."""
        until = self.until(deadline)
        claim = self.replica.flights.claim(ids)
        try:
            mine = await self.wait_round(claim.mine, until) if claim.mine else None
        finally:
            self.replica.flights.land(claim)
        unanswered = mine.unanswered if mine is not None else ()
        if claim.others:
            with anyio.CancelScope(deadline=until):
                for flight in claim.others:
                    await flight.wait()
            lookup = self.replica.lookup
            if rest := tuple(rid for rid in ids if lookup(rid) is None and rid not in claim.mine):
                again = await self.wait_round(rest, until)
                unanswered = tuple(sorted({*unanswered, *again.unanswered}))
        found = [r for r in map(self.replica.lookup, ids) if r is not None]
        return Fetched(found, unanswered)

    async def wait_round(self, ids: Sequence[bytes], deadline: float) -> FetchRound:
        """Ask every owner for `ids` until the round settles or `deadline` (anyio's clock)
        passes; keeps what verifies in the replica."""
        fetch = FetchRound(ids, self.roster.names, self.verify)

        async def ask(owner: str, scope: anyio.CancelScope) -> None:
            while (args := fetch.request(owner)) is not None:
                try:
                    fetch.answered(owner, await self.pool.request(owner, "get", args))
                except PlanfenceError as exc:
                    fetch.answered(owner, exc)
            if fetch.settled:
                scope.cancel()

        with anyio.CancelScope(deadline=deadline):
            async with anyio.create_task_group() as tg:
                for owner in self.roster.names:
                    tg.start_soon(ask, owner, tg.cancel_scope)
        await self.replica.add(fetch.records)
        return fetch

    async def query(
        self, action: Action, queries: dict[str, HeadsQuery], deadline: float | None = None
    ) -> HeadsRound:
        """Send every owner its heads query for `action`, all before waiting for any, and
        take the answers until `deadline` (anyio's clock; default `timeout` from now). In
        the steady state (sessions open, sockets taking what is written) this starts no task
        and enters no cancel scope: the runner's one timer gives up the answers still owed at
        the deadline."""
        heads = HeadsRound(queries)
        requests = heads.requests()
        replies = self._send_now(heads, requests)
        if replies is not None:
            give_ups = self._give_ups
            give_ups.add(asyncio.get_running_loop(), self.until(deadline), replies)
            try:
                for owner, reply in replies:
                    heads.answered(owner, await reply.outcome())
            finally:
                give_ups.discard(replies)
            return heads
        with anyio.CancelScope(deadline=self.until(deadline)):
            unreachable = await self.pool.connect_missing(requests)
            sent: dict[str, Reply] = {}
            for owner, args in requests.items():
                if owner in unreachable:
                    heads.answered(owner, unreachable[owner])
                    continue
                try:
                    sent[owner] = await self.pool.send_request(owner, "heads", args)
                except PlanfenceError as exc:
                    heads.answered(owner, exc)
            for owner, reply in sent.items():
                try:
                    heads.answered(owner, await reply.wait())
                except PlanfenceError as exc:
                    heads.answered(owner, exc)
        return heads

    def _send_now(
        self, heads: HeadsRound, requests: dict[str, dict[str, Any]]
    ) -> list[tuple[str, Reply]] | None:
        """Put every owner's heads request on the wire at once when every session is live
        and its socket takes it without waiting, and return the (owner, reply) pairs to
        await, in that order; None, having sent nothing, otherwise. An owner whose session
        fails here is answered with the failure."""
        pool = self.pool
        live: list[tuple[str, Session, dict[str, Any]]] = []
        for owner, args in requests.items():
            session = pool.live(owner)
            if session is None or not session.stream.writable:
                return None
            live.append((owner, session, args))
        # every request is encrypted before the first write: a write wakes its owner,
        # which may take this core until it has answered
        prepared: list[tuple[str, Session, Reply, bytes]] = []
        for owner, session, args in live:
            try:
                reply, data = pool.prepare_on(session, owner, "heads", args)
            except PlanfenceError as exc:
                heads.answered(owner, exc)
                continue
            prepared.append((owner, session, reply, data))
        replies: list[tuple[str, Reply]] = []
        for owner, session, reply, data in prepared:
            try:
                pool.write_on(session, owner, data)
            except PlanfenceError as exc:
                reply.give_up()
                heads.answered(owner, exc)
                continue
            replies.append((owner, reply))
        # the answer of the owner asked last is awaited first: the owners woken in turn
        # usually answer in turn, and the earlier answers are then in when the task wakes
        replies.reverse()
        return replies

    def until(self, deadline: float | None) -> float:
        """`deadline`, or `timeout` from now when it is None (a step run on its own)."""
        return asyncio.get_running_loop().time() + self.timeout if deadline is None else deadline


@functools.lru_cache(maxsize=16)
def _without_replan(policy: GatePolicy) -> GatePolicy:
    """`policy` with replan=False (a decision without a replan hook), made once per policy."""
    return dataclasses.replace(policy, replan=False)


class _GiveUps:
    """Gives up the replies of a runner's heads rounds at their deadlines, with one event-loop
    timer for all of them, due at the earliest deadline: a timer per round costs more than
    the rest of the runner's part of a decision together."""

    __slots__ = ("_rounds", "_loop", "_timer", "_due")

    def __init__(self) -> None:
        self._rounds: dict[int, tuple[float, list[tuple[str, Reply]]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._due = math.inf  # when the timer fires (inf: no timer)

    def add(
        self, loop: asyncio.AbstractEventLoop, deadline: float, replies: list[tuple[str, Reply]]
    ) -> None:
        """Give `replies` up at `deadline` (`loop`'s clock) unless `discard`ed first."""
        if loop is not self._loop:  # the rounds and the timer of an ended loop are moot
            self._rounds.clear()
            self._loop, self._timer, self._due = loop, None, math.inf
        self._rounds[id(replies)] = (deadline, replies)
        if deadline < self._due:
            self._arm(deadline)

    def discard(self, replies: list[tuple[str, Reply]]) -> None:
        """The round ended: its replies are no longer given up."""
        self._rounds.pop(id(replies), None)

    def _arm(self, when: float) -> None:
        assert self._loop is not None
        if self._timer is not None:
            self._timer.cancel()
        self._due = when
        self._timer = self._loop.call_at(when, self._fire, when)

    def _fire(self, due: float) -> None:
        """The timer set for `due`: give up every round whose deadline has come (as a timer
        of its own would have), and set it for the earliest of the others."""
        assert self._loop is not None
        self._timer, self._due = None, math.inf
        come = max(due, self._loop.time())
        for key, (deadline, replies) in list(self._rounds.items()):
            if deadline <= come:
                del self._rounds[key]
                for _, reply in replies:
                    reply.give_up()
        if self._rounds:
            self._arm(min(deadline for deadline, _ in self._rounds.values()))
