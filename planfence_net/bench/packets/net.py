"""One owner in a network namespace of its own behind a packet-level link.

    with PacketNet(profile="att-lte") as net:       # the namespace, the TUNs, the forwarder
        net.configure(delay_ms=30, loss=0.0, offset_ms=1200, seed=0)
        owner = net.start_owner(cdir, "reqs")       # `owner serve` inside the namespace
        ... connect to net.owner_ip from this process (the participant's side) ...
        net.counts()                                # packets each way, drops

The participant (this process, in the root namespace) reaches `owner_ip` through the TUN
device `near`; the owner's namespace reaches `client_ip` through `far`; the forwarder
(`tunlink`, a process of its own, so this process's CPU never delays a packet) moves every
packet between them. Addresses are a /32 pair in 198.19.0.0/16 (RFC 2544's test range) drawn
per run; every name starts with a prefix unique to the run. `close` stops the owner and the
forwarder and deletes the namespace, also after a failure. Needs root (`available`).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from ...cluster.folder import ClusterDir
from ..partition.netns import available as netns_available
from ..partition.netns import ip

STOP_TIMEOUT = 10.0


def available() -> str | None:
    """None when packet-level links can be made here, else one line saying why not."""
    why = netns_available()
    if why is None and not Path("/dev/net/tun").exists():
        why = "packet-level links need /dev/net/tun"
    return why


class PacketNet:
    """The namespace, its two TUN devices and the forwarder (module docstring)."""

    def __init__(self, profile: str) -> None:
        self.prefix = f"pk{secrets.token_hex(3)}"
        self.namespace, self.near, self.far = (f"{self.prefix}{s}" for s in ("ns", "n", "f"))
        subnet = secrets.randbelow(250) + 1
        self.client_ip, self.owner_ip = f"198.19.{subnet}.1", f"198.19.{subnet}.2"
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
        ip("netns", "add", self.namespace)
        self.made = True
        ip("-n", self.namespace, "link", "set", "lo", "up")
        argv = [sys.executable, "-m", "planfence_net.bench.packets.tunlink"]
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
        ip("link", "set", self.far, "netns", self.namespace)
        ip("addr", "add", f"{self.client_ip}/32", "dev", self.near)
        ip("link", "set", self.near, "up")
        ip("route", "add", f"{self.owner_ip}/32", "dev", self.near)
        ip("-n", self.namespace, "addr", "add", f"{self.owner_ip}/32", "dev", self.far)
        ip("-n", self.namespace, "link", "set", self.far, "up")
        ip("-n", self.namespace, "route", "add", f"{self.client_ip}/32", "dev", self.far)

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
                ["ip", "netns", "exec", self.namespace, *argv, "--agent", agent],
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
                proc.stdin.close()
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        self.owners, self.forwarder = [], None
        if self.made:
            ip("netns", "del", self.namespace)
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
