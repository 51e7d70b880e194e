"""What every policy of the bench is built from and returns (no policy logic here).

`baselines` (freshness, planfence, allkeys, central, the ablation variants) and `sync` both
build on `PolicyBase`; `baselines.make_baseline` picks one by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from anyio.abc import TaskGroup

from ...core.decision import CHANGED_AGAIN, HEADS_FAILURES, Decision
from ...core.errors import PlanfenceError
from ...core.gate import Action
from ...core.lineage import MISSING_LINEAGE
from ...core.roster import Roster
from ...core.timeouts import DEFAULT_TIMEOUT
from ...executor.decisionlog import DecisionLog
from ...executor.pool import SessionPool
from ...executor.replica import Replica
from ...executor.runner import ReplanHook
from ...net.api import group_by_owner
from .writers import Writer

Addresses = dict[str, tuple[str, int]]

# The blocks an availability-first executor would let through: lineage it could not find, an
# owner that gave no usable answer, a second change after replanning. A stale plan without
# replanning and an incomplete or ambiguous declaration still block.
FAIL_OPEN_REASONS = frozenset({MISSING_LINEAGE, *HEADS_FAILURES, CHANGED_AGAIN})


def fails_open(decision: Decision) -> bool:
    """True when the fail-open ablation issues an action the gate blocked: the gate always
    fails closed, and this baseline overrides the blocks in FAIL_OPEN_REASONS."""
    return not decision.authorized and decision.reason in FAIL_OPEN_REASONS


@dataclass(frozen=True, slots=True)
class Workflow:
    """One workflow of a case: its shared keys and the agents taking part (the `sync`
    baseline subscribes exactly these agents, as one sync group named `name`)."""

    name: str
    keys: tuple[str, ...]
    participants: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a policy decided for one action; `roots` are the plan ids to issue the action on.
    `stall` is the policy's own account of its coordination time (seconds, planning
    excluded), kept as evidence for the demo; the bench's stall is the harness's one timer."""

    issued: bool
    roots: tuple[bytes, ...]
    stall: float
    blocked: str | None = None
    replanned: bool = False
    decision: Decision | None = None  # the gate's evidence, for the policies that run it


class Baseline(Protocol):
    name: str
    writer: Writer
    replica: Replica
    handoff: bool  # False: the executor reads plan and lineage from where they are stored

    async def start(self, keys: list[str]) -> None: ...
    async def validate(self, action: Action, replan: ReplanHook, keys: list[str]) -> Verdict: ...
    def traffic(self) -> int: ...
    async def aclose(self) -> None: ...


@dataclass(slots=True)
class Parts:
    """What a baseline is built from: the roster, identities, the executor's task group,
    where owners are reached, the writer its records go through, and the executor's pool
    class (the ablations pass a fault-injecting one)."""

    tg: TaskGroup
    roster: Roster
    identity_of: Callable[[str], Any]
    executor: str
    addresses: Addresses  # where the executor reaches the others
    writer: Writer
    pool_class: type[SessionPool] = SessionPool
    timeout: float = DEFAULT_TIMEOUT  # seconds for one validation's coordination
    sync_k: int = 1  # `sync`: owners push after every K dirty updates
    workflows: tuple[Workflow, ...] = ()  # `sync`: who subscribes to what
    links: Callable[[str], Addresses] | None = None  # agent -> where it reaches others
    handoff: bool = True  # the planner hands plan and lineage to the executor's replica
    decisions: DecisionLog | None = None  # the executor's decision log (the demo's; bench: none)

    def addresses_of(self, agent: str) -> Addresses:
        """Where `agent` reaches the others: `addresses` for the executor, its own link's
        routes for another agent when there are links, else directly."""
        if agent == self.executor:
            return self.addresses
        return self.links(agent) if self.links is not None else {}


class PolicyBase:
    """Connections and the replica every policy has: the executor's session pool (through
    the executor's link) and its local records."""

    def __init__(self, name: str, parts: Parts) -> None:
        self.name = name
        self.parts = parts
        self.writer = parts.writer
        self.handoff = parts.handoff
        self.replica = Replica(None)
        self.pool = parts.pool_class(
            parts.tg,
            parts.roster,
            parts.identity_of(parts.executor),
            parts.addresses_of(parts.executor),
        )

    async def start(self, keys: list[str]) -> None:
        """Open the executor's sessions to the owners of `keys` (connection setup is not
        charged to any action)."""
        for owner in group_by_owner(self.parts.roster, keys):
            try:
                await self.pool.session(owner)
            except PlanfenceError:
                pass  # an unreachable owner is the gate's to report, action by action

    def traffic(self) -> int:
        sent, received = self.pool.traffic()
        return sent + received + self.writer.traffic()

    async def aclose(self) -> None:
        await self.pool.aclose()
