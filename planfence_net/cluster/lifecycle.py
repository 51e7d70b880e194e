"""Bringing a cluster folder's owners (and shapers) up as one step that either completes or
leaves nothing of its own behind, and stopping or starting one owner of a running cluster.

`bring_up` is `planfence cluster up`: it starts every owner that is not running, waits until
each answers, then puts a shaper in front of every owner for a shaped profile and waits
through them. With packet-level links (`links="packet"`, `packetlinks`) it first puts every
owner in a network namespace of its own behind a packet forwarder, starts the owners there
and waits for them through their links; no shaper runs then. When a start fails
(PlanfenceError) or the command is interrupted (Ctrl-C, any other exception), it stops what
it started, and only that: owners, shapers and packet links that ran before it stay.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import anyio

from ..core.errors import ConfigError, PlanfenceError, StartError, collapse
from .folder import ClusterDir
from .packetlinks import (
    forwarder_name,
    read_packet_links,
    start_packet_links,
    stop_packet_links,
)
from .pids import read_pid
from .processes import (
    owner_marker,
    running_pid,
    shaper_marker,
    shaper_name,
    start_owners,
    start_shapers,
    stop_process,
    stop_shapers,
)
from .ready import wait_cluster_ready


@dataclass(frozen=True, slots=True)
class Up:
    started: list[str]  # the owners this call started
    links: dict[str, tuple[str, int]]  # agent -> the shaper in front of it ({} on loopback)
    namespaces: dict[str, str] = field(default_factory=dict)  # agent -> its packet link's


class Interrupted(PlanfenceError):
    """`bring_up` was interrupted (Ctrl-C) and stopped what it had started (`stopped`)."""

    def __init__(self, stopped: list[str]) -> None:
        super().__init__(f"stopped what this command started: {', '.join(stopped) or 'nothing'}")
        self.stopped = stopped


def bring_up(
    cdir: ClusterDir,
    profile: str,
    *,
    delay_ms: int | None = None,
    loss: float = 0.0,
    timeout: float = 20.0,
    links: str = "relay",
) -> Up:
    """Start and wait as the module doc says; returns what it started. Raises ConfigError
    when a port is taken (starting nothing), when packet links cannot be made here or the
    folder runs other links than asked, PlanfenceError naming a failure and the owners it
    stopped, Interrupted on Ctrl-C, and any other exception as it is, each once it stopped
    what it started (packet links it made included)."""
    roster = cdir.roster()
    owners_before = running_owners(cdir)
    shapers_before = running_shapers(cdir)
    linked_before = bool(read_packet_links(cdir))
    _check_links(cdir, links, owners_before, linked_before)
    started: list[str] | None = None
    namespaces: dict[str, str] = {}
    try:
        if links == "packet":
            with deferred_sigint():
                namespaces = start_packet_links(cdir, profile, delay_ms=delay_ms, loss=loss)
        with deferred_sigint():  # a pid file for every process it spawns
            started = start_owners(cdir, namespaces=namespaces)  # a taken port: ConfigError
        _run(wait_cluster_ready, cdir, started, timeout)
        with deferred_sigint():
            shaped = "loopback" if links == "packet" else profile
            shapers = start_shapers(cdir, shaped, delay_ms=delay_ms, loss=loss)
        if shapers:
            _run(
                functools.partial(
                    wait_cluster_ready, cdir, roster.names, timeout, shapers, watch=shaper_name
                )
            )
    except PlanfenceError as exc:
        if started is None:
            if not linked_before:
                with ignored_sigint():
                    stop_packet_links(cdir)
            raise
        with ignored_sigint():
            stop_shapers(cdir)
            failed = exc.process if isinstance(exc, StartError) else None
            stopped = [
                name
                for name in started
                if stop_process(cdir, name, owner_marker(cdir, name))
                and name != failed  # one that failed to start is never called running
            ]
            if not linked_before:
                stop_packet_links(cdir)
        raise PlanfenceError(
            f"{exc} (stopped the owners this command started: "
            f"{', '.join(stopped) or 'none were running'})"
        ) from None
    except BaseException as exc:
        with ignored_sigint():
            stopped = [
                shaper_name(a)
                for a in sorted(running_shapers(cdir) - shapers_before)
                if stop_process(cdir, shaper_name(a), shaper_marker(roster.agent(a).address))
            ]
            stopped += [
                name
                for name in roster.names
                if name not in owners_before and stop_process(cdir, name, owner_marker(cdir, name))
            ]
            if not linked_before:
                stopped += [forwarder_name(agent) for agent in stop_packet_links(cdir)]
        if _interrupt(exc):
            raise Interrupted(stopped) from None
        raise
    return Up(started, shapers, namespaces)


def _check_links(cdir: ClusterDir, links: str, running: set[str], linked: bool) -> None:
    """Raise ConfigError when the folder's owners run on other links than `links` asks."""
    if links == "packet" and running and not linked:
        raise ConfigError(
            f"owners {', '.join(sorted(running))} of {cdir.root} run without packet links: "
            f"`planfence cluster down {cdir.root}` first"
        )
    if links != "packet" and linked:
        raise ConfigError(
            f"{cdir.root} runs on packet links: `planfence cluster down {cdir.root}` first "
            f"(or `cluster up --links packet`)"
        )


def running_owners(cdir: ClusterDir) -> set[str]:
    return {
        a.name
        for a in cdir.roster().agents
        if running_pid(cdir, a.name, owner_marker(cdir, a.name))
    }


def running_shapers(cdir: ClusterDir) -> set[str]:
    """The agents with a shaper of this folder running in front of them."""
    return {
        a.name
        for a in cdir.roster().agents
        if running_pid(cdir, shaper_name(a.name), shaper_marker(a.address))
    }


def stop_owner(cdir: ClusterDir, agent: str) -> int | None:
    """Stop `agent`'s owner (SIGTERM, SIGKILL after 10 s); its pid, or None when it was not
    running. Raises ConfigError for a name the roster does not have."""
    cdir.roster().agent(agent)
    pid = running_pid(cdir, agent, owner_marker(cdir, agent))
    stop_process(cdir, agent, owner_marker(cdir, agent))
    return pid


def start_owner(cdir: ClusterDir, agent: str, timeout: float = 20.0) -> tuple[int | None, bool]:
    """Start `agent`'s owner unless it runs, and wait until it answers; returns (its pid,
    whether this call started it). Raises PlanfenceError when it does not start in time."""
    cdir.roster().agent(agent)
    started = start_owners(cdir, only=[agent])
    _run(wait_cluster_ready, cdir, [agent], timeout)
    return read_pid(cdir, agent), bool(started)


def _interrupt(exc: BaseException) -> bool:
    """True for a KeyboardInterrupt, also inside a task group's exception group."""
    if isinstance(exc, BaseExceptionGroup):
        return any(_interrupt(e) for e in exc.exceptions)
    return isinstance(exc, KeyboardInterrupt)


def _run(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return anyio.run(fn, *args)
    except BaseExceptionGroup as group:  # one planfence error, not a tree
        raise collapse(group) from None


@contextlib.contextmanager
def deferred_sigint() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) that arrives inside the block until its end, so that a process
    spawned there always gets its pid file. Only the main thread receives signals; elsewhere
    this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        caught.append(signum)

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught and previous is signal.default_int_handler:
        raise KeyboardInterrupt
    if caught and callable(previous):
        previous(signal.SIGINT, None)


@contextlib.contextmanager
def ignored_sigint() -> Iterator[None]:
    """Ignore Ctrl-C inside the block (the clean-up after one must run to its end)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
