"""Waiting for a cluster's owners to answer: after `cluster up`, before a bench run."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

from ..core.errors import PlanfenceError, StartError
from ..net.api import Addresses, wait_owner_ready
from ..net.client import collapsing_task_group
from .folder import ClusterDir
from .pids import last_error_line, process_alive, read_pid


async def wait_cluster_ready(
    cdir: ClusterDir,
    names: list[str],
    timeout: float = 20.0,  # noqa: ASYNC109 - the error names the owner that was late
    addresses: Addresses | None = None,
    *,
    watch: Callable[[str], str] = lambda name: name,
) -> None:
    """Wait until each named owner accepts an authenticated session (through `addresses`).

    `watch(name)` names the process whose exit means failure (the owner itself, or the
    shaper in front of it). Raises PlanfenceError naming it, with the tail of its output,
    when it exits or the owner does not answer within `timeout` seconds.
    """
    roster = cdir.roster()
    deadline = time.monotonic() + timeout

    async def wait_one(name: str) -> None:
        process = watch(name)
        pid = read_pid(cdir, process) or 0
        alive = functools.partial(process_alive, pid, "planfence_net")
        try:
            await wait_owner_ready(roster, cdir.identity(name), name, deadline, alive, addresses)
        except PlanfenceError as exc:
            said = last_error_line(cdir.out(process))
            raise StartError(process, f"{process} failed to start: {said or exc}") from None

    async with collapsing_task_group() as tg:
        for name in names:
            tg.start_soon(wait_one, name)


async def wait_owners_reachable(
    cdir: ClusterDir,
    names: list[str],
    timeout: float,  # noqa: ASYNC109 - the error names the owner that was late
    addresses: Addresses | None = None,
) -> None:
    """Wait until each named owner accepts an authenticated session (through `addresses`),
    for owners this process did not start (another host, a container); each is asked as
    itself. Raises TransportError naming the first owner still unreachable after `timeout` s.
    """
    roster, deadline = cdir.roster(), time.monotonic() + timeout
    async with collapsing_task_group() as tg:
        for name in names:
            tg.start_soon(
                functools.partial(
                    wait_owner_ready,
                    roster,
                    cdir.identity(name),
                    name,
                    deadline,
                    addresses=addresses,
                )
            )
