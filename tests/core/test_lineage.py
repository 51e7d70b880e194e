"""The lineage walk (DESIGN section 3, step 1): frontier, missing ids and the blocks."""

from __future__ import annotations

import pytest
from nacl.signing import SigningKey

from planfence_net.core.errors import LocalProtocolError
from planfence_net.core.lineage import Blocked, Frontier, Missing, walk
from planfence_net.core.records import Record, make_record

KEY = SigningKey.generate()


class Store:
    """An in-memory record store; `rec` publishes with a per-store seq."""

    def __init__(self) -> None:
        self.records: dict[bytes, Record] = {}
        self.seq = 0

    def rec(self, key: str, *parents: Record | bytes, keep: bool = True) -> Record:
        self.seq += 1
        ids = tuple(p if isinstance(p, bytes) else p.id for p in parents)
        record = make_record(
            KEY, key=key, owner="a", seq=self.seq, parents=ids, kind="fact", body={"n": self.seq}
        )
        if keep:
            self.records[record.id] = record
        return record

    def lookup(self, rid: bytes) -> Record | None:
        return self.records.get(rid)


def chain(store: Store, depth: int, key: str = "req/x") -> Record:
    """A plan whose declared fact `key` is `depth` parent hops below it."""
    node = store.rec(key)
    for i in range(depth - 1):
        node = store.rec(f"sum/{i}", node)
    return store.rec("plan/p", node)


@pytest.mark.parametrize("depth", range(1, 9))
def test_full_walk_finds_the_declared_key_at_any_depth(depth: int) -> None:
    store = Store()
    plan = chain(store, depth)
    result = walk([plan.id], ["req/x"], store.lookup)
    assert isinstance(result, Frontier)
    assert result.versions["req/x"].key == "req/x"
    assert result.versions["req/x"].seq == 1
    assert result.depth == depth
    assert result.visited == depth + 1


@pytest.mark.parametrize("depth", range(1, 9))
def test_direct_parents_only_misses_keys_deeper_than_one_hop(depth: int) -> None:
    store = Store()
    plan = chain(store, depth)
    result = walk([plan.id], ["req/x"], store.lookup, max_depth=1)
    if depth == 1:
        assert isinstance(result, Frontier)
        assert result.versions["req/x"].seq == 1
    else:
        assert result == Blocked(
            "incomplete_declaration",
            "declared keys never reached within depth 1: req/x (2 records visited)",
        )


def test_max_depth_zero_looks_at_roots_only() -> None:
    store = Store()
    fact = store.rec("req/x")
    plan = store.rec("plan/p", fact)
    assert isinstance(walk([fact.id], ["req/x"], store.lookup, max_depth=0), Frontier)
    result = walk([plan.id], ["req/x"], store.lookup, max_depth=0)
    assert isinstance(result, Blocked) and result.reason == "incomplete_declaration"


def test_root_with_a_declared_key_is_its_own_frontier() -> None:
    store = Store()
    plan = chain(store, 2)
    result = walk([plan.id], ["plan/p", "req/x"], store.lookup)
    assert isinstance(result, Frontier)
    assert result.versions["plan/p"] == plan


def test_diamond_reaching_one_record_by_two_paths_is_fine() -> None:
    store = Store()
    fact = store.rec("req/x")
    left, right = store.rec("sum/l", fact), store.rec("sum/r", fact)
    plan = store.rec("plan/p", left, right)
    seen: list[bytes] = []

    def counting_lookup(rid: bytes) -> Record | None:
        seen.append(rid)
        return store.lookup(rid)

    result = walk([plan.id, plan.id], ["req/x", "sum/l"], counting_lookup)
    assert isinstance(result, Frontier)
    assert result.versions == {"req/x": fact, "sum/l": left}
    assert result.visited == 4
    assert sorted(seen) == sorted([plan.id, left.id, right.id, fact.id])


def test_two_versions_of_a_declared_key_are_ambiguous() -> None:
    store = Store()
    old = store.rec("req/x")
    new = store.rec("req/x")
    plan = store.rec("plan/p", store.rec("sum/s", old), new)
    result = walk([plan.id], ["req/x"], store.lookup)
    assert isinstance(result, Blocked)
    assert result.reason == "ambiguous_frontier"
    assert old.id.hex()[:12] in result.detail and new.id.hex()[:12] in result.detail


def test_two_versions_of_an_undeclared_key_are_fine() -> None:
    store = Store()
    old = store.rec("inv/y")
    plan = store.rec("plan/p", store.rec("req/x", old), store.rec("inv/y"))
    assert isinstance(walk([plan.id], ["req/x"], store.lookup), Frontier)


def test_missing_parents_are_reported_all_at_once_in_bfs_order() -> None:
    store = Store()
    lost_a = store.rec("req/a", keep=False)
    lost_b = store.rec("req/b", keep=False)
    lost_c = store.rec("req/c", keep=False)
    mid = store.rec("sum/s", lost_c)
    plan = store.rec("plan/p", lost_a, mid, lost_b, lost_a)
    result = walk([plan.id], ["req/a"], store.lookup)
    assert result == Missing((lost_a.id, lost_b.id, lost_c.id))
    store.records.update({r.id: r for r in (lost_a, lost_b, lost_c)})
    assert isinstance(walk([plan.id], ["req/a"], store.lookup), Frontier)


def test_a_missing_root_is_reported() -> None:
    store = Store()
    plan = store.rec("plan/p", keep=False)
    other = store.rec("plan/q", store.rec("req/x", keep=False))
    assert walk([plan.id, other.id], ["req/x"], store.lookup) == Missing(
        (plan.id, other.parents[0])
    )


def test_missing_beats_incomplete_but_not_ambiguous() -> None:
    store = Store()
    lost = store.rec("req/y", keep=False)
    plan = store.rec("plan/p", lost)
    assert walk([plan.id], ["req/x"], store.lookup) == Missing((lost.id,))
    v1, v2 = store.rec("req/x"), store.rec("req/x")
    plan = store.rec("plan/p", v1, v2, lost)
    result = walk([plan.id], ["req/x"], store.lookup)
    assert isinstance(result, Blocked) and result.reason == "ambiguous_frontier"


def test_missing_beyond_max_depth_is_not_reported() -> None:
    store = Store()
    lost = store.rec("req/y", keep=False)
    plan = store.rec("plan/p", store.rec("req/x", lost))
    assert isinstance(walk([plan.id], ["req/x"], store.lookup, max_depth=1), Frontier)
    assert walk([plan.id], ["req/x"], store.lookup, max_depth=2) == Missing((lost.id,))


def test_lookup_returning_another_record_counts_as_missing() -> None:
    store = Store()
    fact = store.rec("req/x")
    plan = store.rec("plan/p", fact)
    result = walk([plan.id], ["req/x"], lambda rid: plan)
    assert result == Missing((fact.id,))


def test_node_limit_blocks_as_missing_lineage() -> None:
    store = Store()
    facts = [store.rec(f"req/{i}") for i in range(5)]
    plan = store.rec("plan/p", *facts)
    assert isinstance(walk([plan.id], ["req/0"], store.lookup, max_nodes=6), Frontier)
    result = walk([plan.id], ["req/0"], store.lookup, max_nodes=5)
    assert result == Blocked(
        "missing_lineage", "lineage walk hit the node limit: more than 5 records reachable"
    )
    roots = [f.id for f in facts]
    assert isinstance(walk(roots, [], store.lookup, max_nodes=4), Blocked)


def test_node_limit_bounds_lookups() -> None:
    store = Store()
    node = store.rec("req/x")
    for i in range(50):
        node = store.rec(f"sum/{i}", node)
    calls: list[bytes] = []

    def counting_lookup(rid: bytes) -> Record | None:
        calls.append(rid)
        return store.lookup(rid)

    result = walk([node.id], ["req/x"], counting_lookup, max_nodes=10)
    assert isinstance(result, Blocked) and result.reason == "missing_lineage"
    assert len(calls) <= 10


def test_empty_roots_with_declared_keys_is_incomplete() -> None:
    result = walk([], ["req/x"], Store().lookup)
    assert isinstance(result, Blocked) and result.reason == "incomplete_declaration"
    assert walk([], [], Store().lookup) == Frontier({}, 0, 0)


def test_bad_limits_raise() -> None:
    with pytest.raises(LocalProtocolError):
        walk([], [], Store().lookup, max_depth=-1)
    with pytest.raises(LocalProtocolError):
        walk([], [], Store().lookup, max_nodes=0)
