"""One loop drives a `Gate` against the owners, for every runtime (sans-IO).

`drive(gate, fetch, query, replan)` moves the gate's events until its Decision:

    FetchRecords -> `await fetch(ids)`: a settled `FetchRound`  -> gate.records_fetched
                    (or any `Fetched`: records and the owners that gave no answer)
    QueryHeads   -> `await query(queries)`: a `HeadsRound`      -> each owner's answer or failure
    Replan       -> `await replan(event)`: the new roots        -> gate.replanned

The callables are the runtime's I/O and nothing else. What to send and what an answer means
is decided here and in the two rounds: `FetchRound` asks each owner for the ids, asks again
for those it listed as `omitted` while it makes progress, keeps only records that parse and
verify, and says when waiting longer cannot matter; `HeadsRound` builds each owner's heads
request (`expect`, short rows) and maps an owner that gave no answer to the gate's reason.
A round's time bound is the runtime's: one deadline for the whole decision, set by its caller.

`drive` is a coroutine that awaits only its callables, so it runs under any event loop
(the executor's runner) and, through `drive_sync`, with blocking callables (the workspace
check): the same loop for both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from .answers import HeadsQuery, Verify, omitted_ids, request_args, verified_records
from .decision import MALFORMED_RESPONSE, OWNER_UNAVAILABLE, TIMEOUT, Decision
from .errors import HandshakeError, LocalProtocolError, PlanfenceError, RequestError, TransportError
from .gate import FetchRecords, Gate, QueryHeads, Replan
from .records import Record

# An owner's answer to one request: its result map, the error the request failed with, or
# None when it gave no answer in time.
Outcome = dict[str, Any] | PlanfenceError | None
Traffic = Callable[[], tuple[int, int]]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Fetched:
    """What a fetch step found: verified `records`, and the owners asked that gave no answer
    (`unanswered`, sorted). A settled `FetchRound` reads the same."""

    records: list[Record]
    unanswered: tuple[str, ...]


class FetchRound:
    """Asking `owners` for record `ids` (an id does not name its owner: each is asked for all).

    The runtime sends `requests()` (or, one task per owner, `request(owner)`) and feeds each
    outcome to `answered`, until nothing is left to send or its deadline passes. An owner
    that lists ids as `omitted` (no room in its reply) is asked again for those not found
    yet, as long as each answer makes progress. Only records that parse and `verify` count:
    `bad` is `verified_records`' policy for the others ("drop": as if never received, what
    the gate needs; "raise": `answered` raises RecordError).

    The round is `settled` once every id has a record or every owner is done or failed;
    owners still owed an answer when the runtime gives up count as `unanswered`, like those
    that failed: an id no answering owner had may be held by one of them.
    """

    def __init__(
        self,
        ids: Sequence[bytes],
        owners: Iterable[str],
        verify: Verify,
        *,
        bad: Literal["drop", "raise"] = "drop",
    ) -> None:
        self.ids = tuple(dict.fromkeys(ids))
        self._verify, self._bad = verify, bad
        self._next: dict[str, list[bytes]] = {owner: list(self.ids) for owner in owners}
        self._asked: dict[str, list[bytes]] = {}  # owner -> ids of its request in flight
        self._failed: set[str] = set()
        self.found: dict[bytes, Record] = {}

    def request(self, owner: str) -> dict[str, Any] | None:
        """The `get` args to send `owner` next (it is then owed an answer), or None when
        there is nothing to ask it (done, failed, waiting for its answer, or settled)."""
        if owner not in self._next or self.settled:
            return None
        self._asked[owner] = ids = self._next.pop(owner)
        return {"ids": list(ids)}

    def requests(self) -> dict[str, dict[str, Any]]:
        """`request(owner)` for every owner that has one."""
        found = {owner: self.request(owner) for owner in list(self._next)}
        return {owner: args for owner, args in found.items() if args is not None}

    def answered(self, owner: str, outcome: Outcome) -> None:
        """Take `owner`'s outcome for its request in flight; anything but a result map
        fails it. An answer it was not asked for is ignored."""
        asked = self._asked.pop(owner, None)
        if asked is None:
            return
        if not isinstance(outcome, dict):
            self._failed.add(owner)
            return
        wanted = set(self.ids)
        for record in verified_records(outcome.get("records"), self._verify, bad=self._bad):
            if record.id in wanted:
                self.found.setdefault(record.id, record)
        more = [rid for rid in omitted_ids(outcome, asked) if rid not in self.found]
        if more and len(more) < len(asked):  # no progress: an owner cannot keep us asking
            self._next[owner] = more

    @property
    def settled(self) -> bool:
        """True once waiting longer cannot change the outcome."""
        return len(self.found) == len(self.ids) or not (self._next or self._asked)

    @property
    def records(self) -> list[Record]:
        return list(self.found.values())

    @property
    def unanswered(self) -> tuple[str, ...]:
        """Owners that failed or are still owed an answer or a request, sorted."""
        return tuple(sorted(self._failed | set(self._next) | set(self._asked)))


class HeadsRound:
    """One heads request to each owner of a QueryHeads event, and what each outcome was."""

    def __init__(self, queries: dict[str, HeadsQuery]) -> None:
        self.queries = queries
        self.outcomes: dict[str, Outcome] = {}

    def requests(self) -> dict[str, dict[str, Any]]:
        """Each owner's `heads` args."""
        return {owner: heads_args(query) for owner, query in self.queries.items()}

    def answered(self, owner: str, outcome: Outcome) -> None:
        """Take `owner`'s outcome (the first one counts; an owner not queried is ignored)."""
        if owner in self.queries:
            self.outcomes.setdefault(owner, outcome)

    @property
    def refusals(self) -> dict[str, RequestError]:
        """The owners that answered with a typed error, and the error."""
        return {o: e for o, e in self.outcomes.items() if isinstance(e, RequestError)}

    def report(self, gate: Gate) -> None:
        """Feed every owner's answer to `gate`; one without an answer (yet) is a timeout."""
        for owner in self.queries:
            outcome = self.outcomes.get(owner)
            if isinstance(outcome, dict):
                gate.heads_answered(owner, outcome)
            else:
                gate.heads_failed(owner, failure_reason(outcome))


def heads_args(query: HeadsQuery) -> dict[str, Any]:
    """A heads request's args: `expect` alone when it names every key (each key once), and
    `short` rows for keys still at their expected id (the gate knows those ids). A gate's
    shared query has them built once (`query.args`, read-only); any other query gets its
    own copy of `expect`."""
    if query.args is not None:
        return query.args
    return request_args(query.keys, dict(query.expect))


def failure_reason(outcome: PlanfenceError | None) -> str:
    """The gate's reason for an owner that gave no usable answer: no answer in time is a
    `timeout`; one that could not be reached (connection or handshake failed) or whose
    worktree is gone is `owner_unavailable`; any other error is `malformed_response`."""
    if outcome is None:
        return TIMEOUT
    if isinstance(outcome, (TransportError, HandshakeError)):
        return OWNER_UNAVAILABLE
    if isinstance(outcome, RequestError) and outcome.code == "worktree_gone":
        return OWNER_UNAVAILABLE
    return MALFORMED_RESPONSE


async def drive(
    gate: Gate,
    fetch: Callable[[tuple[bytes, ...]], Awaitable[FetchRound | Fetched]],
    query: Callable[[dict[str, HeadsQuery]], Awaitable[HeadsRound]],
    replan: Callable[[Replan], Awaitable[Sequence[bytes]]],
    *,
    traffic: Traffic | None = None,
) -> Decision:
    """Move `gate`'s events through the runtime's callables until it decides (module doc).

    `traffic()`, when given, returns the bytes (sent, received) moved so far on the
    coordination connections; what moved during the decision is added to it. Raises only
    what the callables raise (owner failures belong in the rounds, not in exceptions).
    """
    mark = traffic() if traffic is not None else (0, 0)
    while True:
        if traffic is not None:
            now = traffic()
            if now != mark:  # adding nothing is a call saved (the first time, always)
                gate.add_traffic(now[0] - mark[0], now[1] - mark[1])
                mark = now
        event = gate.next_event()
        if isinstance(event, Decision):
            return event
        if isinstance(event, FetchRecords):
            round_ = await fetch(event.ids)
            gate.records_fetched(round_.records, round_.unanswered)
        elif isinstance(event, QueryHeads):
            (await query(event.queries)).report(gate)
        elif isinstance(event, Replan):
            gate.replanned(await replan(event))


def drive_sync(
    gate: Gate,
    fetch: Callable[[tuple[bytes, ...]], FetchRound | Fetched],
    query: Callable[[dict[str, HeadsQuery]], HeadsRound],
    replan: Callable[[Replan], Sequence[bytes]],
    *,
    traffic: Traffic | None = None,
) -> Decision:
    """`drive` with blocking callables: the same loop, run to its end without an event loop."""
    return run_to_end(drive(gate, _ready(fetch), _ready(query), _ready(replan), traffic=traffic))


def _ready(call: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    async def now(*args: Any) -> T:
        return call(*args)

    return now


def run_to_end(coroutine: Coroutine[Any, Any, T]) -> T:
    """The value of a coroutine that never suspends; raises LocalProtocolError if it does."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coroutine.close()
    raise LocalProtocolError("a blocking drive awaited something that suspends")
