"""Is each owner of a cluster folder up: its process, its answer to a ping, and the shaper in
front of it. `planfence cluster status` and `planfence doctor` read the same rows.

An owner is alive only when it answered a ping over an authenticated session within the
timeout: a process that exists but is stopped (SIGSTOP) or wedged answers nothing, and an
owner this host did not start (a container) can still be alive.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from ..core.errors import PlanfenceError
from ..core.roster import Roster
from ..net.api import owner_session
from ..net.client import collapsing_task_group
from .folder import ClusterDir
from .packetlinks import forwarder_name, forwarder_pid, read_packet_links
from .pids import read_pid
from .processes import (
    link_addresses,
    owner_marker,
    read_links,
    running_pid,
    shaper_marker,
    static_links_path,
)
from .processes import shaper_name as shaper_of


@dataclass(frozen=True, slots=True)
class Shaper:
    address: str
    profile: str | None
    pid: int | None
    local: bool  # started from this folder (False: another host runs it, a static links.toml)
    running: bool  # a local one's process runs
    packet: bool = False  # a packet forwarder (`packetlinks`; `address` names its namespace)


@dataclass(frozen=True, slots=True)
class OwnerHealth:
    """One roster member: where it listens, its process and whether it answered."""

    name: str
    address: str
    owns: tuple[str, ...]
    pid: int | None  # the running process, else the last one recorded
    running: bool  # a process of this folder runs under `pid`
    alive: bool  # it answered a ping within the timeout
    shaper: Shaper | None

    @property
    def problem(self) -> str:
        """Why this owner cannot serve, or not through its link, in a few words; "" when it
        can."""
        if self.shaper is not None and self.shaper.packet and not self.shaper.running:
            return (
                f"its {self.shaper.profile} packet link is not running: nothing reaches it "
                f"(`planfence cluster down DIR`, then `cluster up DIR --links packet`)"
            )
        if self.alive and self.shaper is not None and self.shaper.local and not self.shaper.running:
            return (
                f"its {self.shaper.profile} shaper is not running: sessions reach it unshaped "
                f"(`planfence cluster up DIR --profile {self.shaper.profile}` starts it again)"
            )
        if self.alive:
            return ""
        if self.running:
            return f"process {self.pid} runs but does not answer (stopped or frozen)"
        return "not running" if self.pid is None else f"not running (process {self.pid} is gone)"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "address": self.address,
            "pid": self.pid,
            "alive": self.alive,
            "owns": list(self.owns),
            "shaper": None
            if self.shaper is None
            else {
                "address": self.shaper.address,
                "profile": self.shaper.profile,
                "pid": self.shaper.pid,
                "running": self.shaper.running,
                "packet": self.shaper.packet,
            },
        }


async def wait_health(cdir: ClusterDir, timeout: float) -> list[OwnerHealth]:  # noqa: ASYNC109
    """Every roster member's health in roster order; each owner is pinged (as itself, at its
    roster address) with `timeout` seconds to answer, all at once."""
    roster = cdir.roster()
    answered = await wait_answering(cdir, roster, timeout)
    links = link_addresses(cdir)
    recorded = read_links(cdir)
    local = not static_links_path(cdir).exists()
    packet = read_packet_links(cdir)
    rows = []
    for agent in roster.agents:
        pid = running_pid(cdir, agent.name, owner_marker(cdir, agent.name))
        link = links.get(agent.name)
        address = f"{link[0]}:{link[1]}" if link else recorded.get("links", {}).get(agent.name)
        shaper = None
        if address is not None:
            name = shaper_of(agent.name)
            shaper = Shaper(
                address,
                recorded.get("profile"),
                read_pid(cdir, name),
                local,
                local and running_pid(cdir, name, shaper_marker(agent.address)) is not None,
            )
        if agent.name in packet.get("links", {}):
            running = forwarder_pid(cdir, agent.name)
            shaper = Shaper(
                f"netns {packet['links'][agent.name]['namespace']}",
                packet.get("profile"),
                running or read_pid(cdir, forwarder_name(agent.name)),
                True,
                running is not None,
                packet=True,
            )
        rows.append(
            OwnerHealth(
                agent.name,
                agent.address,
                tuple(agent.owns),
                pid or read_pid(cdir, agent.name),
                pid is not None,
                agent.name in answered,
                shaper,
            )
        )
    return rows


async def wait_answering(cdir: ClusterDir, roster: Roster, timeout: float) -> set[str]:  # noqa: ASYNC109
    """The owners that answer a ping (each asked as itself) within `timeout` seconds."""
    answered: set[str] = set()

    async def ping(name: str) -> None:
        try:
            async with owner_session(roster, cdir.identity(name), name, None, timeout) as s:
                await s.request("ping")
        except PlanfenceError:
            return
        answered.add(name)

    async with collapsing_task_group() as tg:
        for name in roster.names:
            tg.start_soon(functools.partial(ping, name))
    return answered
