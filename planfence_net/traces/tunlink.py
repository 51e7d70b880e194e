"""The packet forwarder: two TUN devices and a `traces.packetlink.PacketLink` each way.

    python -m planfence_net.traces.tunlink NEAR FAR --profile att-lte [--delay-ms 30]
            [--loss 0.01] [--offset-ms 1200] [--seed 7] [--detach]

It makes both devices and prints "ready NEAR FAR" (the caller then moves FAR into the
owner's namespace and gives both their addresses). Then, by default, it reads JSON lines on
stdin and exits when stdin closes, taking its devices with it:
        {"delay_ms": 30, "loss": 0.01, "offset_ms": 1200, "seed": 7}
                          new links both ways (answered {"ok": true})
        {"counts": true}  answered {"near_to_far": {...}, "far_to_near": {...}}
With `--detach` (`cluster up --links packet`) it reads nothing: its stdout goes to /dev/null
after the ready line, it forwards with the links its options give until SIGTERM, and on
SIGUSR1 it writes the `{"counts": true}` answer as one line to stderr.

Packets read from NEAR (the participant's side) cross the profile's `up` trace towards FAR
(the owner), packets from FAR cross `down` back: the participant is the mobile end, as in
the paper's Figure 2. Each direction has the one-way delay given (default: the profile's).
Needs root (TUN devices).
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import random
import signal
import struct
import sys
import time
from dataclasses import asdict

from ..core.errors import PlanfenceError
from .mmlink import Schedule
from .packetlink import PacketLink
from .profiles import load_profile, load_trace

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
MAX_PACKET = 65536


def open_tun(name: str) -> int:
    """A non-blocking file descriptor on a new TUN device `name` (raw IP packets)."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    except OSError:
        os.close(fd)
        raise
    return fd


class Forwarder:
    """Moves packets between two TUN descriptors through one `PacketLink` each way."""

    def __init__(self, near: int, far: int, profile: str) -> None:
        self.fds = (near, far)
        found = load_profile(profile)
        self.traces = tuple(load_trace(t) if t else None for t in (found.up, found.down))
        self.started = time.monotonic()
        self.links = self.make_links(0, 0.0, 0, 0)
        self.wake = asyncio.Event()
        self.lost_writes = 0

    def make_links(self, delay_ms: int, loss: float, offset_ms: int, seed: int) -> list[PacketLink]:
        """New links both ways whose traces are at trace time `offset_ms` now."""
        rng, now = random.Random(seed), self.now_ms()
        return [
            PacketLink(
                Schedule(trace, (offset_ms - now) % trace.period_ms) if trace else None,
                delay_ms=delay_ms,
                loss=loss,
                rng=random.Random(rng.random()),
            )
            for trace in self.traces
        ]

    def now_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    def readable(self, side: int) -> None:
        """Read every packet waiting on side 0 (near) or 1 (far) into its link."""
        now, link = self.now_ms(), self.links[side]
        while True:
            try:
                packet = os.read(self.fds[side], MAX_PACKET)
            except (BlockingIOError, InterruptedError):
                break
            if not packet:
                break
            link.push(now, packet)
        self.wake.set()

    async def pump(self) -> None:
        """Write out what each link releases, sleeping until the next release."""
        while True:
            now = self.now_ms()
            for side, link in enumerate(self.links):
                for packet in link.poll(now):
                    try:
                        os.write(self.fds[1 - side], packet)
                    except OSError:
                        # the device's queue is full (EAGAIN) or it is not up yet (EIO): the
                        # packet is lost, as on a wire, and TCP sends it again
                        self.lost_writes += 1
            times = [t for t in (link.next_event_ms() for link in self.links) if t is not None]
            self.wake.clear()
            timeout = max(0.0, (min(times) - self.now_ms()) / 1000) if times else None
            try:
                await asyncio.wait_for(self.wake.wait(), timeout)
            except TimeoutError:
                pass


async def serve(near_name: str, far_name: str, options: argparse.Namespace) -> None:
    near, far = open_tun(near_name), open_tun(far_name)
    forwarder = Forwarder(near, far, options.profile)
    forwarder.links = forwarder.make_links(
        options.delay_ms, options.loss, options.offset_ms, options.seed
    )
    loop = asyncio.get_running_loop()
    for side, fd in enumerate((near, far)):
        loop.add_reader(fd, forwarder.readable, side)
    print(f"ready {near_name} {far_name}", flush=True)
    try:
        if options.detach:
            null = os.open(os.devnull, os.O_WRONLY)  # whoever read the ready line may be gone
            os.dup2(null, sys.stdout.fileno())
            os.close(null)
            loop.add_signal_handler(signal.SIGUSR1, _say_counts, forwarder)
            await forwarder.pump()
        else:
            await controlled(forwarder)
    finally:
        for fd in (near, far):
            loop.remove_reader(fd)
            os.close(fd)


async def controlled(forwarder: Forwarder) -> None:
    """Forward while answering the JSON lines on stdin (module docstring), until it closes."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with asyncio.TaskGroup() as tg:  # a pump that fails ends the process, loudly
        pump = tg.create_task(forwarder.pump())
        while line := await reader.readline():
            print(json.dumps(answer(forwarder, json.loads(line))), flush=True)
        pump.cancel()


def _say_counts(forwarder: Forwarder) -> None:
    print(json.dumps(answer(forwarder, {"counts": True})), file=sys.stderr, flush=True)


def answer(forwarder: Forwarder, command: dict[str, object]) -> dict[str, object]:
    if command.get("counts"):
        near_to_far, far_to_near = (asdict(link.counts()) for link in forwarder.links)
        return {
            "near_to_far": near_to_far,
            "far_to_near": far_to_near,
            "lost_writes": forwarder.lost_writes,
        }
    delay, loss, offset, seed = (
        _number(command, name) for name in ("delay_ms", "loss", "offset_ms", "seed")
    )
    forwarder.links = forwarder.make_links(int(delay), loss, int(offset), int(seed))
    forwarder.wake.set()
    return {"ok": True}


def _number(command: dict[str, object], name: str) -> float:
    value = command.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return float(value)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m planfence_net.traces.tunlink", description=__doc__.split("\n")[0]
    )
    parser.add_argument("near", help="the participant's TUN device (made here)")
    parser.add_argument("far", help="the owner's TUN device (made here)")
    parser.add_argument("--profile", required=True, help="the link profile whose traces pace it")
    parser.add_argument(
        "--delay-ms", type=int, default=None, help="one-way delay (default: the profile's)"
    )
    parser.add_argument("--loss", type=float, default=0.0, help="loss probability each way")
    parser.add_argument("--offset-ms", type=int, default=0, help="the trace phase at start")
    parser.add_argument("--seed", type=int, default=0, help="draws the losses")
    parser.add_argument("--detach", action="store_true", help="no control on stdin")
    options = parser.parse_args(argv)
    if options.delay_ms is None:
        options.delay_ms = load_profile(options.profile).delay_ms
    return options


def main(argv: list[str]) -> int:
    try:
        options = parse(argv)
        asyncio.run(serve(options.near, options.far, options))
    except KeyboardInterrupt:
        return 0
    except (OSError, PlanfenceError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
