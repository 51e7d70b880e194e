"""The named experiments of `planfence bench`: which policies, which cases, which schedules.

Each experiment is a list of cases; a case is a set of templates and schedule parameters (and
for the fail-closed ablation, a fault to inject). Every policy of the experiment replays the
same schedule of every case. `quick` shrinks the number of actions, never the shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...core.errors import ConfigError
from .. import EXPERIMENTS
from .workload import FAMILIES, ScheduleParams, Template, load_templates, vary

SAFETY_POLICIES = ("freshness", "central", "sync", "allkeys", "planfence")
# the ablation rows beside them: the product's inline records, the earlier central and sync
# designs, and central with its store on a wired link (bench/policies/baselines.py)
SAFETY_ABLATIONS = ("planfence+inline", "central-walk", "central-wired", "sync-barrier")
# the rate experiment compares PlanFence with every safe policy; the burst ablation (the
# earlier workload) keeps the two whose cost depends on how updates arrive
RATE_POLICIES = ("central", "sync", "allkeys", "planfence")
RATE_BURST_POLICIES = ("central", "sync", "planfence")
# The paper's rate workload revises an action's input after planning with this probability (its
# text gives no figure; ours is stated in every rate report). Safety revises every action.
RATE_REVISION = 0.5
FAULTS = ("outage", "missing_lineage", "malformed_heads", "second_change")
RATES = (0.25, 1.0, 4.0, 16.0)
KEYSPACES = (8, 16, 32, 64, 128)
SCOPES = (1, 2, 4, 8)
DEPTHS = (1, 2, 3, 4, 5, 6, 7, 8)
OMISSIONS = (0.0, 0.25, 0.5)


@dataclass(frozen=True, slots=True)
class Case:
    """One point of an experiment: `x` is its value on the plot's axis."""

    label: str
    group: str
    x: float
    templates: tuple[Template, ...]
    params: ScheduleParams
    policies: tuple[str, ...]
    fault: str | None = None


@dataclass(frozen=True, slots=True)
class Experiment:
    name: str
    cases: tuple[Case, ...] = field(default_factory=tuple)

    @property
    def policies(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for c in self.cases for p in c.policies))


def first_of_each_family(templates: list[Template]) -> list[Template]:
    return [next(t for t in templates if t.family == f) for f in FAMILIES]


def build(name: str, *, quick: bool, templates: list[Template] | None = None) -> Experiment:
    """The experiment called `name`; raises ConfigError for an unknown one."""
    pool = templates if templates is not None else load_templates()
    base = first_of_each_family(pool)
    if name == "safety":
        chosen = tuple(pool[::3] if quick else pool)  # quick: 10 of the 30 templates
        # background updates at the rate experiment's rates, cycled over the templates
        params = ScheduleParams(actions=1 if quick else 11, revision=1.0, rhos=RATES)
        policies = SAFETY_POLICIES + SAFETY_ABLATIONS
        return Experiment(name, (Case("safety", "safety", 0, chosen, params, policies),))
    if name == "rate":
        return Experiment(name, rate_cases(pool, quick))
    if name in ("keyspace", "scope"):
        return Experiment(name, sweep_cases(name, base, quick))
    if name == "ablations":
        return Experiment(name, ablation_cases(base, quick))
    raise ConfigError(f"unknown experiment {name!r} (known: {', '.join(EXPERIMENTS)})")


def rate_cases(pool: list[Template], quick: bool) -> tuple[Case, ...]:
    """One case per rate on 10 workflows (every third template, so the bootstrap over
    workflows is informative): the paper's workload (spread updates, the revision with
    probability RATE_REVISION) with every safe policy, then the burst ablation (the earlier
    workload: the updates at once, every action revised), on the same actions."""
    shaped = tuple(vary(t, agents=5, keys=32, d=4) for t in pool[::3])
    n = 1 if quick else 3
    paper = [
        Case(
            f"rho={rho:g}",
            "rate",
            rho,
            shaped,
            ScheduleParams(n, rho=rho, revision=RATE_REVISION),
            RATE_POLICIES,
        )
        for rho in RATES
    ]
    burst = [
        Case(
            f"burst rho={rho:g}",
            "rate-burst",
            rho,
            shaped,
            ScheduleParams(n, rho=rho, revision=1.0, spread=False),
            RATE_BURST_POLICIES,
        )
        for rho in RATES
    ]
    return tuple(paper + burst)


def sweep_cases(group: str, base: list[Template], quick: bool) -> tuple[Case, ...]:
    """All-keys against PlanFence on 8 agents, one case per point of the sweep: the shared
    keys |X| at d = 4 ("keyspace") or the declared dependencies d at |X| = 8 ("scope")."""
    n = 2 if quick else 10
    points = (
        [(f"|X|={k}", k, k, 4) for k in KEYSPACES]
        if group == "keyspace"
        else [(f"d={d}", d, 8, d) for d in SCOPES]
    )
    return tuple(
        Case(
            label,
            group,
            x,
            tuple(vary(t, agents=8, keys=keys, d=d) for t in base),
            ScheduleParams(n),
            ("allkeys", "planfence"),
        )
        for label, x, keys, d in points
    )


def ablation_cases(base: list[Template], quick: bool) -> tuple[Case, ...]:
    """The four ablations: lineage depth, replanning, omitted dependencies, fail-closed."""
    small = tuple(vary(t, agents=4, keys=8, d=4) for t in base)
    n = 1 if quick else 4
    cases = [
        Case(
            f"depth={depth}",
            "depth",
            depth,
            small[:1],
            ScheduleParams(n, revision=0.0, depth=depth),
            ("planfence", "planfence-d1"),
        )
        for depth in DEPTHS
    ]
    cases.append(
        Case(
            "replan", "replan", 0, small, ScheduleParams(n * 2), ("planfence", "planfence-noreplan")
        )
    )
    omit_n = 10 if quick else 40
    cases += [
        Case(
            f"omission={p:g}",
            "omission",
            p,
            small,
            ScheduleParams(omit_n, omission=p),
            ("planfence",),
        )
        for p in OMISSIONS
    ]
    cases += [
        Case(
            f"fault={fault}",
            "fault",
            i,
            small[:1],
            ScheduleParams(1),
            ("planfence", "planfence-failopen"),
            fault,
        )
        for i, fault in enumerate(FAULTS)
    ]
    return tuple(cases)
