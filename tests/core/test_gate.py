"""The gate state machine (DESIGN section 3), driven by `core.drive` against the tests' one
fake owner (`support.fakeowner`): the same loop the executor's runner and the workspace check
use, fed by in-memory owners that answer `get` and `heads` as real owners do."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planfence_net.core import answers
from planfence_net.core.decision import Decision
from planfence_net.core.errors import (
    ConfigError,
    LocalProtocolError,
    PlanfenceError,
    RequestError,
    TransportError,
)
from planfence_net.core.gate import (
    Action,
    FetchRecords,
    Gate,
    GatePolicy,
    HeadsQuery,
    QueryHeads,
    Replan,
)
from planfence_net.core.lineage import Frontier, Missing, WalkCache
from planfence_net.core.records import Record, make_record
from planfence_net.core.roster import Roster
from support.fakeowner import OWNS, ROSTER, SIGNERS, FakeOwners, Run, Serve, fresh_plan, run

World = FakeOwners  # the owners, and the executor's local store
# what an owner's failure looks like to the runtime, by the gate's reason it maps to
FAILURES: dict[str, PlanfenceError | None] = {
    "owner_unavailable": TransportError("connection reset"),
    "timeout": None,
    "malformed_response": RequestError("bad_request", "the owner refused the request"),
}


def decide(
    world: World,
    gate: Gate,
    *,
    answer: Serve | None = None,
    fetch: Serve | None = None,
    replan: Callable[[Replan], Sequence[bytes]] | None = None,
) -> Run:
    """Run `gate` through `core.drive` against `world`'s owners (`support.fakeowner.run`),
    which answer heads requests with `answer` and get requests with `fetch` (each given the
    owner, the request and the honest answer; honest when None)."""
    world.serve_heads, world.serve_get = answer, fetch
    return run(gate, world, replan)


def simple() -> tuple[World, Record, Record]:
    """req/x <- sum/s <- plan/p, all local."""
    world = World()
    fact = world.publish("req/x")
    plan = world.publish("plan/p", world.publish("sum/s", fact), kind="plan")
    return world, fact, plan


# -- step 4: authorize, replan, changed again -----------------------------------------------


def test_matching_heads_authorize_in_one_round_trip() -> None:
    world, fact, plan = simple()
    gate = world.gate([plan], ["req/x"])
    gate.add_traffic(120, 80)
    gate.add_traffic(5, 7)
    run = decide(world, gate)
    d = run.decision
    assert (d.outcome, d.reason, d.authorized, d.replanned) == ("authorized", None, True, False)
    assert [type(e) for e in run.events] == [QueryHeads, Decision]
    assert run.events[0].queries == {"reqs": HeadsQuery(("req/x",), {"req/x": fact.id})}
    assert d.round_trips == 1
    assert d.frontier == {"req/x": fact.id}
    assert d.heads == {"req/x": (fact.id, fact.seq)}
    assert d.drift == {}
    assert (d.bytes_sent, d.bytes_received) == (125, 87)
    assert d.elapsed == pytest.approx(0.004)  # the clock is read at creation and decision
    assert gate.next_event() is d


def test_keys_are_batched_one_query_per_owner() -> None:
    world = World()
    a, b, c = world.publish("req/a"), world.publish("req/b"), world.publish("inv/c")
    plan = world.publish("plan/p", a, b, c, kind="plan")
    run = decide(world, world.gate([plan], ["req/a", "inv/c", "req/b", "req/a"]))
    assert run.decision.authorized
    assert run.events[0].queries == {
        "reqs": HeadsQuery(("req/a", "req/b"), {"req/a": a.id, "req/b": b.id}),
        "inv": HeadsQuery(("inv/c",), {"inv/c": c.id}),
    }


def test_drift_replans_once_then_authorizes() -> None:
    world, old, plan = simple()
    new = world.publish("req/x")
    replans: list[Replan] = []

    def replan(event: Replan) -> list[bytes]:
        replans.append(event)
        return [world.publish("plan/p", *event.changed, kind="plan", local=False).id]

    world.local.pop(new.id)
    run = decide(world, world.gate([plan], ["req/x"]), replan=replan)
    d = run.decision
    assert replans == [Replan((new,), {"req/x": (old.id, new.id)})]
    assert (d.outcome, d.reason, d.replanned) == ("authorized", None, True)
    assert d.drift == {"req/x": (old.id, new.id)}
    assert d.frontier == {"req/x": new.id}
    assert d.heads == {"req/x": (new.id, new.seq)}
    # heads, then fetch the new plan (not local), then heads again
    assert [type(e) for e in run.events] == [QueryHeads, Replan, FetchRecords, QueryHeads, Decision]
    assert d.round_trips == 3


def test_a_second_change_after_replanning_blocks_changed_again() -> None:
    world, old, plan = simple()
    new = world.publish("req/x")

    def replan(event: Replan) -> list[bytes]:
        roots = fresh_plan(world, ["req/x"])
        world.publish("req/x")
        return roots

    d = decide(world, world.gate([plan], ["req/x"]), replan=replan).decision
    assert (d.outcome, d.reason, d.replanned) == ("blocked", "changed_again", True)
    assert d.drift == {"req/x": (old.id, new.id)}
    assert d.round_trips == 2


def test_replanning_to_the_same_plan_blocks_changed_again() -> None:
    world, _, plan = simple()
    world.publish("req/x")
    d = decide(world, world.gate([plan], ["req/x"]), replan=lambda e: [plan.id]).decision
    assert (d.outcome, d.reason) == ("blocked", "changed_again")


def test_replan_disabled_blocks_stale_plan() -> None:
    world, old, plan = simple()
    new = world.publish("req/x")
    run = decide(world, world.gate([plan], ["req/x"], GatePolicy(replan=False)))
    assert (run.decision.outcome, run.decision.reason) == ("blocked", "stale_plan")
    assert run.decision.drift == {"req/x": (old.id, new.id)}
    assert run.count(Replan) == 0


# -- the walk cache: skips the walk, never the heads check ----------------------------------


def cached_gate(
    world: World,
    walks: WalkCache,
    looked: list[bytes],
    roots: Sequence[Record | bytes],
    deps: Sequence[str],
    policy: GatePolicy = GatePolicy(),
) -> Gate:
    """world.gate with a shared walk cache and a lookup that records every id it reads."""

    def lookup(rid: bytes) -> Record | None:
        looked.append(rid)
        return world.local.get(rid)

    ids = tuple(r if isinstance(r, bytes) else r.id for r in roots)
    return Gate(
        Action("ship", ids, tuple(deps)),
        owner_of=world.roster.owner_of,
        verify=world.verify,
        lookup=lookup,
        clock=world.clock,
        policy=policy,
        walks=walks,
    )


def test_a_cached_walk_never_authorizes_when_a_head_moved() -> None:
    world, old, plan = simple()
    walks, looked = WalkCache(), []
    assert decide(world, cached_gate(world, walks, looked, [plan], ["req/x"])).decision.authorized
    assert len(walks) == 1 and len(looked) == 3  # plan, sum, fact
    new = world.publish("req/x")
    stale = GatePolicy(replan=False)
    for _ in range(2):
        run = decide(world, cached_gate(world, walks, looked, [plan], ["req/x"], stale))
        assert (run.decision.outcome, run.decision.reason) == ("blocked", "stale_plan")
        assert run.decision.drift == {"req/x": (old.id, new.id)}
        assert run.events[0].queries == {"reqs": HeadsQuery(("req/x",), {"req/x": old.id})}
    assert len(looked) == 3  # both walks came from the cache; the heads rounds still ran
    # with replanning: the new plan's roots miss the cache and are walked from the store
    run = decide(world, cached_gate(world, walks, looked, [plan], ["req/x"]))
    d = run.decision
    assert (d.outcome, d.replanned, d.frontier) == ("authorized", True, {"req/x": new.id})
    assert run.roots != (plan.id,) and looked[3:] == [*run.roots]  # new came inline
    assert len(walks) == 2


def test_a_different_root_set_or_declaration_misses_the_walk_cache() -> None:
    world, old, plan = simple()
    new = world.publish("req/x")
    plan2 = world.publish("plan/q", new, kind="plan")
    walks, looked = WalkCache(), []
    d = decide(
        world, cached_gate(world, walks, looked, [plan], ["req/x"], GatePolicy(replan=False))
    ).decision
    assert (d.reason, d.frontier) == ("stale_plan", {"req/x": old.id})
    looked.clear()
    d = decide(world, cached_gate(world, walks, looked, [plan2], ["req/x"])).decision
    assert (d.outcome, d.replanned, d.frontier) == ("authorized", False, {"req/x": new.id})
    assert looked == [plan2.id, new.id]
    # both plans together: two versions of req/x, which is never cached
    for _ in range(2):
        d = decide(world, cached_gate(world, walks, looked, [plan, plan2], ["req/x"])).decision
        assert (d.outcome, d.reason) == ("blocked", "ambiguous_frontier")
    # the same roots with another declaration are walked again (sum/s is in the lineage)
    looked.clear()
    d = decide(
        world,
        cached_gate(world, walks, looked, [plan], ["req/x", "sum/s"], GatePolicy(replan=False)),
    ).decision
    assert d.frontier == {"sum/s": world.local[plan.parents[0]].id, "req/x": old.id}
    assert looked == [plan.id, plan.parents[0], old.id]
    # missing lineage is never cached: the next gate asks for it again
    lost = world.publish("plan/r", world.publish("req/y", local=False), kind="plan")
    for _ in range(2):
        run = decide(
            world,
            cached_gate(world, walks, looked, [lost], ["req/y"]),
            fetch=lambda o, ids, honest: {"records": []},
        )
        assert run.decision.reason == "missing_lineage" and run.count(FetchRecords) == 1
    assert len(walks) == 3


def test_the_walk_cache_is_bounded_and_hands_out_copies() -> None:
    world, fact, plan = simple()
    walks, nothing = WalkCache(size=2), lambda rid: None
    first = walks.walk([plan.id], ["req/x"], world.local.get)
    assert isinstance(first, Frontier) and first.versions == {"req/x": fact}
    first.versions.clear()  # the caller's copy: the cache keeps its own
    again = walks.walk([plan.id], ["req/x"], nothing)
    assert isinstance(again, Frontier) and again.versions == {"req/x": fact}
    walks.walk([plan.id], ["sum/s"], world.local.get)
    walks.walk([plan.id], ["req/x"], world.local.get, max_depth=5)  # limits are in the key
    assert len(walks) == 2
    assert walks.walk([plan.id], ["req/x"], nothing) == Missing((plan.id,))  # the oldest went
    with pytest.raises(LocalProtocolError):
        WalkCache(size=0)


def test_only_declared_keys_are_compared() -> None:
    world, _, plan = simple()
    world.publish("sum/s")  # an undeclared intermediate changed: not PlanFence's concern
    assert decide(world, world.gate([plan], ["req/x"])).decision.authorized


def test_query_keys_are_fetched_and_checked_but_not_compared() -> None:
    world, fact, plan = simple()
    other = world.publish("inv/z")
    world.publish("inv/z")
    policy = GatePolicy(query_keys=("inv/z", "req/x", "cfg/none"))
    run = decide(world, world.gate([plan], ["req/x"], policy))
    assert run.decision.authorized
    assert run.events[0].queries == {
        "reqs": HeadsQuery(("req/x",), {"req/x": fact.id}),
        "inv": HeadsQuery(("inv/z",), {}),
        "cfg": HeadsQuery(("cfg/none",), {}),
    }
    assert run.decision.heads["cfg/none"] == (None, 0)
    assert run.decision.heads["inv/z"][0] != other.id

    def garbage_for_inv(owner: str, args: dict[str, Any], honest: dict[str, Any]) -> Any:
        return {"heads": [[1, 2, 3]]} if owner == "inv" else honest

    d = decide(world, world.gate([plan], ["req/x"], policy), answer=garbage_for_inv).decision
    assert (d.outcome, d.reason) == ("blocked", "malformed_response")


def test_no_declared_keys_authorizes_without_round_trips() -> None:
    world, _, plan = simple()
    d = decide(world, world.gate([plan], [])).decision
    assert (d.outcome, d.round_trips) == ("authorized", 0)


# -- step 1: lineage -------------------------------------------------------------------------


def test_missing_lineage_is_fetched_and_the_gate_continues() -> None:
    world = World()
    fact = world.publish("req/x", local=False)
    mid = world.publish("sum/s", fact, local=False)
    plan = world.publish("plan/p", mid, kind="plan", local=False)
    run = decide(world, world.gate([plan], ["req/x"]))
    assert run.decision.authorized
    assert [e.ids for e in run.events if isinstance(e, FetchRecords)] == [
        (plan.id,),
        (mid.id,),
        (fact.id,),
    ]
    assert run.decision.round_trips == 4


def test_all_missing_parents_are_fetched_in_one_round() -> None:
    world = World()
    a, b = world.publish("req/a", local=False), world.publish("inv/b", local=False)
    plan = world.publish("plan/p", a, b, kind="plan")
    run = decide(world, world.gate([plan], ["req/a", "inv/b"]))
    assert run.decision.authorized
    assert [e for e in run.events if isinstance(e, FetchRecords)] == [FetchRecords((a.id, b.id))]


def forged(record: Record) -> Record:
    return dataclasses.replace(record, body_raw=msgpack.packb({"v": "forged"}))


def forged_wire(wire: list[Any]) -> list[Any]:
    """A record's wire array with another body (its signature kept)."""
    body = msgpack.packb({"v": "forged"})
    return [*wire[:6], body, len(body), wire[8]]


# an owner's `get` answer, from its request, its honest answer and the world
FETCHES: dict[str, Callable[[dict[str, Any], dict[str, Any], World], Any]] = {
    "nothing": lambda args, honest, w: {"records": []},
    "forged-body": lambda args, honest, w: {"records": [forged_wire(r) for r in honest["records"]]},
    "bad-signature": lambda args, honest, w: {
        "records": [[*r[:-1], bytes(64)] for r in honest["records"]]
    },
    "only-unasked": lambda args, honest, w: {
        "records": [r.to_wire() for r in w.store.values() if r.id not in args["ids"]]
    },
}


@pytest.mark.parametrize("name", FETCHES)
def test_unfetchable_lineage_blocks_missing_lineage(name: str) -> None:
    world = World()
    fact = world.publish("req/x", local=False)
    plan = world.publish("plan/p", fact, kind="plan")
    world.publish("req/y", local=False)
    run = decide(
        world,
        world.gate([plan], ["req/x"]),
        fetch=lambda o, args, honest: FETCHES[name](args, honest, world),
    )
    assert (run.decision.outcome, run.decision.reason) == ("blocked", "missing_lineage")
    assert fact.id.hex()[:12] in run.decision.detail
    assert run.count(FetchRecords) == 1 and run.count(QueryHeads) == 0


def test_lineage_missing_while_an_owner_gave_no_answer_blocks_owner_unavailable() -> None:
    world = World()
    fact = world.publish("req/x", local=False)
    plan = world.publish("plan/p", fact, kind="plan")
    gate = world.gate([plan], ["req/x"])
    assert gate.next_event() == FetchRecords((fact.id,))
    gate.records_fetched([], unanswered=("reqs", "inv"))
    decision = gate.next_event()
    assert isinstance(decision, Decision)
    assert (decision.outcome, decision.reason) == ("blocked", "owner_unavailable")
    assert decision.detail == (
        f"records {fact.id.hex()[:12]} not found at any owner that "
        f"answered; no answer from reqs, inv"
    )


def test_fetched_records_that_were_not_asked_for_are_ignored() -> None:
    world = World()
    fact = world.publish("req/x", local=False)
    mid = world.publish("sum/s", fact, local=False)
    plan = world.publish("plan/p", mid, kind="plan")
    run = decide(
        world,
        world.gate([plan], ["req/x"]),
        fetch=lambda o, args, honest: {"records": [*honest["records"], fact.to_wire()]},
    )
    assert run.decision.authorized
    assert [e.ids for e in run.events if isinstance(e, FetchRecords)] == [(mid.id,), (fact.id,)]


def test_the_gate_itself_ignores_fetched_records_unasked_or_invalid() -> None:
    """The fetch round drops what the gate would ignore, so through `core.drive` the gate
    never sees these: fed to it directly, each stays missing, and it never raises."""
    world = World()
    fact = world.publish("req/x", local=False)
    other = world.publish("req/y", local=False)
    plan = world.publish("plan/p", fact, kind="plan")
    bad = [
        forged(fact),
        dataclasses.replace(fact, signature=bytes(64)),
        other,  # not asked for
        fact.to_wire(),  # not a Record
    ]
    gate = world.gate([plan], ["req/x"])
    assert gate.next_event() == FetchRecords((fact.id,))
    gate.records_fetched(bad)  # type: ignore[arg-type]
    d = gate.next_event()
    assert isinstance(d, Decision) and (d.outcome, d.reason) == ("blocked", "missing_lineage")
    # a record whose owner the roster cannot decide (two agents own req/*)
    agents = ROSTER.agents
    twice = dataclasses.replace(agents[2], owns=("inv/*", "req/*"))
    world.roster = Roster("test", (*agents[:2], twice, *agents[3:]))
    gate = world.gate([plan], ["req/x"])
    assert gate.next_event() == FetchRecords((fact.id,))
    gate.records_fetched([fact])
    d = gate.next_event()
    assert isinstance(d, Decision) and (d.outcome, d.reason) == ("blocked", "missing_lineage")
    world.roster = ROSTER
    gate = world.gate([plan], ["req/x"])
    assert gate.next_event() == FetchRecords((fact.id,))
    gate.records_fetched([*bad, fact])
    assert isinstance(gate.next_event(), QueryHeads)


def test_a_fetched_record_with_a_wrong_owner_is_ignored() -> None:
    world = World()
    # inv signs a well-formed record for req/x, a key owned by reqs
    impostor = make_record(
        SIGNERS["inv"], key="req/x", owner="inv", seq=1, parents=[], kind="fact", body={"v": 1}
    )
    world.store[impostor.id] = impostor
    plan = world.publish("plan/p", impostor, kind="plan")
    run = decide(world, world.gate([plan], ["req/x"]))
    assert run.events[0] == FetchRecords((impostor.id,))
    assert (run.decision.outcome, run.decision.reason) == ("blocked", "missing_lineage")


@pytest.mark.parametrize(
    "deps, policy, reason",
    [
        (["req/x", "inv/y"], GatePolicy(), "incomplete_declaration"),
        (["req/x"], GatePolicy(max_depth=1), "incomplete_declaration"),
        (["req/x"], GatePolicy(max_nodes=2), "missing_lineage"),
        (["zzz/x"], GatePolicy(), "incomplete_declaration"),
    ],
)
def test_lineage_blocks(deps: list[str], policy: GatePolicy, reason: str) -> None:
    world, _, plan = simple()
    run = decide(world, world.gate([plan], deps, policy))
    assert (run.decision.outcome, run.decision.reason) == ("blocked", reason)
    assert run.decision.round_trips == 0


def test_ambiguous_frontier_blocks() -> None:
    world = World()
    v1 = world.publish("req/x")
    v2 = world.publish("req/x", v1)
    plan = world.publish("plan/p", world.publish("sum/s", v1), v2, kind="plan")
    d = decide(world, world.gate([plan], ["req/x"])).decision
    assert (d.outcome, d.reason) == ("blocked", "ambiguous_frontier")


def test_unknown_owner_blocks_before_any_query() -> None:
    world = World()
    fact = make_record(
        SIGNERS["cfg"], key="zzz/x", owner="cfg", seq=1, parents=[], kind="fact", body=1
    )
    world.local[fact.id] = fact
    plan = world.publish("plan/p", fact, kind="plan")
    run = decide(world, world.gate([plan], ["zzz/x"]))
    assert (run.decision.outcome, run.decision.reason) == ("blocked", "unknown_owner")
    assert "zzz/x" in run.decision.detail
    assert run.count(QueryHeads) == 0 and run.decision.round_trips == 0
    run = decide(world, world.gate([plan], [], GatePolicy(query_keys=("zzz/q",))))
    assert run.decision.reason == "unknown_owner"


def test_a_key_with_two_owners_is_unknown_owner() -> None:
    world, fact, plan = simple()
    agents = ROSTER.agents
    twice = dataclasses.replace(agents[2], owns=("inv/*", "req/*"))
    world.roster = Roster("test", (*agents[:2], twice, *agents[3:]))
    d = decide(world, world.gate([plan], ["req/x"])).decision
    assert (d.outcome, d.reason) == ("blocked", "unknown_owner")
    assert "several agents" in d.detail
    # a fetched record whose owner the roster cannot decide stays missing, it does not raise
    world.local.pop(fact.id)
    d = decide(world, world.gate([plan], ["sum/s"])).decision
    assert (d.outcome, d.reason) == ("blocked", "missing_lineage")


# -- step 3: owner failures and malformed answers ---------------------------------------------


@pytest.mark.parametrize("reason", ["owner_unavailable", "timeout", "malformed_response"])
def test_owner_failures_block(reason: str) -> None:
    world, _, plan = simple()
    d = decide(
        world, world.gate([plan], ["req/x"]), answer=lambda o, args, honest: FAILURES[reason]
    ).decision
    assert (d.outcome, d.reason, d.authorized) == ("blocked", reason, False)
    assert d.round_trips == 1


def test_first_failing_owner_in_query_order_decides() -> None:
    world = World()
    plan = world.publish("plan/p", world.publish("req/a"), world.publish("inv/b"), kind="plan")
    failures = {"reqs": FAILURES["timeout"], "inv": FAILURES["owner_unavailable"]}
    d = decide(
        world, world.gate([plan], ["req/a", "inv/b"]), answer=lambda o, args, honest: failures[o]
    ).decision
    assert d.reason == "timeout"
    d = decide(
        world,
        world.gate([plan], ["req/a", "inv/b"]),
        answer=lambda o, args, honest: failures[o] if o == "inv" else honest,
    ).decision
    assert d.reason == "owner_unavailable"


def _entry(answer: dict[str, Any], value: Any) -> dict[str, Any]:
    answer["heads"][0] = value
    return answer


MALFORMED: dict[str, tuple[Callable[[dict[str, Any], World, Record], Any], str]] = {
    "not-a-map": (lambda a, w, f: [a["heads"]], "answer is not a map with a 'heads' list"),
    "no-heads": (lambda a, w, f: {"records": []}, "answer is not a map with a 'heads' list"),
    "heads-not-a-list": (
        lambda a, w, f: {"heads": {"req/x": f.id}},
        "answer is not a map with a 'heads' list",
    ),
    "records-not-a-list": (lambda a, w, f: {**a, "records": {}}, "'records' is not a list"),
    "entry-not-a-list": (
        lambda a, w, f: _entry(a, "req/x"),
        "head entry 0 is not a [key, id, seq] or [key, seq] array",
    ),
    "entry-too-short": (
        lambda a, w, f: _entry(a, ["req/x"]),
        "head entry 0 is not a [key, id, seq] or [key, seq] array",
    ),
    "entry-too-long": (
        lambda a, w, f: _entry(a, ["req/x", f.id, f.seq, 0]),
        "head entry 0 is not a [key, id, seq] or [key, seq] array",
    ),
    "short-entry-id-for-seq": (
        lambda a, w, f: _entry(a, ["req/x", f.id]),
        "head entry 0 ('req/x'): seq is not a non-negative integer",
    ),
    "short-entry-seq-disagrees": (
        lambda a, w, f: _entry(a, ["req/x", f.seq + 1]),
        "head of 'req/x' has seq 2, its record has 1",
    ),
    "key-not-a-string": (
        lambda a, w, f: _entry(a, [b"req/x", f.id, f.seq]),
        "head entry 0: key is not a string",
    ),
    "id-wrong-length": (
        lambda a, w, f: _entry(a, ["req/x", f.id[:31], f.seq]),
        "head entry 0 ('req/x'): id is not 32 bytes or nil",
    ),
    "id-as-hex": (
        lambda a, w, f: _entry(a, ["req/x", f.id.hex(), f.seq]),
        "head entry 0 ('req/x'): id is not 32 bytes or nil",
    ),
    "seq-a-string": (
        lambda a, w, f: _entry(a, ["req/x", f.id, "1"]),
        "head entry 0 ('req/x'): seq is not a non-negative integer",
    ),
    "seq-a-bool": (
        lambda a, w, f: _entry(a, ["req/x", f.id, True]),
        "head entry 0 ('req/x'): seq is not a non-negative integer",
    ),
    "seq-negative": (
        lambda a, w, f: _entry(a, ["req/x", f.id, -1]),
        "head entry 0 ('req/x'): seq is not a non-negative integer",
    ),
    "seq-disagrees": (
        lambda a, w, f: _entry(a, ["req/x", f.id, f.seq + 1]),
        "head of 'req/x' has seq 2, its record has 1",
    ),
    "key-not-requested": (
        lambda a, w, f: {**a, "heads": [*a["heads"], ["req/y", None, 0]]},
        "head for key 'req/y' that was not requested",
    ),
    "key-twice": (lambda a, w, f: {**a, "heads": a["heads"] * 2}, "key 'req/x' answered twice"),
    "key-missing": (lambda a, w, f: {**a, "heads": []}, "requested keys not answered: req/x"),
    "head-none": (
        lambda a, w, f: _entry(a, ["req/x", None, 0]),
        "no head for key 'req/x' although the plan used a version of it",
    ),
    "unchanged-record-inline": (
        lambda a, w, f: {**a, "records": [f.to_wire()]},
        "inline record for 'req/x' sent twice or for an unchanged key",
    ),
    "record-garbage": (
        lambda a, w, f: {**a, "records": [[1, 2, 3]]},
        "inline record rejected: a record must be an array of 9 fields",
    ),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_answers_block(name: str) -> None:
    """The gate reads each bad answer as `detail` says; through `core.drive` it blocks the
    same, except that an answer that is not a map never reaches the gate: the heads round
    reports it as a failed request (`malformed response`)."""
    world, fact, plan = simple()
    change, detail = MALFORMED[name]
    gate = world.gate([plan], ["req/x"])
    query = gate.next_event()
    assert isinstance(query, QueryHeads)
    bad = change(world.answer_query("reqs", query.queries["reqs"]), world, fact)
    gate.heads_answered("reqs", bad)
    d = gate.next_event()
    assert isinstance(d, Decision)
    assert (d.outcome, d.reason, d.detail) == (
        "blocked",
        "malformed_response",
        f"owner 'reqs': {detail}",
    )
    answer = lambda o, args, honest: change(honest, world, fact)  # noqa: E731
    d = decide(world, world.gate([plan], ["req/x"]), answer=answer).decision
    assert (d.outcome, d.reason, d.detail) == (
        "blocked",
        "malformed_response",
        f"owner 'reqs': {detail if isinstance(bad, dict) else 'malformed response'}",
    )


def test_a_short_row_means_the_expected_id() -> None:
    """[key, seq] answers "the head is the id you expected" (an owner sends it when asked
    with `short`); it authorizes like the full row, and only for a key with an expected id."""
    world, fact, plan = simple()
    short = lambda o, args, honest: {**honest, "heads": [["req/x", fact.seq]]}  # noqa: E731
    d = decide(world, world.gate([plan], ["req/x"]), answer=short).decision
    assert (d.outcome, d.heads) == ("authorized", {"req/x": (fact.id, fact.seq)})

    def extra(o: str, args: dict[str, Any], honest: dict[str, Any]) -> dict[str, Any]:
        return {
            **honest,
            "heads": [
                ["req/x", fact.id, fact.seq],
                ["req/y", 0],
            ],
        }

    gate = world.gate([plan], ["req/x"], GatePolicy(query_keys=("req/y",)))
    d = decide(world, gate, answer=extra).decision
    assert (d.outcome, d.detail) == (
        "blocked",
        "owner 'reqs': head entry 1 ('req/y'): [key, seq] for a key without an expected id",
    )


def drifted() -> tuple[World, Record, Record, Record]:
    world, old, plan = simple()
    return world, old, plan, world.publish("req/x")


def _inline(answer: dict[str, Any], record: Record | list[Any]) -> dict[str, Any]:
    wire = record.to_wire() if isinstance(record, Record) else record
    return {**answer, "records": [wire]}


CHANGED_MALFORMED: dict[str, Callable[[dict[str, Any], World, Record, Record], Any]] = {
    "changed-without-record": lambda a, w, old, new: {**a, "records": []},
    "changed-records-missing": lambda a, w, old, new: {"heads": a["heads"]},
    "record-twice": lambda a, w, old, new: {**a, "records": a["records"] * 2},
    "record-is-not-the-head": lambda a, w, old, new: _inline(
        a, w.publish("req/x", local=False, seq=new.seq)
    ),
    "record-of-another-key": lambda a, w, old, new: {
        "heads": [["req/x", (y := w.publish("req/y")).id, y.seq]],
        "records": [y.to_wire()],
    },
    "bad-signature": lambda a, w, old, new: _inline(a, [*new.to_wire()[:-1], bytes(64)]),
    "signed-by-another-agent": lambda a, w, old, new: _inline(
        a, [*new.to_wire()[:-1], SIGNERS["inv"].sign(new.id).signature]
    ),
    "wrong-owner": lambda a, w, old, new: {
        "heads": [
            [
                "req/x",
                (
                    r := make_record(
                        SIGNERS["inv"],
                        key="req/x",
                        owner="inv",
                        seq=new.seq,
                        parents=[],
                        kind="fact",
                        body=1,
                    )
                ).id,
                r.seq,
            ]
        ],
        "records": [r.to_wire()],
    },
    "lower-seq": lambda a, w, old, new: {
        "heads": [
            [
                "req/x",
                (
                    r := make_record(
                        SIGNERS["reqs"],
                        key="req/x",
                        owner="reqs",
                        seq=old.seq,
                        parents=[],
                        kind="fact",
                        body="older",
                    )
                ).id,
                r.seq,
            ]
        ],
        "records": [r.to_wire()],
    },
    "head-seq-disagrees": lambda a, w, old, new: _entry(a, ["req/x", new.id, new.seq + 1]),
}


CHANGED_DETAILS = {
    "changed-without-record": "key 'req/x' changed but its record was not sent inline",
    "changed-records-missing": "key 'req/x' changed but its record was not sent inline",
    "record-twice": "inline record for 'req/x' sent twice or for an unchanged key",
    "record-is-not-the-head": "inline record for 'req/x' is not the head of any key",
    "record-of-another-key": "inline record for 'req/y' is given as the head of 'req/x'",
    "bad-signature": "inline record rejected: bad signature on record for 'req/x' by 'reqs'",
    "signed-by-another-agent": "inline record rejected: bad signature on record for 'req/x' "
    "by 'reqs'",
    "wrong-owner": "inline record for 'req/x' is by 'inv', not its owner",
    "lower-seq": "new record for 'req/x' has seq 1, not above the plan's 1",
    "head-seq-disagrees": "head of 'req/x' has seq 3, its record 2",
}


@pytest.mark.parametrize("name", CHANGED_MALFORMED)
def test_bad_changed_records_block(name: str) -> None:
    world, old, plan, new = drifted()
    answer = lambda o, args, honest: CHANGED_MALFORMED[name](honest, world, old, new)  # noqa
    run = decide(world, world.gate([plan], ["req/x"]), answer=answer)
    d = run.decision
    assert (d.outcome, d.reason, d.detail) == (
        "blocked",
        "malformed_response",
        f"owner 'reqs': {CHANGED_DETAILS[name]}",
    )
    assert run.count(Replan) == 0


def test_unsolicited_and_repeated_answers_are_malformed() -> None:
    world, _, plan = simple()
    for extra, why in (("cfg", "answered but was not queried"), ("reqs", "answered twice")):
        gate = world.gate([plan], ["req/x"])
        query = gate.next_event()
        assert isinstance(query, QueryHeads)
        gate.heads_answered("reqs", world.answer_query("reqs", query.queries["reqs"]))
        gate.heads_answered(extra, world.answer_query("reqs", query.queries["reqs"]))
        d = gate.next_event()
        assert isinstance(d, Decision)
        assert (d.outcome, d.reason, d.detail) == (
            "blocked",
            "malformed_response",
            f"owner {extra!r} {why}",
        )


# -- evidence -------------------------------------------------------------------------------


def test_decision_json_uses_hex_ids_and_explain_names_the_drift() -> None:
    world, old, plan = simple()
    new = world.publish("req/x")
    d = decide(world, world.gate([plan], ["req/x"], GatePolicy(replan=False))).decision
    data = json.loads(json.dumps(d.to_json()))
    assert data["frontier"] == {"req/x": old.id.hex()}
    assert data["heads"] == {"req/x": {"id": new.id.hex(), "seq": new.seq}}
    assert data["drift"] == {"req/x": {"from": old.id.hex(), "to": new.id.hex()}}
    assert (data["outcome"], data["reason"], data["round_trips"]) == ("blocked", "stale_plan", 1)
    text = d.explain()
    assert text.splitlines()[0] == (
        "ship: stale plan: a declared key changed since the plan "
        "was made; replan from the owners' heads and retry"
    )
    assert "blocked" not in text and "stale_plan" not in text
    assert f"req/x: {old.id.hex()[:12]} -> {new.id.hex()[:12]}" in text
    assert text.splitlines()[-1] == "  1 round trip, 0 B sent, 0 B received, 4.0 ms"


def test_explain_counts_in_the_singular_for_one() -> None:
    world, old, plan = simple()
    d = decide(world, world.gate([plan], ["req/x"], GatePolicy(replan=False))).decision
    assert d.explain().splitlines()[:2] == [
        "ship: authorized",
        "  the 1 declared key matches its owner's head",
    ]


# -- misuse ---------------------------------------------------------------------------------


def test_calls_out_of_order_raise_local_protocol_error() -> None:
    world, fact, plan = simple()
    gate = world.gate([plan], ["req/x"])
    calls: list[Callable[[], None]] = [
        lambda: gate.records_fetched([]),
        lambda: gate.replanned([plan.id]),
        lambda: gate.heads_answered("reqs", {}),
        lambda: gate.heads_failed("reqs", "timeout"),
    ]
    for call in calls:
        with pytest.raises(LocalProtocolError):
            call()
    query = gate.next_event()
    assert isinstance(query, QueryHeads)
    with pytest.raises(LocalProtocolError):
        gate.next_event()  # reqs has not been reported
    with pytest.raises(LocalProtocolError):
        gate.heads_failed("reqs", "refused")
    with pytest.raises(LocalProtocolError):
        gate.heads_failed("cfg", "timeout")
    gate.heads_failed("reqs", "timeout")
    with pytest.raises(LocalProtocolError):
        gate.heads_failed("reqs", "timeout")
    with pytest.raises(LocalProtocolError):
        gate.add_traffic(-1, 0)
    assert isinstance(gate.next_event(), Decision)
    with pytest.raises(LocalProtocolError):
        gate.add_traffic(1, 1)
    with pytest.raises(LocalProtocolError):
        gate.heads_answered("reqs", {})


def test_bad_roots_and_policies_are_refused() -> None:
    world, _, plan = simple()
    with pytest.raises(LocalProtocolError):
        world.gate([plan.id[:16]], ["req/x"])
    with pytest.raises(ConfigError):
        GatePolicy(max_depth=-1)
    with pytest.raises(ConfigError):
        GatePolicy(max_nodes=0)
    world.publish("req/x")
    gate = world.gate([plan], ["req/x"])
    query = gate.next_event()
    assert isinstance(query, QueryHeads)
    gate.heads_answered("reqs", world.answer_query("reqs", query.queries["reqs"]))
    assert isinstance(gate.next_event(), Replan)
    with pytest.raises(LocalProtocolError):
        gate.next_event()
    with pytest.raises(LocalProtocolError):
        gate.replanned(["not an id"])  # type: ignore[list-item]


def test_inline_record_with_a_lower_seq_blocks() -> None:
    world = World()
    world.publish("req/a")  # so that req/x gets seq 2
    old = world.publish("req/x")
    plan = world.publish("plan/p", old, kind="plan")
    older = make_record(
        SIGNERS["reqs"],
        key="req/x",
        owner="reqs",
        seq=old.seq - 1,
        parents=[],
        kind="fact",
        body="rollback",
    )

    def rollback(owner: str, args: dict[str, Any], honest: dict[str, Any]) -> Any:
        return {"heads": [["req/x", older.id, older.seq]], "records": [older.to_wire()]}

    d = decide(world, world.gate([plan], ["req/x"]), answer=rollback).decision
    assert (d.outcome, d.reason) == ("blocked", "malformed_response")
    assert "seq 1, not above the plan's 2" in d.detail


# -- properties ------------------------------------------------------------------------------

FACT_KEYS = ("req/a", "req/b", "req/c", "inv/a", "inv/b", "cfg/a", "sum/a", "sum/b")
BAD_MODES = (
    "unavailable",
    "timeout",
    "not_map",
    "bad_entry",
    "dup_entry",
    "missing_entry",
    "extra_key",
    "drop_records",
    "bad_record",
    "none_head",
)


def misbehave(mode: str, answer: dict[str, Any]) -> Any:
    """Corrupt an honest answer the way `mode` says (some modes are no-ops on some answers)."""
    heads, inline = answer["heads"], answer["records"]
    if mode in ("unavailable", "timeout"):
        return FAILURES["owner_unavailable" if mode == "unavailable" else "timeout"]
    if mode == "not_map":
        return heads
    if mode == "bad_entry":
        return {"heads": [[row[0], b"short", row[-1]] for row in heads], "records": inline}
    if mode == "dup_entry":
        return {"heads": heads + heads[:1], "records": inline}
    if mode == "missing_entry":
        return {"heads": heads[1:], "records": inline}
    if mode == "extra_key":
        return {"heads": [*heads, ["zzz/q", None, 0]], "records": inline}
    if mode == "drop_records":
        return {"heads": heads}
    if mode == "bad_record":
        return {"heads": heads, "records": [[*r[:-1], bytes(64)] for r in inline]}
    assert mode == "none_head"
    return {"heads": [[row[0], None, 0] for row in heads], "records": []}


@st.composite
def scenarios(draw: st.DrawFn, honest: bool | None = None) -> dict[str, Any]:
    """A random lineage DAG (at most 8 records below the plan), declared keys and behaviours.

    `honest` scenarios lose no record and every owner answers truthfully and well-formed.
    """
    n = draw(st.integers(1, 8))
    rarely = st.sampled_from([False, False, False, True])
    distinct = draw(st.permutations(FACT_KEYS))  # mostly one version per key, sometimes two
    nodes = [
        (
            draw(st.sampled_from(FACT_KEYS)) if draw(rarely) else distinct[j],
            draw(st.lists(st.integers(0, j - 1), unique=True, max_size=2)) if j else [],
        )
        for j in range(n)
    ]
    tops = sorted(set(range(n)) - {p for _, parents in nodes for p in parents})
    honest = draw(st.booleans()) if honest is None else honest
    deps = draw(
        st.lists(
            st.sampled_from(sorted({k for k, _ in nodes})), unique=True, min_size=1, max_size=4
        )
    )
    moved = st.lists(st.sampled_from(FACT_KEYS) | st.sampled_from(deps), unique=True, max_size=2)
    return {
        "nodes": nodes,
        "plan_parents": tops
        if not draw(rarely)
        else draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3, unique=True)),
        "deps": deps + (["cfg/b"] if draw(rarely) else []),
        "drift": draw(moved),
        "again": draw(moved) if draw(rarely) else [],
        "remote": draw(st.lists(st.integers(0, n - 1), unique=True, max_size=3)),
        "lost": draw(st.lists(st.integers(0, n - 1), unique=True, max_size=2))
        if not honest and draw(rarely)
        else [],
        "modes": {
            o: "honest" if honest else draw(st.sampled_from(("honest", *BAD_MODES))) for o in OWNS
        },
        "forge_fetch": not honest and draw(rarely),
        "fresh_replan": draw(st.booleans()),
        "honest": honest,
    }


def oracle(world: World, roots: Sequence[bytes], deps: Sequence[str]) -> dict[str, bytes] | None:
    """The frontier as the whole truth sees it: None if incomplete, lost or ambiguous."""
    seen, todo = set(roots), list(roots)
    versions: dict[str, set[bytes]] = {}
    while todo:
        record = world.store.get(todo.pop())
        if record is None:
            return None
        versions.setdefault(record.key, set()).add(record.id)
        todo += [p for p in record.parents if p not in seen]
        seen.update(record.parents)
    if any(len(versions.get(key, ())) != 1 for key in deps):
        return None
    return {key: next(iter(versions[key])) for key in deps}


def play(
    scenario: dict[str, Any], policy: GatePolicy = GatePolicy()
) -> tuple[World, Run, dict[str, bytes] | None, bool]:
    """Build the scenario's world, drive a gate to its decision; also return the oracle's
    frontier of the first plan and whether the owners' heads had moved past it."""
    world = World()
    made: list[Record] = []
    for key, parents in scenario["nodes"]:
        made.append(world.publish(key, *(made[p] for p in parents)))
    plan = world.publish("plan/p", *(made[p] for p in scenario["plan_parents"]), kind="plan")
    for i in {*scenario["remote"], *scenario["lost"]}:
        world.local.pop(made[i].id)
    for i in scenario["lost"]:
        world.store.pop(made[i].id)
    deps = scenario["deps"]
    first = oracle(world, [plan.id], deps)
    for key in scenario["drift"]:
        world.publish(key, local=False)
    stale = first is not None and any(world.heads[k].id != first[k] for k in deps)

    def answer(owner: str, args: dict[str, Any], honest: dict[str, Any]) -> Any:
        mode = scenario["modes"][owner]
        return honest if mode == "honest" else misbehave(mode, honest)

    def fetch(owner: str, args: dict[str, Any], honest: dict[str, Any]) -> Any:
        if not scenario["forge_fetch"]:
            return honest
        return {**honest, "records": [forged_wire(r) for r in honest["records"]]}

    def replan(event: Replan) -> list[bytes]:
        roots = fresh_plan(world, deps) if scenario["fresh_replan"] else [plan.id]
        for key in scenario["again"]:
            world.publish(key, local=False)
        return roots

    run = decide(world, world.gate([plan], deps, policy), answer=answer, fetch=fetch, replan=replan)
    return world, run, first, stale


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_never_authorizes_a_stale_or_incomplete_frontier(scenario: dict[str, Any]) -> None:
    world, run, _, _ = play(scenario)
    d = run.decision
    if d.authorized:
        frontier = oracle(world, run.roots, scenario["deps"])
        assert frontier is not None
        assert d.frontier == frontier
        assert all(world.heads[key].id == frontier[key] for key in scenario["deps"])
        assert d.reason is None
    else:
        assert d.reason in {
            "missing_lineage",
            "incomplete_declaration",
            "ambiguous_frontier",
            "owner_unavailable",
            "malformed_response",
            "timeout",
            "changed_again",
        }


@settings(max_examples=200, deadline=None)
@given(scenarios(honest=True))
def test_authorizes_whenever_everything_matches(scenario: dict[str, Any]) -> None:
    world, run, first, stale = play(scenario)
    d = run.decision
    if first is None:
        assert d.reason in {"incomplete_declaration", "ambiguous_frontier"}
    elif not stale:
        assert d.authorized and not d.replanned
        assert run.count(QueryHeads) == (1 if scenario["deps"] else 0)
        assert run.count(Replan) == 0
    else:
        assert run.count(Replan) == 1 and d.replanned and d.drift
        final = oracle(world, run.roots, scenario["deps"])
        fresh = final is not None and all(world.heads[k].id == final[k] for k in scenario["deps"])
        assert d.authorized == fresh
        if not fresh:
            assert d.reason in {"changed_again", "ambiguous_frontier"}


def test_an_answer_equal_to_the_unchanged_one_reads_as_the_row_checks_read_it() -> None:
    """A warm gate compares an owner's answer with the one it expects when nothing changed
    (`unchanged_answer`) in one step; what that accepts, the row by row checks accept and
    read the same way, and anything merely equal under == (True for 1, 1.0) or carrying
    records is read row by row and refused as before."""
    world, fact, plan = simple()
    assert fact.seq == 1
    query = HeadsQuery(("req/x",), {"req/x": fact.id})
    frontier = {"req/x": fact}
    verify = answers.verifier(ROSTER)
    unchanged = answers.unchanged_answer(query, frontier)
    assert unchanged is not None and unchanged.rows == [["req/x", 1]]
    answer = {"heads": [["req/x", 1]], "records": []}
    read = ({"req/x": (fact.id, 1)}, {})
    assert answers.check_answer("reqs", query, answer, frontier, verify, unchanged) == read
    assert answers.check_answer("reqs", query, answer, frontier, verify) == read
    assert answers.check_answer("reqs", query, {"heads": [["req/x", 1]]}, frontier, verify) == read
    refused = {
        "seq true": ({"heads": [["req/x", True]]}, "seq is not a non-negative integer"),
        "seq 1.0": ({"heads": [["req/x", 1.0]]}, "seq is not a non-negative integer"),
        "records not a list": ({"heads": [["req/x", 1]], "records": {}}, "is not a list"),
        "a record for an unchanged key": (
            {"heads": [["req/x", 1]], "records": [fact.to_wire()]},
            "inline record for 'req/x' sent twice or for an unchanged key",
        ),
    }
    for name, (bad, why) in refused.items():
        with pytest.raises(answers.Malformed, match=why):
            answers.check_answer("reqs", query, bad, frontier, verify, unchanged)
            pytest.fail(name)


def test_no_unchanged_answer_without_an_expected_id_for_every_key() -> None:
    world, fact, plan = simple()
    frontier = {"req/x": fact}
    assert (
        answers.unchanged_answer(HeadsQuery(("req/x", "req/y"), {"req/x": fact.id}), frontier)
        is None
    )
    other = HeadsQuery(("req/x",), {"req/x": plan.id})  # expects another version
    assert answers.unchanged_answer(other, frontier) is None


def test_a_cached_frontier_keeps_its_queries_for_the_next_gate() -> None:
    """The walk cache's frontier carries the heads queries a gate derived from it, so the
    next gate on the same lineage asks exactly the same without splitting keys again."""
    world, fact, plan = simple()
    walks = WalkCache()
    asked: list[str] = []

    def owner_of(key: str) -> str | None:
        asked.append(key)
        return ROSTER.owner_of(key)

    for _ in range(3):
        gate = Gate(
            Action("a", (plan.id,), ("req/x",)),
            owner_of=owner_of,
            verify=answers.verifier(ROSTER),
            lookup=world.store.get,
            clock=lambda: 0.0,
            walks=walks,
        )
        event = gate.next_event()
        assert isinstance(event, QueryHeads)
        assert event.queries == {"reqs": HeadsQuery(("req/x",), {"req/x": fact.id})}
        gate.heads_answered("reqs", {"heads": [["req/x", 1]]})
        assert gate.next_event().outcome == "authorized"
    assert asked == ["req/x"]
