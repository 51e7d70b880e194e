"""Workflow templates, the seeded schedule generator, and how the harness publishes a
schedule's updates (no cluster)."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import anyio
import anyio.lowlevel
import pytest

from planfence_net.bench.paper import harness
from planfence_net.bench.paper.experiments import build
from planfence_net.bench.paper.workload import (
    FAMILIES,
    ActionSpec,
    KeySpace,
    ScheduleParams,
    load_templates,
    make_schedule,
    vary,
)
from planfence_net.core.errors import ConfigError
from planfence_net.core.roster import Agent, Roster


def test_templates_cover_the_three_families_within_the_paper_ranges() -> None:
    templates = load_templates()
    assert len(templates) == 30
    assert Counter(t.family for t in templates) == {f: 10 for f in FAMILIES}
    assert {t.agents for t in templates} == set(range(3, 9))
    assert min(t.units for t in templates) == 64 and max(t.units for t in templates) == 256
    assert {t.keys for t in templates} == {8, 16, 32, 64, 128}
    assert all(1 <= t.d <= t.keys for t in templates)


def test_same_seed_gives_the_same_schedule_and_another_seed_does_not() -> None:
    templates = load_templates()
    params = ScheduleParams(actions=11, rho=4.0, revision=1.0)
    first = make_schedule(templates, params, seed=7)
    assert first == make_schedule(templates, params, seed=7)
    assert first != make_schedule(templates, params, seed=8)
    assert len(first) == 330


def test_a_template_draws_the_same_actions_whatever_else_is_scheduled() -> None:
    templates = load_templates()
    params = ScheduleParams(actions=3, rho=1.0)
    alone = make_schedule(templates[4:5], params, seed=1)
    together = [s for s in make_schedule(templates, params, seed=1) if s.template == templates[4]]
    assert alone == together


def test_every_action_is_revised_on_a_true_dependency_and_dirty_keys_are_irrelevant() -> None:
    schedule = make_schedule(load_templates(), ScheduleParams(actions=11, rho=16.0), seed=0)
    for spec in schedule:
        assert spec.revise in spec.deps
        assert len(spec.deps) == spec.template.d == len(set(spec.deps))
        assert not set(spec.dirty) & set(spec.deps) or spec.template.keys == spec.template.d
        assert spec.declared == spec.deps


def test_fractional_rate_gives_that_many_dirty_updates_on_average() -> None:
    base = vary(load_templates()[0], keys=32, d=4)
    schedule = make_schedule([base], ScheduleParams(actions=4000, rho=0.25), seed=3)
    mean = sum(len(s.dirty) for s in schedule) / len(schedule)
    assert 0.22 < mean < 0.28


def test_omitted_sets_are_nested_across_omission_levels() -> None:
    base = vary(load_templates()[0], keys=32, d=8)
    levels = [
        make_schedule([base], ScheduleParams(actions=50, omission=p), seed=5)
        for p in (0.0, 0.25, 0.5)
    ]
    for none, quarter, half in zip(*levels, strict=False):
        assert none.deps == quarter.deps == half.deps
        assert set(half.declared) <= set(quarter.declared) <= set(none.declared)
    # an omitting action declares one of its dependencies; half of the actions omit
    omitting = [s for s in levels[2] if s.declared != s.deps]
    assert {len(s.declared) for s in omitting} == {1}
    assert 0.35 < len(omitting) / 50 < 0.65


def test_background_rates_cycle_over_the_templates() -> None:
    pool = [vary(t, keys=32, d=4) for t in load_templates()[:4]]
    schedule = make_schedule(pool, ScheduleParams(actions=400, rhos=(0.25, 16.0)), seed=1)
    per = {t.name: sum(len(s.dirty) for s in schedule if s.template == t) / 400 for t in pool}
    assert [round(per[t.name] * 4) / 4 for t in pool] == [0.25, 16.0, 0.25, 16.0]


def test_keys_are_spread_over_the_fact_owners_and_namespaced_by_run() -> None:
    agents = tuple(
        Agent(n, "127.0.0.1", 1000 + i, bytes([i + 1]) * 32, (f"{p}/*",))
        for i, (n, p) in enumerate(
            [("planner", "plan"), ("reqs", "req"), ("inventory", "inv"), ("ops", "ops")]
        )
    )
    roster = Roster("t", agents)
    template = vary(load_templates()[0], agents=4, keys=4, d=2)
    space = KeySpace.of(roster, template, "planfence")
    assert space.keys == tuple(
        f"{p}/planfence/{template.name}/x{j}" for j, p in enumerate(["req", "inv", "req", "inv"])
    )
    assert space.executor_prefix == f"ops/planfence/{template.name}"


def test_bad_parameters_and_unknown_experiments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="probabilities"):
        ScheduleParams(omission=1.5)
    with pytest.raises(ConfigError, match="unknown experiment 'nope'"):
        build("nope", quick=True)


def test_the_burst_ablation_replays_the_paper_workloads_actions_with_every_one_revised() -> None:
    pool = build("rate", quick=True).cases
    paper = {c.x: c for c in pool if c.group == "rate"}
    burst = {c.x: c for c in pool if c.group == "rate-burst"}
    assert sorted(paper) == sorted(burst) == [0.25, 1.0, 4.0, 16.0]
    assert set(paper[1.0].policies) == {"central", "sync", "allkeys", "planfence"}
    for rho, case in paper.items():
        spread = make_schedule(list(case.templates), case.params, seed=0)
        bursty = make_schedule(list(burst[rho].templates), burst[rho].params, seed=0)
        assert [(s.deps, s.dirty, s.revise_at) for s in spread] == [
            (s.deps, s.dirty, s.revise_at) for s in bursty
        ]
        assert all(s.spread for s in spread) and not any(s.spread for s in bursty)
        assert all(s.revise is not None for s in bursty)
        # the paper's revision is a probability: a revised action revises the burst's key
        assert all(a.revise in (None, b.revise) for a, b in zip(spread, bursty, strict=True))


def test_the_paper_workload_revises_with_its_probability_somewhere_among_the_updates() -> None:
    base = vary(load_templates()[0], keys=32, d=4)
    schedule = make_schedule([base], ScheduleParams(actions=2000, rho=4.0, revision=0.5), seed=2)
    revised = [s for s in schedule if s.revise is not None]
    assert 0.45 < len(revised) / len(schedule) < 0.55
    assert all(0 <= s.revise_at <= len(s.dirty) for s in schedule)
    places = Counter(min(s.revise_at, 1) for s in revised if len(s.dirty) >= 2)
    assert places[0] > 0 and places[1] > 0  # first, and after some background update


class _Recorder:
    """A writer that records the order of puts and how many are open at once."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.heads = {k: SimpleNamespace(seq=1) for k in keys}
        self.order: list[tuple[str, str]] = []
        self.open = self.peak = 0

    async def put(self, key: str, body: dict[str, object], *_: object) -> None:
        self.open += 1
        self.peak = max(self.peak, self.open)
        await anyio.lowlevel.checkpoint()  # let any concurrent put start
        self.order.append((key, str(body["revision"])))
        self.open -= 1


@pytest.mark.parametrize("spread", [True, False])
def test_the_harness_publishes_spread_updates_one_at_a_time_and_a_burst_at_once(
    spread: bool,
) -> None:
    template = vary(load_templates()[0], keys=8, d=2)
    space = KeySpace(template, tuple(f"req/t/x{j}" for j in range(8)), "plan/t", "ops/t")
    spec = ActionSpec(template, 0, (0, 1), (0, 1), 1, (4, 5, 6), spread=spread, revise_at=2)
    writer = _Recorder(space.keys)
    run = harness.PolicyRun("p", None, None, writer, {}, clock=lambda: 0.0)  # type: ignore[arg-type]
    anyio.run(run.publish_updates, spec, space, backend="asyncio")
    background = [(f"req/t/x{j}", "background") for j in (4, 5, 6)]
    if spread:
        assert writer.peak == 1
        assert writer.order == [*background[:2], ("req/t/x1", "revision"), background[2]]
    else:
        assert writer.peak == 3
        assert sorted(writer.order[:3]) == background
        assert writer.order[3] == ("req/t/x1", "revision")
