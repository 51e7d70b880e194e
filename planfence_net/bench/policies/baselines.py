"""The policies the experiments compare, behind one interface.

    baseline = make_baseline("planfence", parts)
    await baseline.start(keys)                 # connect, seed; not charged to any action
    verdict = await baseline.validate(action, replan, keys)
    baseline.traffic()                         # bytes so far, encrypted and framed, both ways

Every policy receives the plan and its lineage from the planner before the timer (the
handoff), except the `central-walk` ablation.

`freshness` refreshes the executor's records of D(a) but never compares them with the plan;
`planfence` runs the gate on D(a) as the paper describes it: `heads` answers carry ids, and the
changed records are fetched (`get`) after a mismatch; `planfence+inline` is the product's
design (the `heads` answer carries the changed records inline, one round trip fewer);
`allkeys` is `planfence` with every shared key of the template queried; `central`
(bench/policies/centralized.py) validates at the central store in one `validate` round trip;
`sync` (bench/policies/sync.py) is synchronous replication, acting on its replica with no request.
Ablations: `central-walk` (the client-side walk: plan, lineage and heads read from the store,
six sequential round trips on a raced action), `central-wired` (`central` with the store on
an unshaped loopback link), `sync-barrier` (the acknowledged-barrier sync, bench/policies/syncbarrier.py),
`planfence-d1` (direct parents only), `planfence-noreplan`, `planfence-failopen` (the gate's
decision, with the blocks in `policy.FAIL_OPEN_REASONS` issued anyway).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
from anyio.abc import TaskGroup

from ...core.answers import verified_records, verifier
from ...core.errors import ConfigError, PlanfenceError
from ...core.gate import Action, GatePolicy
from ...core.identity import Identity
from ...core.roster import Roster
from ...executor.runner import ReplanHook
from ...net.api import group_by_owner
from .centralized import Central, CentralWalk
from .gated import PlanFence
from .policy import Addresses, Baseline, Parts, PolicyBase, Verdict
from .sync import Sync
from .syncbarrier import SyncBarrier
from .writers import CENTRAL, CentralWriter, OwnerWriter, SyncWriter, Writer

POLICIES = ("freshness", "central", "sync", "allkeys", "planfence")
VARIANTS = (
    "planfence+inline",
    "central-walk",
    "central-wired",
    "sync-barrier",
    "planfence-d1",
    "planfence-noreplan",
    "planfence-failopen",
)


def stores_centrally(policy: str) -> bool:
    """True for the policies whose records live at the central store."""
    return policy.startswith(CENTRAL)


def hands_off(policy: str) -> bool:
    """True when the planner hands plan and lineage to the executor (all but the walk)."""
    return policy != "central-walk"


def wired_agents(policy: str) -> frozenset[str]:
    """The agents on an unshaped loopback link under `policy` (the store, for central-wired)."""
    return frozenset({CENTRAL}) if policy == "central-wired" else frozenset()


def make_writer(
    policy: str,
    tg: TaskGroup,
    roster: Roster,
    identity_of: Callable[[str], Identity],
    addresses_of: Callable[[str], Addresses],
) -> Writer:
    """Where `policy`'s records are written: the central store (through `addresses_of`'s
    links) for the central policies, each owner's daemon otherwise; under `sync` an update
    completes only once every participant has acknowledged it."""
    if stores_centrally(policy):
        return CentralWriter(tg, roster, identity_of, addresses_of)
    if policy == "sync":
        return SyncWriter(tg, roster, identity_of)
    return OwnerWriter(tg, roster, identity_of)


def make_baseline(name: str, parts: Parts) -> Baseline:
    """The policy called `name`; raises ConfigError for an unknown name."""
    if name == "freshness":
        return Freshness(name, parts)
    if name == "sync":
        return Sync(name, parts, parts.sync_k)
    if name == "sync-barrier":
        return SyncBarrier(name, parts, parts.sync_k)
    if name in ("central", "central-wired"):
        return Central(name, parts, GatePolicy())
    if name == "central-walk":
        return CentralWalk(name, parts, GatePolicy())
    if name == "planfence+inline":
        return PlanFence(name, parts, GatePolicy(), inline=True)
    policies = {
        "planfence": GatePolicy(),
        "allkeys": GatePolicy(),
        "planfence-d1": GatePolicy(max_depth=1),
        "planfence-noreplan": GatePolicy(replan=False),
        "planfence-failopen": GatePolicy(),
    }
    if name not in policies:
        raise ConfigError(f"unknown policy {name!r} (known: {', '.join(POLICIES + VARIANTS)})")
    return PlanFence(
        name,
        parts,
        policies[name],
        all_keys=name == "allkeys",
        fail_open=name == "planfence-failopen",
    )


class Freshness(PolicyBase):
    """Keeps the executor's records of D(a) at the owners' heads; never checks the plan."""

    def __init__(self, name: str, parts: Parts) -> None:
        super().__init__(name, parts)
        self.known: dict[str, bytes] = {}
        self.verify = verifier(parts.roster)

    async def validate(self, action: Action, replan: ReplanHook, keys: list[str]) -> Verdict:
        started = time.perf_counter()
        for rid in action.roots:  # the plan handed over names the versions it holds
            self._learn(rid)
        groups = group_by_owner(self.parts.roster, list(action.deps))

        async def refresh(owner: str, owner_keys: list[str]) -> None:
            expect = {k: self.known[k] for k in owner_keys if k in self.known}
            try:
                result = await self.pool.request(
                    owner, "heads", {"keys": owner_keys, "expect": expect}
                )
            except PlanfenceError:
                return  # stale memory, and freshness acts anyway
            records = verified_records(result.get("records"), self.verify, bad="drop")
            for record in records:
                self.known[record.key] = record.id
            await self.replica.add(records)

        with anyio.move_on_after(self.parts.timeout):
            async with anyio.create_task_group() as tg:
                for owner, owner_keys in groups.items():
                    tg.start_soon(refresh, owner, owner_keys)
        return Verdict(True, action.roots, time.perf_counter() - started)

    def _learn(self, rid: bytes, depth: int = 0) -> None:
        record = self.replica.lookup(rid)
        if record is None or depth > 64:
            return
        self.known.setdefault(record.key, record.id)
        for parent in record.parents:
            self._learn(parent, depth + 1)
