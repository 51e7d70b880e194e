"""The one fake owner and the one gate loop of the tests (sans-IO, no sockets).

`FakeOwners` holds every owner's records and heads in memory and answers `get` and `heads`
as a real owner does: records that do not fit a reply are listed as `omitted`, heads rows
are short when asked, changed records come inline, and every answer goes through a msgpack
round trip. A test makes an owner misbehave with `failing` (no answer, or an error) or with
`serve_get` / `serve_heads`, which turn the honest answer into the one the owner sends.

`run(gate, owners)` is the loop: `planfence_net.core.drive` itself (the one the executor's
runner and the workspace check use), fed by the owners through a `FetchRound` and a
`HeadsRound` as a blocking runtime feeds it. It records the events the gate asked for, so a
test can assert the gate's steps as well as its decision.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
from nacl.signing import SigningKey

from planfence_net.core import records
from planfence_net.core.answers import HeadsQuery, verifier
from planfence_net.core.decision import Decision
from planfence_net.core.drive import FetchRound, HeadsRound, drive_sync, heads_args
from planfence_net.core.errors import PlanfenceError
from planfence_net.core.gate import Action, FetchRecords, Gate, GatePolicy, QueryHeads, Replan
from planfence_net.core.lineage import WalkCache
from planfence_net.core.records import Record, make_record
from planfence_net.core.roster import Agent, Roster

OWNS = {"planner": ("plan/*", "sum/*"), "reqs": ("req/*",), "inv": ("inv/*",), "cfg": ("cfg/*",)}
SIGNERS = {name: SigningKey.generate() for name in OWNS}
ROSTER = Roster(
    "test",
    tuple(
        Agent(name, "127.0.0.1", 7400 + i, bytes(SIGNERS[name].verify_key), owns)
        for i, (name, owns) in enumerate(OWNS.items())
    ),
)
VERIFY = verifier(ROSTER)

# (owner, request args, the honest answer) -> what the owner sends instead: an answer, a
# PlanfenceError the request fails with, or None for no answer in time
Serve = Callable[[str, dict[str, Any], dict[str, Any]], Any]


@dataclass
class FakeOwners:
    """Every owner of `roster` in memory, and the executor's local store (`local`).

    `page` records fit one `get` reply. `store` holds every record by id; an owner answers
    `get` with the asked records it signed (`record.owner`), so an id is found at its owner
    only. `heads` maps each key to its owner's current record. `requests` lists every
    (owner, op, args) asked, in order.
    """

    roster: Roster = ROSTER
    page: int = 100
    seqs: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OWNS, 0))
    store: dict[bytes, Record] = field(default_factory=dict)
    heads: dict[str, Record] = field(default_factory=dict)
    local: dict[bytes, Record] = field(default_factory=dict)
    failing: dict[str, PlanfenceError | None] = field(default_factory=dict)
    serve_get: Serve | None = None
    serve_heads: Serve | None = None
    requests: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    now: float = 100.0

    def publish(
        self,
        key: str,
        *parents: Record,
        local: bool = True,
        kind: str = "fact",
        seq: int | None = None,
    ) -> Record:
        """A new record for `key` by its owner, now its head; `local` also puts it in the
        executor's local store. `seq` overrides the owner's next counter value."""
        owner = ROSTER.owner_of(key)
        assert owner is not None
        self.seqs[owner] += 1
        record = make_record(
            SIGNERS[owner],
            key=key,
            owner=owner,
            kind=kind,
            seq=self.seqs[owner] if seq is None else seq,
            parents=[p.id for p in parents],
            body={"v": self.seqs[owner]},
        )
        self.store[record.id] = record
        self.heads[key] = record
        if local:
            self.local[record.id] = record
        return record

    def verify(self, record: Record) -> None:
        """The gate's check of a record against the current `roster`."""
        records.verify(
            record, public_key_of=self.roster.public_key_of, owner_of=self.roster.owner_of
        )

    def clock(self) -> float:
        """A clock that moves 4 ms each time it is read."""
        self.now += 0.004
        return self.now

    def gate(
        self,
        roots: Sequence[Record | bytes],
        deps: Sequence[str],
        policy: GatePolicy = GatePolicy(),
        *,
        lookup: Callable[[bytes], Record | None] | None = None,
        walks: WalkCache | None = None,
    ) -> Gate:
        """A gate for action "ship" over the local store (or `lookup`) and this clock."""
        ids = tuple(r if isinstance(r, bytes) else r.id for r in roots)
        return Gate(
            Action("ship", ids, tuple(deps)),
            owner_of=self.roster.owner_of,
            verify=self.verify,
            lookup=self.local.get if lookup is None else lookup,
            clock=self.clock,
            policy=policy,
            walks=walks,
        )

    # -- the owners' side: answering requests -----------------------------------------------

    def ask(self, owner: str, op: str, args: dict[str, Any]) -> Any:
        """One `get` or `heads` request to `owner`: its answer after a msgpack round trip,
        or the error it failed with, or None for no answer."""
        self.requests.append((owner, op, args))
        if owner in self.failing:
            return self.failing[owner]
        honest = self.get_answer(owner, args) if op == "get" else self.heads_answer(owner, args)
        serve = self.serve_get if op == "get" else self.serve_heads
        answer = honest if serve is None else serve(owner, args, honest)
        if answer is None or isinstance(answer, PlanfenceError):
            return answer
        return msgpack.unpackb(msgpack.packb(answer, use_bin_type=True), raw=False)

    def get_answer(self, owner: str, args: dict[str, Any]) -> dict[str, Any]:
        """An honest owner's `get` answer: its records among `ids`, `page` at most, and the
        ids of the others it holds as `omitted`."""
        have = [rid for rid in args["ids"] if rid in self.store and self.store[rid].owner == owner]
        answer: dict[str, Any] = {
            "records": [self.store[rid].to_wire() for rid in have[: self.page]]
        }
        if have[self.page :]:
            answer["omitted"] = have[self.page :]
        return answer

    def heads_answer(self, owner: str, args: dict[str, Any]) -> dict[str, Any]:
        """An honest owner's `heads` answer: a row per key (short when asked and the head is
        the expected id) and the changed records of expected keys inline."""
        expect = args["expect"]
        rows, inline = [], []
        for key in args.get("keys", list(expect)):
            head = self.heads.get(key)
            if head is not None and args.get("short") and expect.get(key) == head.id:
                rows.append([key, head.seq])
                continue
            rows.append([key, head.id if head else None, head.seq if head else 0])
            if head is not None and key in expect and expect[key] != head.id:
                inline.append(head.to_wire())
        return {"heads": rows, "records": inline}

    def answer_query(self, owner: str, query: HeadsQuery) -> dict[str, Any]:
        """The honest answer to one owner's query of a QueryHeads event (for hand-driven
        gates), as the runtime would decode it."""
        decoded: dict[str, Any] = self.ask(owner, "heads", heads_args(query))
        return decoded

    # -- the runtime's I/O, blocking: what the workspace check does over its sessions -------

    def fetch(self, ids: tuple[bytes, ...]) -> FetchRound:
        """Ask every owner for `ids` until the round settles."""
        fetch = FetchRound(ids, self.roster.names, verifier(self.roster))
        while requests := fetch.requests():
            for owner, args in requests.items():
                fetch.answered(owner, self.ask(owner, "get", args))
        return fetch

    def query(self, queries: dict[str, HeadsQuery]) -> HeadsRound:
        """Send each owner its heads request."""
        heads = HeadsRound(queries)
        for owner, args in heads.requests().items():
            heads.answered(owner, self.ask(owner, "heads", args))
        return heads


@dataclass
class Run:
    """A gate driven to its decision: the events it emitted (ending with the decision) and
    the roots it was left with (the last replan's)."""

    decision: Decision
    events: list[Any]
    roots: tuple[bytes, ...]

    def count(self, kind: type) -> int:
        return sum(isinstance(e, kind) for e in self.events)


def run(
    gate: Gate,
    owners: FakeOwners,
    replan: Callable[[Replan], Sequence[bytes]] | None = None,
) -> Run:
    """Drive `gate` through `core.drive` against `owners` until it decides.

    `replan` answers a Replan with the new roots; by default the planner re-reads every
    declared key at its head (`fresh_plan`).
    """
    events: list[Any] = []
    roots = [gate.action.roots]

    def fetch(ids: tuple[bytes, ...]) -> FetchRound:
        events.append(FetchRecords(ids))
        return owners.fetch(ids)

    def query(queries: dict[str, HeadsQuery]) -> HeadsRound:
        events.append(QueryHeads(queries))
        return owners.query(queries)

    def replanned(event: Replan) -> Sequence[bytes]:
        events.append(event)
        new = replan(event) if replan else fresh_plan(owners, gate.action.deps)
        roots.append(tuple(new))
        return new

    decision = drive_sync(gate, fetch, query, replanned)
    return Run(decision, [*events, decision], roots[-1])


def fresh_plan(owners: FakeOwners, deps: Sequence[str]) -> list[bytes]:
    """The planner re-reads every declared key at its head: the new plan's roots."""
    return [owners.publish("plan/p", *(owners.heads[k] for k in deps), kind="plan").id]
