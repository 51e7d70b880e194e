"""Cluster folders and owner processes under test: the installed `planfence`, process
helpers that wait for events (never sleep), and `ClusterHandle`."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planfence_net.cluster import processes as clusterlib
from planfence_net.cluster.folder import ClusterDir
from planfence_net.core.identity import Identity
from planfence_net.core.roster import Roster

REPO = Path(__file__).resolve().parents[2]
PLANFENCE = Path(sys.executable).parent / "planfence"


def interruptible_popen(argv: list[str], **kwargs: Any) -> subprocess.Popen[str]:
    """`subprocess.Popen(argv, text=True, **kwargs)` for a child a test will Ctrl-C: it gets
    SIGINT's default action even when this process ignores SIGINT (a test run started as a
    background job of a non-interactive shell does, and an ignored signal stays ignored
    through exec, so the child would never see the test's SIGINT)."""
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:  # a handler, unlike SIG_IGN, is reset to the default action by exec
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(argv, text=True, **kwargs)
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


OWNER_MARKER = "owner serve"
COMMAND_TIMEOUT = 30.0
EXIT_TIMEOUT = 15.0


# -- processes ----------------------------------------------------------------------------------


def wait_exit(pid: int, timeout: float = EXIT_TIMEOUT) -> bool:
    """Wait until process `pid` has exited (through a pidfd); True if it did within `timeout`.

    Works for children and non-children alike. A child that exited is not reaped here:
    `planfence_net.cluster.processes.process_alive` reaps the children `cluster up` spawned in-process.
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(fd)


def owner_processes(fragment: str) -> dict[int, str]:
    """Running (non-zombie) owner processes whose command line contains `fragment`: pid -> cmdline."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if state != "Z" and OWNER_MARKER in cmdline and fragment in cmdline:
            found[int(entry.name)] = cmdline.strip()
    return found


def kill_all(fragment: str) -> dict[int, str]:
    """SIGKILL every owner process whose command line contains `fragment`; returns them."""
    victims = owner_processes(fragment)
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        wait_exit(pid)
        _reap_if_child(pid)
    return victims


def _reap_if_child(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def run_planfence(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the installed `planfence` command; raises AssertionError with its output on failure."""
    proc = subprocess.run(
        [str(PLANFENCE), *args],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"planfence {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
        )
    return proc


# -- the cluster handle -------------------------------------------------------------------------


@dataclass
class ClusterHandle:
    """A cluster folder under test: its paths (`cdir`), its roster and process helpers.

    The process helpers block (they run commands or wait for exits); call them from sync code
    or accept that an async test's event loop pauses meanwhile.
    """

    path: Path
    cdir: ClusterDir
    roster: Roster

    def identity(self, name: str) -> Identity:
        """The agent's identity, loaded from its key file."""
        return self.cdir.identity(name)

    def port(self, name: str) -> int:
        return self.roster.agent(name).port

    def owner_pid(self, name: str) -> int:
        """Pid of the running owner of `name`; AssertionError if it is not running."""
        pid = clusterlib.running_pid(self.cdir, name, clusterlib.owner_marker(self.cdir, name))
        assert pid is not None, f"owner {name} is not running"
        return pid

    def alive(self, name: str) -> bool:
        """True when the pid recorded for `name` is a running owner."""
        return (
            clusterlib.running_pid(self.cdir, name, clusterlib.owner_marker(self.cdir, name))
            is not None
        )

    def kill9(self, name: str) -> int:
        """SIGKILL the owner of `name` and wait until it has exited; returns its pid."""
        pid = self.owner_pid(name)
        os.kill(pid, signal.SIGKILL)
        assert wait_exit(pid), f"owner {name} (pid {pid}) survived SIGKILL"
        assert not self.alive(name)  # also reaps it when this process spawned it
        return pid

    def up(self) -> str:
        """`planfence cluster up DIR` in a subprocess; returns its stdout once owners serve."""
        return run_planfence("cluster", "up", str(self.path)).stdout

    def restart(self) -> str:
        """Run `cluster up` again (starts owners that are not running); returns its stdout."""
        return self.up()

    def stop(self) -> dict[int, str]:
        """Stop every process of this cluster as `cluster down` does (shapers, then owners:
        SIGTERM, SIGKILL after a grace period), then SIGKILL any owner process still running
        from this folder. Returns the processes that had to be killed that way."""
        try:
            clusterlib.stop_shapers(self.cdir)
            clusterlib.stop_owners(self.cdir)
        finally:
            leftovers = kill_all(str(self.path.resolve()))
        return leftovers

    def log_path(self, name: str) -> Path:
        return self.cdir.log(name)

    def events(self, name: str, event: str | None = None) -> list[dict[str, Any]]:
        """Every event in the owner's log so far (optionally only those named `event`)."""
        try:
            lines = self.cdir.log(name).read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        entries = [json.loads(line) for line in lines if line.strip()]
        return [e for e in entries if event is None or e.get("event") == event]

    def wait_events(
        self,
        name: str,
        event: str,
        count: int,
        match: Callable[[dict[str, Any]], bool] = lambda e: True,
        timeout: float = 10.0,
    ) -> list[dict[str, Any]]:
        """Wait until the owner's log holds at least `count` `event`s satisfying `match`;
        returns all of them (so a test can also assert there are not more).

        The owner writes some lines after answering (a request's outcome follows its reply),
        and the log is written by another process, so this tails the file (as `logs --follow`
        does) until the lines appear; AssertionError after `timeout`.
        """
        deadline = time.monotonic() + timeout
        while True:
            found = [e for e in self.events(name, event) if match(e)]
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(found)} of {count} {event!r} events in {name}'s log "
                    f"after {timeout}s; last lines: {self.events(name)[-5:]}"
                )
            time.sleep(0.01)  # tailing a file another process appends to

    def wait_event(
        self,
        name: str,
        event: str,
        match: Callable[[dict[str, Any]], bool] = lambda e: True,
        timeout: float = 10.0,
    ) -> dict[str, Any]:
        """Wait for the first `event` satisfying `match` in the owner's log; returns it."""
        return self.wait_events(name, event, 1, match, timeout)[0]
