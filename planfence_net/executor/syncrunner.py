"""The gate driven to its decision over blocking sessions (`wire.SyncSessions`): the loop of
`core.drive`, the one the executor's gate runner uses, with blocking I/O. Each event becomes
at most one request per owner (more only for records an owner omitted), all owners
concurrently, within one deadline; only verified answers count.

Both blocking callers use it: the workspace check (`check`) and the one-shot `planfence
authorize` (`cli.oneshot`), which must stay lean: this module imports no event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

from ..core.decision import Decision
from ..core.drive import FetchRound, HeadsRound, drive_sync
from ..core.errors import TransportError
from ..core.gate import Action, Gate, GatePolicy, Replan
from ..net.syncclient import Outcome, SyncSessions

if TYPE_CHECKING:
    from ..core.answers import HeadsQuery, Verify
    from ..core.lineage import WalkCache
    from ..core.records import Record
    from ..core.roster import Roster

Answer = TypeVar("Answer", bound=Outcome | None)


def drive_gate(
    action: Action,
    roster: Roster,
    sessions: SyncSessions,
    records: dict[bytes, Record],
    verify: Verify,
    deadline: float,
    *,
    holders: Iterable[str],
    replan: Callable[[Replan], Sequence[bytes]],
    policy: GatePolicy = GatePolicy(),
    walks: WalkCache | None = None,
    settle_early: bool = False,
    count_traffic: bool = False,
) -> tuple[Decision, str]:
    """Drive a gate for `action` to its decision by `deadline`. Records are asked of
    `holders` (an id does not name its owner), looked up in and added to `records`;
    `settle_early` ends a fetch round once it is settled (later answers are not waited for);
    `replan` answers a drift (when the policy replans); `count_traffic` adds the sessions'
    bytes to the decision. Returns the decision and the last typed error an owner answered a
    heads query with ("" for none; e.g. its worktree is gone)."""
    gate = Gate(
        action,
        owner_of=roster.owner_of,
        verify=verify,
        lookup=records.get,
        clock=time.perf_counter,
        policy=policy,
        walks=walks,
    )
    why = ""

    def fetch(ids: tuple[bytes, ...]) -> FetchRound:
        return _fetch(sessions, records, ids, holders, verify, deadline, settle_early)

    def query(queries: dict[str, HeadsQuery]) -> HeadsRound:
        nonlocal why
        heads = HeadsRound(queries)
        requests = heads.requests()
        asked = {owner: ("heads", args) for owner, args in requests.items()}
        outcomes = sessions.round(asked, deadline)
        for owner in requests:
            heads.answered(owner, in_time(outcomes.get(owner), deadline))
        for error in heads.refusals.values():
            why = str(error)
        return heads

    traffic = sessions.traffic if count_traffic else None
    return drive_sync(gate, fetch, query, replan, traffic=traffic), why


def _fetch(
    sessions: SyncSessions,
    records: dict[bytes, Record],
    ids: tuple[bytes, ...],
    holders: Iterable[str],
    verify: Verify,
    deadline: float,
    settle_early: bool,
) -> FetchRound:
    """One fetch round of `ids` from `holders` by `deadline`, its records added to `records`;
    `settle_early` ends it once it is settled."""
    fetch = FetchRound(ids, holders, verify)

    def settled(outcomes: dict[str, Outcome]) -> bool:
        for owner, outcome in outcomes.items():
            fetch.answered(owner, outcome)  # an owner's answer counts once
        return fetch.settled

    while requests := fetch.requests():
        asked = {owner: ("get", args) for owner, args in requests.items()}
        outcomes = sessions.round(asked, deadline, settled=settled if settle_early else None)
        for owner in requests:
            fetch.answered(owner, outcomes.get(owner))
    records.update((r.id, r) for r in fetch.records)
    return fetch


def in_time(outcome: Answer, deadline: float) -> Answer | None:
    """`outcome`, or None (no answer in time) for a connection that failed at the deadline,
    as the runner's cancelled request is."""
    if isinstance(outcome, TransportError) and time.monotonic() >= deadline:
        return None
    return outcome
