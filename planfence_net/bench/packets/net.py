"""One owner in a network namespace of its own behind a packet-level link.

    with PacketNet(profile="att-lte") as net:       # the namespace, the TUNs, the forwarder
        net.configure(delay_ms=30, loss=0.0, offset_ms=1200, seed=0)
        owner = net.start_owner(cdir, "reqs")       # `owner serve` inside the namespace
        ... connect to net.owner_ip from this process (the participant's side) ...
        net.counts()                                # packets each way, drops

The participant (this process, in the root namespace) reaches `owner_ip` through the TUN
device `near`; the owner's namespace reaches `client_ip` through `far`; the forwarder
(`traces/tunlink.py`, a process of its own, so this process's CPU never delays a packet,
here under the control of this process) moves every packet between them. The plumbing is
`cluster/netns.py`, as for `cluster up --links packet`: a /32 pair in 198.19.0.0/16 (RFC
2544's test range) on a /24 nothing else uses; every name starts with a prefix unique to the
run. `close` stops the owner and the forwarder and deletes the namespace, also after a
failure. Needs root (`available`).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import threading
from types import TracebackType
from typing import IO, Any

from ...cluster import netns
from ...cluster.folder import ClusterDir
from ...cluster.netns import available as available
from ..partition.run import stop_process

STOP_TIMEOUT = 10.0


class PacketNet:
    """The namespace, its two TUN devices and the forwarder (module docstring)."""

    def __init__(self, profile: str) -> None:
        self.prefix = f"pk{secrets.token_hex(3)}"
        self.namespace, self.near, self.far = (f"{self.prefix}{s}" for s in ("ns", "n", "f"))
        self.subnet = netns.free_subnets(1)[0]
        self.client_ip, self.owner_ip = netns.addresses(self.subnet)
        self.profile = profile
        self.forwarder: subprocess.Popen[str] | None = None
        self.owners: list[subprocess.Popen[str]] = []
        self.made = False

    def __enter__(self) -> PacketNet:
        try:
            self.open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def open(self) -> None:
        netns.add_namespace(self.namespace)
        self.made = True
        argv = [sys.executable, "-m", "planfence_net.traces.tunlink"]
        self.forwarder = subprocess.Popen(
            [*argv, self.near, self.far, "--profile", self.profile],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = _line(self.forwarder.stdout)
        if not line.startswith("ready "):
            raise RuntimeError(
                f"the packet forwarder did not start: {line or _err(self.forwarder)}"
            )
        netns.join(self.namespace, self.near, self.far, self.subnet)

    def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        """One command to the forwarder and its answer (see `tunlink`)."""
        assert self.forwarder is not None and self.forwarder.stdin is not None
        self.forwarder.stdin.write(json.dumps(command) + "\n")
        self.forwarder.stdin.flush()
        line = _line(self.forwarder.stdout)
        if not line:
            raise RuntimeError(f"the packet forwarder exited: {_err(self.forwarder)}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def configure(self, delay_ms: int, loss: float, offset_ms: int, seed: int) -> None:
        """New links both ways: the one-way delay, the loss rate and the trace phase."""
        self.ask({"delay_ms": delay_ms, "loss": loss, "offset_ms": offset_ms, "seed": seed})

    def counts(self) -> dict[str, Any]:
        return self.ask({"counts": True})

    def start_owner(
        self, cdir: ClusterDir, agent: str, options: tuple[str, ...] = ()
    ) -> subprocess.Popen[str]:
        """`owner serve` for `agent` (with `options`) inside the namespace; returns once it
        listens."""
        argv = [sys.executable, "-m", "planfence_net", "owner", "serve", str(cdir.root), *options]
        with open(cdir.out(agent), "wb") as log:  # its stderr, read back when it fails
            proc = subprocess.Popen(
                netns.exec_argv(self.namespace, [*argv, "--agent", agent]),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        self.owners.append(proc)
        line = _line(proc.stdout)
        if not line.startswith(f"owner {agent} listening on "):
            proc.wait(STOP_TIMEOUT)
            tail = cdir.out(agent).read_text(errors="replace").strip()[-400:]
            raise RuntimeError(f"owner {agent} did not start: {line} {tail}")
        # an unread pipe that fills would stop the owner at its next line: drain it
        threading.Thread(target=_drain, args=(proc.stdout,), daemon=True).start()
        return proc

    def close(self) -> None:
        for proc in [*self.owners, *([self.forwarder] if self.forwarder else [])]:
            if proc.stdin is not None:
                proc.stdin.close()  # the forwarder's cue to end
            stop_process(proc)
        self.owners, self.forwarder = [], None
        if self.made:
            netns.delete_namespace(self.namespace)
            self.made = False


def _drain(stream: IO[str] | None) -> None:
    if stream is not None:
        for _ in stream:
            pass


def _line(stream: IO[str] | None) -> str:
    return stream.readline().strip() if stream is not None else ""


def _err(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None or proc.stderr is None or proc.stderr.closed:
        return ""
    return proc.stderr.read().strip()[-400:]
