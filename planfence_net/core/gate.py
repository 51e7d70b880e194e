"""The PlanFence gate as a state machine with no I/O (docs/ARCHITECTURE.md, "The gate").

The runtime drives a `Gate` like an h11 connection (`drive.drive` is the one loop that does):
it calls `next_event()` and does what the event asks, feeding the outcome back, until the
event is a `Decision`:

    FetchRecords  -> ask the owners for the ids (a drive.FetchRound says when to stop
                     waiting), then `records_fetched(records, unanswered)`
    QueryHeads    -> send every query concurrently under one deadline, then for each owner
                     `heads_answered(owner, result)` or `heads_failed(owner, reason)`
    Replan        -> call the application's replan hook once, then `replanned(new_roots)`
    Decision      -> final; `next_event()` keeps returning it

Calling a method the current state does not expect raises LocalProtocolError. Whatever an
owner sends is checked here (section 3, step 3): a bad answer blocks, it never raises.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .answers import (
    HeadsQuery,
    Malformed,
    ReadOnlyDict,
    Unchanged,
    check_answer,
    unchanged_answer,
)
from .decision import (
    AUTHORIZED,
    BLOCKED,
    CHANGED_AGAIN,
    HEADS_FAILURES,
    MALFORMED_RESPONSE,
    OWNER_UNAVAILABLE,
    STALE_PLAN,
    UNKNOWN_OWNER,
    Decision,
)
from .errors import ConfigError, LocalProtocolError, RecordError
from .lineage import MISSING_LINEAGE, Blocked, Missing, WalkCache, walk
from .records import ID_LEN, Record

_NOTHING: frozenset[bytes] = frozenset()
MEMO_ENTRIES = 8  # derived queries kept per cached frontier (one per owner_of and policy)


@dataclass(frozen=True, slots=True)
class Action:
    """A protected action: its roots L(a) (plan record ids) and declared keys D(a)."""

    name: str
    roots: tuple[bytes, ...]
    deps: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GatePolicy:
    """Limits and ablations. The defaults are PlanFence as designed.

    `replan=False` blocks a drift with `stale_plan`; `query_keys` are extra keys whose heads
    are fetched and checked (the all-keys baseline) but never compared with the frontier.
    The gate always fails closed; the bench's fail-open ablation reads its decisions.
    Raises ConfigError for max_depth < 0 or max_nodes < 1.
    """

    max_depth: int = 32
    max_nodes: int = 4096
    replan: bool = True
    query_keys: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.max_depth < 0 or self.max_nodes < 1:
            raise ConfigError(
                f"gate policy needs max_depth >= 0 and max_nodes >= 1, "
                f"got {self.max_depth} and {self.max_nodes}"
            )


@dataclass(frozen=True, slots=True)
class FetchRecords:
    """Fetch these record ids from the owners, then call `Gate.records_fetched`."""

    ids: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class QueryHeads:
    """Send each owner its query (owner name -> query), all under one deadline.

    The queries are the gate's, shared by its warm decisions: read-only (ReadOnlyDict)."""

    queries: dict[str, HeadsQuery]


@dataclass(frozen=True, slots=True)
class Replan:
    """The plan drifted: call the replan hook with the verified changed records once."""

    changed: tuple[Record, ...]
    drift: dict[str, tuple[bytes, bytes]]


Event = FetchRecords | QueryHeads | Replan | Decision


def _all_match(count: int) -> str:
    if count == 1:
        return "the 1 declared key matches its owner's head"
    return f"all {count} declared keys match their owners' heads"


class _State(enum.Enum):
    LINEAGE = "lineage"
    FETCHING = "fetching"
    QUERYING = "querying"
    REPLANNING = "replanning"
    DONE = "done"


class Gate:
    """Validate one action against its owners' heads; see the module docstring for the flow.

    `owner_of(key)` names the owning agent (None, or ConfigError for two owners, both mean
    `unknown_owner`); `verify(record)` raises RecordError for an invalid record; `lookup(id)`
    reads the local store; `clock()` returns seconds and is read at creation and decision.
    `walks` (shared by the gates of one local store) skips walks that reached a frontier before.
    """

    # one Gate per decision: slots make it cheaper to build and to read
    __slots__ = (
        "action",
        "policy",
        "_walker",
        "_owner_of",
        "_verify",
        "_lookup",
        "_clock",
        "_started",
        "_state",
        "_roots",
        "_fetched",
        "_asked",
        "_unanswered",
        "_pending",
        "_frontier",
        "_frontier_ids",
        "_queries",
        "_unchanged",
        "_reported",
        "_matched",
        "_failures",
        "_heads",
        "_inline",
        "_drift",
        "_replanned",
        "_round_trips",
        "_sent",
        "_received",
        "_decision",
    )

    def __init__(
        self,
        action: Action,
        *,
        owner_of: Callable[[str], str | None],
        verify: Callable[[Record], None],
        lookup: Callable[[bytes], Record | None],
        clock: Callable[[], float],
        policy: GatePolicy = GatePolicy(),
        walks: WalkCache | None = None,
    ) -> None:
        self.action = action
        self._walker = walk if walks is None else walks.walk
        self.policy = policy
        self._owner_of = owner_of
        self._verify = verify
        self._lookup = lookup
        self._clock = clock
        self._started = clock()
        self._state = _State.LINEAGE
        self._roots = _check_roots(action.roots)
        self._fetched: dict[bytes, Record] = {}
        self._asked: set[bytes] = set()
        self._unanswered: tuple[str, ...] = ()
        self._pending: frozenset[bytes] = _NOTHING
        self._frontier: dict[str, Record] = {}
        self._frontier_ids: dict[str, bytes] | None = None  # the memo's, for this frontier
        self._queries: dict[str, HeadsQuery] = {}
        self._unchanged: dict[str, Unchanged | None] = {}
        self._reported: set[str] = set()
        self._matched = 0  # owners whose answer was their Unchanged one (every key at the frontier)
        self._failures: dict[str, tuple[str, str]] = {}
        self._heads: dict[str, tuple[bytes | None, int]] = {}
        self._inline: dict[str, Record] = {}
        self._drift: dict[str, tuple[bytes, bytes]] = {}
        self._replanned = False
        self._round_trips = self._sent = self._received = 0
        self._decision: Decision | None = None

    def next_event(self) -> Event:
        """What the runtime must do next, or the final Decision.

        Raises LocalProtocolError while fetched records, an owner's answer or new roots are
        still owed to the gate.
        """
        if self._decision is not None:
            return self._decision
        if self._state is _State.LINEAGE:
            return self._walk()
        if self._state is _State.QUERYING:
            if len(self._reported) < len(self._queries):  # only queried owners are reported
                unreported = [owner for owner in self._queries if owner not in self._reported]
                raise LocalProtocolError(f"no answer reported yet for owners: {unreported}")
            return self._decide()
        raise LocalProtocolError(
            f"next_event() called while {self._state.value}: report "
            f"the outcome of the last event first"
        )

    def records_fetched(self, records: Iterable[Record], unanswered: Collection[str] = ()) -> None:
        """Feed the answer to FetchRecords (possibly empty or partial).

        Records that were not asked for or fail `verify` are ignored, so they stay missing.
        `unanswered` names the owners that were asked and gave no answer (unreachable, timed
        out, refused): an id still missing then blocks `owner_unavailable`, since one of them
        may hold it, rather than `missing_lineage`.
        """
        self._expect(_State.FETCHING, "records_fetched")
        self._unanswered = tuple(unanswered)
        for record in records:
            if not isinstance(record, Record) or record.id not in self._pending:
                continue
            try:
                self._verify(record)
            except (RecordError, ConfigError):  # ConfigError: the roster cannot decide
                continue
            self._fetched[record.id] = record
        self._pending = _NOTHING
        self._state = _State.LINEAGE

    def heads_answered(self, owner: str, result: object) -> None:
        """Feed one owner's decoded heads result; a bad or unsolicited answer is recorded as
        `malformed_response` (it blocks at the next `next_event()`), never raised."""
        self._expect(_State.QUERYING, "heads_answered")
        query = self._queries.get(owner)
        if query is None or owner in self._reported:
            why = "answered twice" if query is not None else "answered but was not queried"
            self._failures.setdefault(owner, (MALFORMED_RESPONSE, f"owner {owner!r} {why}"))
            return
        self._reported.add(owner)
        unchanged = self._unchanged.get(owner)
        try:
            heads, inline = check_answer(
                owner, query, result, self._frontier, self._verify, unchanged
            )
        except Malformed as exc:
            self._failures[owner] = (MALFORMED_RESPONSE, f"owner {owner!r}: {exc}")
            return
        if unchanged is not None and heads is unchanged.heads:
            self._matched += 1
        self._heads.update(heads)
        if inline:
            self._inline.update(inline)

    def heads_failed(self, owner: str, reason: str) -> None:
        """Report that a queried owner gave no usable answer: `reason` is owner_unavailable,
        timeout or malformed_response. Raises LocalProtocolError for any other reason or an
        owner that was not queried or was already reported."""
        self._expect(_State.QUERYING, "heads_failed")
        if reason not in HEADS_FAILURES:
            raise LocalProtocolError(
                f"heads_failed reason must be one of {sorted(HEADS_FAILURES)}, got {reason!r}"
            )
        if owner not in self._queries or owner in self._reported:
            raise LocalProtocolError(f"owner {owner!r} was not queried or already reported")
        self._reported.add(owner)
        self._failures[owner] = (reason, f"owner {owner!r}: {reason.replace('_', ' ')}")

    def replanned(self, new_roots: Sequence[bytes]) -> None:
        """Feed the roots of the new plan after a Replan; the gate walks and queries again."""
        self._expect(_State.REPLANNING, "replanned")
        self._roots = _check_roots(tuple(new_roots))
        self._replanned = True
        self._frontier, self._frontier_ids = {}, None
        # a new heads round starts from nothing (the first one from __init__'s)
        self._reported, self._failures, self._heads, self._inline = set(), {}, {}, {}
        self._matched = 0
        self._state = _State.LINEAGE

    def add_traffic(self, sent: int, received: int) -> None:
        """Add bytes the runtime measured on coordination connections for this action."""
        if self._decision is not None:
            raise LocalProtocolError("add_traffic() after the decision")
        if sent < 0 or received < 0:
            raise LocalProtocolError("traffic counts cannot be negative")
        self._sent += sent
        self._received += received

    def _expect(self, state: _State, method: str) -> None:
        if self._decision is not None or self._state is not state:
            now = "decided" if self._decision is not None else self._state.value
            raise LocalProtocolError(f"{method}() called while {now}")

    def _find(self, rid: bytes) -> Record | None:
        return self._fetched.get(rid) or self._lookup(rid)

    def _walk(self) -> Event:
        result = self._walker(
            self._roots,
            self.action.deps,
            self._find,
            max_depth=self.policy.max_depth,
            max_nodes=self.policy.max_nodes,
        )
        if isinstance(result, Blocked):
            return self._block(result.reason, result.detail)
        if isinstance(result, Missing):
            lost = [rid.hex()[:12] for rid in result.ids if rid in self._asked]
            if lost and self._unanswered:
                return self._block(
                    OWNER_UNAVAILABLE,
                    f"records {', '.join(lost)} not found at "
                    f"any owner that answered; no answer "
                    f"from {', '.join(self._unanswered)}",
                )
            if lost:
                return self._block(
                    MISSING_LINEAGE,
                    f"records not found locally nor fetched and verified: {', '.join(lost)}",
                )
            self._asked.update(result.ids)
            self._pending = frozenset(result.ids)
            self._state = _State.FETCHING
            self._round_trips += 1
            return FetchRecords(result.ids)
        self._frontier, self._frontier_ids = result.versions, None
        return self._query(result.memo)

    def _query(self, memo: dict[Any, Any]) -> Event:
        # The queries depend on the frontier, owner_of and the policy's extra keys alone: a
        # frontier from the walk cache keeps them (and each owner's all-unchanged answer)
        # in its memo, so a warm gate builds them once per lineage. They are read-only: every
        # warm decision hands the runtime the same ones, and its Decision the same frontier.
        memo_key = ("heads", self._owner_of, self.policy.query_keys)
        known = memo.get(memo_key)
        if known is None:
            built = self._build_queries()
            if isinstance(built, Decision):
                return built
            known = (
                built,
                {o: unchanged_answer(q, self._frontier) for o, q in built.items()},
                ReadOnlyDict({key: record.id for key, record in self._frontier.items()}),
                QueryHeads(built),
            )
            if len(memo) < MEMO_ENTRIES:
                memo[memo_key] = known
        self._queries, self._unchanged, self._frontier_ids, event = known
        if not self._queries:
            return self._finish(AUTHORIZED, None, "no declared dependencies to validate")
        self._state = _State.QUERYING
        self._round_trips += 1
        return event

    def _build_queries(self) -> dict[str, HeadsQuery] | Decision:
        """Each owner's query for the frontier's keys (and the policy's extra keys), or the
        block for a key no one (or two) owns."""
        keys = dict.fromkeys((*self.action.deps, *(self.policy.query_keys or ())))
        by_owner: dict[str, list[str]] = {}
        for key in keys:
            try:
                owner = self._owner_of(key)
            except ConfigError as exc:
                return self._block(UNKNOWN_OWNER, str(exc))
            if owner is None:
                return self._block(UNKNOWN_OWNER, f"no roster agent owns key {key!r}")
            by_owner.setdefault(owner, []).append(key)
        return ReadOnlyDict(
            (
                owner,
                HeadsQuery(
                    tuple(owned),
                    ReadOnlyDict({k: self._frontier[k].id for k in owned if k in self._frontier}),
                ),
            )
            for owner, owned in by_owner.items()
        )

    def _decide(self) -> Event:
        if self._failures:
            for owner in (*self._queries, *self._failures):
                if owner in self._failures:
                    return self._block(*self._failures[owner])
        if self._matched == len(self._queries):  # each answer was its owner's Unchanged one:
            # every key of the frontier was queried and is at the frontier's id (at d = 1,024,
            # the loop below costs more than the rest of the decision's checks together)
            return self._finish(AUTHORIZED, None, _all_match(len(self._frontier)))
        drift: dict[str, tuple[bytes, bytes]] = {}
        for key, record in self._frontier.items():
            head = self._heads[key][0]
            if head is None:  # check_answer refuses this; never let it read as a match
                return self._block(MALFORMED_RESPONSE, f"no head for declared key {key!r}")
            if head != record.id:
                drift[key] = (record.id, head)
        if not drift:
            return self._finish(AUTHORIZED, None, _all_match(len(self._frontier)))
        changed = ", ".join(drift)
        if self._replanned:
            return self._block(CHANGED_AGAIN, f"changed again after replanning: {changed}")
        self._drift = drift
        if not self.policy.replan:
            return self._finish(
                BLOCKED, STALE_PLAN, f"plan is stale and replanning is disabled: {changed}"
            )
        records = tuple(self._inline[key] for key in drift)
        self._fetched.update((record.id, record) for record in records)
        self._state = _State.REPLANNING
        return Replan(records, dict(drift))

    def _block(self, reason: str, detail: str) -> Decision:
        return self._finish(BLOCKED, reason, detail)

    def _finish(self, outcome: str, reason: str | None, detail: str) -> Decision:
        self._state = _State.DONE
        self._decision = Decision(
            action=self.action.name,
            outcome=outcome,
            reason=reason,
            detail=detail,
            replanned=self._replanned,
            frontier=(
                {key: record.id for key, record in self._frontier.items()}
                if self._frontier_ids is None
                else self._frontier_ids
            ),
            heads=self._heads,  # the gate never changes these once it decided
            drift=self._drift,
            round_trips=self._round_trips,
            bytes_sent=self._sent,
            bytes_received=self._received,
            elapsed=self._clock() - self._started,
        )
        return self._decision


def _check_roots(roots: tuple[bytes, ...]) -> tuple[bytes, ...]:
    for rid in roots:
        if not isinstance(rid, bytes) or len(rid) != ID_LEN:
            raise LocalProtocolError(f"action roots must be {ID_LEN}-byte record ids")
    return roots
