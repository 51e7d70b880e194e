"""Workflow templates and seeded schedules for the experiment harness.

A template (`executor/templates.toml`) is one workflow: how many agents take part, how many
work units its plan covers, how many shared keys exist and how many each protected action
declares (d). A schedule is the list of protected actions to replay: for each, the keys it
truly depends on, the keys it declares (the true ones minus any omitted), the key revised
between planning and action (or none), the irrelevant ("dirty") updates published in the
same window, and the depth of the plan's lineage chain.

Everything here is pure: the same templates, parameters and seed give the same schedule, so
every policy replays exactly the same actions.
"""

from __future__ import annotations

import dataclasses
import math
import random
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, Unpack

from ...core.errors import ConfigError
from ...core.roster import Roster
from ...defaults import data_dir

TEMPLATES = data_dir("executor") / "templates.toml"
FAMILIES = ("reservation", "fulfilment", "deployment")
EXECUTOR = "ops"
PLANNER = "planner"
CLUSTER_AGENTS = 8  # the largest template: planner, ops and six fact owners


@dataclass(frozen=True, slots=True)
class Template:
    """One workflow template."""

    name: str
    family: str
    agents: int
    units: int
    keys: int
    d: int

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ConfigError(f"template {self.name}: unknown family {self.family!r}")
        if not 3 <= self.agents <= CLUSTER_AGENTS:
            raise ConfigError(f"template {self.name}: agents must be 3 to {CLUSTER_AGENTS}")
        if self.keys < 1 or not 0 <= self.d <= self.keys or self.units < 1:
            raise ConfigError(f"template {self.name}: needs keys >= 1, 0 <= d <= keys, units >= 1")


def load_templates(path: Path = TEMPLATES) -> list[Template]:
    """Read the templates file; raises ConfigError naming the bad entry."""
    try:
        data = tomllib.loads(path.read_text())
    except (FileNotFoundError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read templates {path}: {exc}") from None
    try:
        return [Template(**entry) for entry in data["templates"]]
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: bad template entry: {exc}") from None


class Sizes(TypedDict, total=False):
    """The sizes of a template that `vary` may change."""

    agents: int
    units: int
    keys: int
    d: int


def vary(template: Template, **changes: Unpack[Sizes]) -> Template:
    """A copy of `template` with new sizes, named after them (e.g. `res-00-k128-d4`)."""
    suffix = "-".join(f"{k[0]}{v}" for k, v in changes.items())
    return dataclasses.replace(template, name=f"{template.name}-{suffix}", **changes)


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """One protected action of a schedule. Keys are indices into the template's keys."""

    template: Template
    index: int
    deps: tuple[int, ...]
    declared: tuple[int, ...]
    revise: int | None
    dirty: tuple[int, ...]
    depth: int = 1
    spread: bool = True  # the paper's workload; False: the burst ablation
    revise_at: int = 0  # spread: how many background updates come before the revision

    @property
    def name(self) -> str:
        return f"{self.template.name}/a{self.index}"


@dataclass(frozen=True, slots=True)
class ScheduleParams:
    """What a schedule varies: actions per template, dirty updates per action (rho), the
    probability of a revision between planning and action, the fraction of true dependencies
    left undeclared, the lineage depth of each plan, and how the updates are published.

    `spread` (the paper's workload) publishes an action's background updates one after
    another over the interval between planning and action, each complete (synchronised) before
    the next, with the revision at a drawn place among them; `spread=False` is the burst
    ablation (the earlier workload): the background updates all at once, then the revision."""

    actions: int = 1
    rho: float = 0.0
    revision: float = 1.0
    omission: float = 0.0
    depth: int = 1
    rhos: tuple[float, ...] = ()  # if given, template i of the case uses rhos[i % len]
    spread: bool = True

    def __post_init__(self) -> None:
        if self.actions < 1 or self.rho < 0 or self.depth < 1 or min(self.rhos, default=0) < 0:
            raise ConfigError("schedule needs actions >= 1, rho >= 0 and depth >= 1")
        if not (0 <= self.revision <= 1 and 0 <= self.omission <= 1):
            raise ConfigError("revision and omission are probabilities in [0, 1]")

    def rho_of(self, position: int) -> float:
        """The background update rate of the case's `position`-th template."""
        return self.rhos[position % len(self.rhos)] if self.rhos else self.rho


def make_schedule(templates: list[Template], params: ScheduleParams, seed: int) -> list[ActionSpec]:
    """The protected actions for `templates`, `params.actions` per template, in order.

    Each template draws from its own generator seeded by (seed, template name), so adding a
    template never changes another's actions. Omission: an action omits with probability
    `omission`, and an omitting action declares only one of its true dependencies (it drops
    3 of 4 at d = 4, as in the paper). One draw per action decides, so the omitting actions
    are nested across omission levels (an action omitting at 25% also omits at 50%).
    """
    schedule = []
    for position, template in enumerate(templates):
        rng = random.Random(f"{seed}:{template.name}")
        rho = params.rho_of(position)
        for index in range(params.actions):
            deps = tuple(sorted(rng.sample(range(template.keys), template.d)))
            omits, kept = rng.random() < params.omission, rng.choice(deps) if deps else None
            declared = (kept,) if omits and kept is not None else deps
            raced = bool(deps) and rng.random() < params.revision
            # the key is drawn either way, so revised actions are nested across probabilities
            candidate = rng.choice(deps) if deps else None
            revise = candidate if raced else None
            whole, part = math.floor(rho), rho - math.floor(rho)
            count = whole + (1 if rng.random() < part else 0)
            free = [k for k in range(template.keys) if k not in deps]
            dirty = tuple(rng.choice(free) for _ in range(count)) if free else ()
            # drawn under both workloads, so the burst ablation replays the same actions
            revise_at = rng.randint(0, len(dirty))
            schedule.append(
                ActionSpec(
                    template,
                    index,
                    deps,
                    declared,
                    revise,
                    dirty,
                    params.depth,
                    params.spread,
                    revise_at,
                )
            )
    return schedule


def fact_owners(roster: Roster, template: Template) -> list[str]:
    """The agents owning the template's shared keys: agents - 2 of them, never the planner
    or the executor, in roster order."""
    others = [a.name for a in roster.agents if a.name not in (PLANNER, EXECUTOR, "central")]
    count = template.agents - 2
    if count > len(others):
        raise ConfigError(
            f"template {template.name} needs {template.agents} agents; the "
            f"cluster has {len(others) + 2}"
        )
    return others[:count]


def prefix_of(roster: Roster, agent: str) -> str:
    """The key prefix an agent owns (`req/` for `req/*`)."""
    pattern = roster.agent(agent).owns[0]
    if not pattern.endswith("/*"):
        raise ConfigError(f"agent {agent} owns {pattern!r}; the harness needs a 'prefix/*'")
    return pattern[:-1]


@dataclass(frozen=True, slots=True)
class KeySpace:
    """Concrete key names of one template in one cluster."""

    template: Template
    keys: tuple[str, ...]
    planner_prefix: str
    executor_prefix: str

    @classmethod
    def of(cls, roster: Roster, template: Template, run: str = "") -> KeySpace:
        owners = fact_owners(roster, template)
        tag = f"{run}/" if run else ""
        keys = tuple(
            f"{prefix_of(roster, owners[j % len(owners)])}{tag}{template.name}/x{j}"
            for j in range(template.keys)
        )
        return cls(
            template,
            keys,
            f"{prefix_of(roster, PLANNER)}{tag}{template.name}",
            f"{prefix_of(roster, EXECUTOR)}{tag}{template.name}",
        )

    def names(self, indices: tuple[int, ...]) -> tuple[str, ...]:
        return tuple(self.keys[i] for i in indices)


def work_units(template: Template) -> list[str]:
    """The work units a plan of `template` lists in its body (what the executor carries out)."""
    return [f"{template.family}/{template.name}/unit-{i:03d}" for i in range(template.units)]
