"""Ports of a cluster's owners: free ones to give out, taken ones and who holds them."""

from __future__ import annotations

import errno
import random
import socket
from pathlib import Path

from ..core.errors import ConfigError, PlanfenceError
from .folder import ClusterDir

FREE_PORTS_FROM = 10000  # free_port() draws from here to the ephemeral range


def free_port(host: str = "127.0.0.1") -> int:
    """A port free right now, for tests and --base-port 0, drawn at random from below the
    kernel's ephemeral range. A port from bind(0) is an ephemeral one: the next outgoing
    connection may take it as its local port before the owner binds it (seen once in the
    test suite, as a failed `cluster up`)."""
    below = _ephemeral_start() - 1
    for _ in range(64):
        port = random.randint(FREE_PORTS_FROM, below)
        if not port_in_use(host, port):
            return port
    with socket.socket() as s:  # everything tried was taken: let the OS choose
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (Linux; IANA's 49152 elsewhere)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152
    return max(low, FREE_PORTS_FROM + 1024)


def port_in_use(host: str, port: int) -> bool:
    """True when another socket listens on (or holds) host:port, so an owner cannot bind it.

    Binds the way the owner's listener does (SO_REUSEADDR), so a port that only lingers in
    TIME_WAIT counts as free.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise ConfigError(f"cannot use {host}:{port}: {exc.strerror or exc}") from None
    return False


def address_in_use(exc: BaseException) -> bool:
    """True when `exc` (or every leaf of an exception group) is "address already in use"."""
    if isinstance(exc, BaseExceptionGroup):
        return all(address_in_use(e) for e in exc.exceptions)
    return isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE


def port_holder(address: str) -> tuple[str, Path | None]:
    """Who holds `address`: ("owner NAME of the cluster in DIR (pid N)", DIR) when it is a
    planfence owner started from a cluster folder, else ("another program", None)."""
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            root = Path(argv[argv.index("serve") + 1])
            agent = argv[argv.index("--agent") + 1]
            if "owner" in argv and ClusterDir(root).roster().agent(agent).address == address:
                return f"owner {agent} of the cluster in {root} (pid {entry.name})", root
        except (OSError, ValueError, IndexError, PlanfenceError):
            continue
    return "another program", None


def check_port(name: str, host: str, port: int, remedy: str) -> None:
    """Raise ConfigError when agent `name`'s port is taken, naming who holds it and what to
    do: stop the holder, or `remedy` (how to give this cluster other ports)."""
    if not port_in_use(host, port):
        return
    holder, other = port_holder(f"{host}:{port}")
    stop = f"stop it (`planfence cluster down {other}`)" if other else "stop that program"
    raise ConfigError(
        f"port {port} of {name} ({host}:{port}) is already in use by {holder}; {stop}, or {remedy}"
    )
