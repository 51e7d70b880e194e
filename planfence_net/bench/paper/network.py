"""The bench's network model: every agent process behind its own access link.

    network = Network(roster, LinkModel(load_profile("att-lte")), seed)
    await network.start(tg)                   # one in-process shaper per agent
    pool = SessionPool(..., network.addresses_of("ops"))
    await network.rephase("safety/res-00/a3", policy)  # before each action's timed span

Each agent (every owner, the executor, the central store) has one access link: one trace
replayed in each direction (the profile's `.up` trace for bytes leaving the agent, `.down`
for bytes reaching it) with half the profile's one-way delay, so a session between two
agents crosses both agents' links and has the profile's delay end to end. A link is a trace
with an offset: right before each protected action the harness re-anchors every link at a
phase drawn from (seed, action, agent); with `phases="paired"` (the default) the draw does not
depend on the policy, so every policy meets the same trace offsets at every action, and with
`phases="independent"` (an ablation) it does. Owners writing to their own daemon stay local:
only sessions between agents are shaped. The shapers are `traces.shaper.Shaper`s with one
route per peer; the bench runs them in a process of their own (bench/paper/linkproc.py), so the
harness's CPU does not delay their timers.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

import anyio
from anyio.abc import SocketAttribute, TaskGroup

from ...core.roster import Roster
from ...traces.mmlink import Trace
from ...traces.profiles import Profile, load_trace
from ...traces.shaper import Route, Shaper
from ..policies.policy import Addresses

PHASES = ("paired", "independent")
OUTAGE_MS = 500  # a gap between delivery opportunities this long is an outage
WINDOW_MS = 5_000  # how far past a phase an action may run (the executor's deadline)
MAX_DRAWS = 1000


@dataclass(frozen=True, slots=True)
class LinkModel:
    """What every access link replays, and whether trace phases are paired across policies."""

    profile: Profile
    phases: str = "paired"

    def describe(self) -> str:
        delay = self.profile.delay_ms / 2
        return (
            f"Every agent process (each owner, the executor `ops`, the central store) sits "
            f"behind its own access link replaying `{self.profile.name}` ({self.profile.up}"
            f" for bytes leaving the agent, {self.profile.down} for bytes reaching it) with "
            f"a {delay:g} ms one-way delay, so a session between two agents crosses two "
            f"links ({2 * delay:g} ms one way, {4 * delay:g} ms base round trip). The "
            "central store has the same link class as an owner. Before each protected "
            "action every link is re-anchored at a trace phase drawn from (seed, action, "
            "agent)"
            + (
                ", the same for every policy (paired)"
                if self.phases == "paired"
                else ", drawn separately per policy (the independent-phase ablation)"
            )
            + f", among phases whose next {WINDOW_MS / 1000:g} "
            f"s hold no outage (no gap of {OUTAGE_MS} ms or more between delivery "
            "opportunities, in either direction): the LTE driving traces have outages of "
            "seconds to minutes, which would otherwise decide whole actions by the "
            "deadline; outages are the fault ablation's subject, not this comparison's."
        )


class Network:
    """One shaper per agent; `addresses_of(agent)` is where that agent reaches the others."""

    def __init__(
        self, roster: Roster, model: LinkModel, seed: int, wired: frozenset[str] = frozenset()
    ) -> None:
        self.roster = roster
        self.model = model
        self.seed = seed
        self.wired = wired  # agents on an unshaped (loopback) link: no shaper of their own
        self.shapers: dict[str, Shaper] = {}
        self.routes: dict[str, Addresses] = {}

    async def start(self, tg: TaskGroup) -> None:
        """Start every agent's shaper in `tg` (they stop when `tg` is cancelled). A wired
        agent has none: the others' routes to it reach its daemon directly, so a session
        with it crosses only the other side's link."""
        agents = [a for a in self.roster.agents if a.name not in self.wired]
        inward = {
            a.name: await anyio.create_tcp_listener(local_host="127.0.0.1") for a in agents
        }  # bound now: every route to them is known before serving
        target = {
            name: ("127.0.0.1", lst.extra(SocketAttribute.local_port))
            for name, lst in inward.items()
        }
        target.update(
            {a.name: (a.host, a.port) for a in self.roster.agents if a.name in self.wired}
        )
        for agent in agents:
            shaper = Shaper(
                agent.host,
                agent.port,
                self.model.profile,
                delay_ms=self.model.profile.delay_ms // 2,
                seed=self.seed,
            )
            peers = [a.name for a in self.roster.agents if a.name != agent.name]
            routes: list[Route] = [((agent.host, agent.port), True, inward[agent.name])]
            routes += [(target[p], False, None) for p in peers]
            ports = await tg.start(shaper.serve_routes, routes)
            self.shapers[agent.name] = shaper
            self.routes[agent.name] = {
                p: ("127.0.0.1", bound) for p, bound in zip(peers, ports[1:], strict=False)
            }

    def addresses_of(self, agent: str) -> Addresses:
        """Where `agent` reaches the others (a wired agent reaches them directly)."""
        return self.routes.get(agent, {})

    async def rephase(self, action: str, policy: str) -> None:
        """Re-anchor every link for `action` (see the module docstring)."""
        traces = [
            load_trace(t) for t in (self.model.profile.up, self.model.profile.down) if t is not None
        ]
        for agent, shaper in self.shapers.items():
            salt = policy if self.model.phases == "independent" else ""
            draw = random.Random(f"{self.seed}:{action}:{agent}:{salt}")
            shaper.rephase(usable_phase(traces, draw))


def usable_phase(traces: list[Trace], draw: random.Random) -> int:
    """A phase (ms) at which no trace of `traces` has an outage within the next WINDOW_MS,
    drawn uniformly among such phases by `draw` (the last draw if none is found)."""
    period = max(t.period_ms for t in traces)
    phase = 0
    for _ in range(MAX_DRAWS):
        phase = draw.randrange(period)
        if all(not _outage_ahead(t, phase % t.period_ms) for t in traces):
            return phase
    return phase


@functools.cache
def _outages(trace: Trace) -> tuple[tuple[int, int], ...]:
    """(start, end) ms of every gap of OUTAGE_MS or more in one pass (the loop's wrap too)."""
    ts = trace.timestamps
    gaps = [(a, b) for a, b in zip(ts, ts[1:], strict=False) if b - a >= OUTAGE_MS]
    if ts[0] >= OUTAGE_MS:  # the wrap: the pass ends at period_ms = ts[-1], restarts at 0
        gaps.append((0, ts[0]))
    return tuple(gaps)


def _outage_ahead(trace: Trace, start: int) -> bool:
    """True when `trace` has an outage overlapping [start, start + WINDOW_MS] (looping)."""
    period = trace.period_ms
    return any(
        a < end and b > begin
        for shift in (0, period)
        for a, b in _outages(trace)
        for begin, end in [(start - shift, start - shift + WINDOW_MS)]
    )
