"""The raw-socket floor: the cheapest request/response Python can do on loopback.

A d = 1 heads request and its answer, as msgpack, each encrypted as one ChaCha20-Poly1305
frame with a 2-byte length, over TCP on asyncio with uvloop, with a bare `asyncio.Protocol` on
both sides (no Noise handshake, no task per request, no validation). It is what an
authorize could cost if the protocol did nothing but move the bytes, so the latency benchmark
prints it beside the real thing.

    python -m planfence_net.bench.perf.floor     # serves on 127.0.0.1, prints its port, runs until killed

`floor_servers(n)` starts n of them, each a process of its own, and `fan_out_round_trip`
asks them all at once: the floor of a plan whose keys n owners hold, on this machine.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import msgpack
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

KEY_UP, KEY_DOWN = bytes(range(32)), bytes(range(32, 64))
REQUEST = [0, "heads", {"keys": ["req/floor"], "expect": {"req/floor": bytes(32)}}]
ANSWER = {"heads": [["req/floor", bytes(32), 1]], "records": []}


class _Framed(asyncio.Protocol):
    """Splits the byte stream into 2-byte-length frames, decrypts each with its own key."""

    def __init__(self, receive_key: bytes, send_key: bytes) -> None:
        self._buffer = bytearray()
        # the protocol's own AEAD (protocol/noise.py), one object per direction
        self._receive, self._send = ChaCha20Poly1305(receive_key), ChaCha20Poly1305(send_key)
        self._received = self._sent = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while len(self._buffer) >= 2:
            length = int.from_bytes(self._buffer[:2], "big")
            if len(self._buffer) < 2 + length:
                return
            frame = bytes(self._buffer[2 : 2 + length])
            del self._buffer[: 2 + length]
            nonce = self._received.to_bytes(12, "little")
            self._received += 1
            self.message(msgpack.unpackb(self._receive.decrypt(nonce, frame, None)))

    def send(self, value: Any) -> None:
        nonce = self._sent.to_bytes(12, "little")
        self._sent += 1
        sealed = self._send.encrypt(nonce, msgpack.packb(value), None)
        assert self.transport is not None
        self.transport.write(len(sealed).to_bytes(2, "big") + sealed)

    def message(self, value: Any) -> None:
        raise NotImplementedError


class _Server(_Framed):
    def __init__(self) -> None:
        super().__init__(KEY_UP, KEY_DOWN)

    def message(self, value: Any) -> None:
        self.send([value[0], True, ANSWER])


class FloorClient(_Framed):
    """One connection to the floor server; `wait_round_trip()` times one request."""

    def __init__(self) -> None:
        super().__init__(KEY_DOWN, KEY_UP)
        self._waiter: asyncio.Future[Any] | None = None

    def message(self, value: Any) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(value)

    def ask(self) -> asyncio.Future[Any]:
        """Send one request; the future of its answer (one request at a time)."""
        self._waiter = asyncio.get_running_loop().create_future()
        self.send(REQUEST)
        return self._waiter

    async def wait_round_trip(self) -> float:
        """Send one request, wait for its answer; returns the seconds it took."""
        return await fan_out_round_trip((self,))


async def fan_out_round_trip(clients: Sequence[FloorClient]) -> float:
    """Ask every one of `clients` (each its own server) at once, wait for every answer;
    returns the seconds it took."""
    started = time.perf_counter()
    waiters = [client.ask() for client in clients]
    for waiter in waiters:
        if (await waiter)[2] != ANSWER:
            raise AssertionError("the floor server answered something else")
    return time.perf_counter() - started


async def connect_floor(port: int) -> FloorClient:
    loop = asyncio.get_running_loop()
    _, protocol = await loop.create_connection(FloorClient, "127.0.0.1", port)
    return protocol


@dataclass(frozen=True, slots=True)
class FloorServer:
    """A floor server process: where it listens, and its pid (for its CPU time)."""

    port: int
    pid: int


@contextmanager
def floor_servers(n: int) -> Iterator[list[FloorServer]]:
    """`n` floor servers on 127.0.0.1, each a process of its own. Every one is stopped when
    the block ends."""
    procs: list[subprocess.Popen[str]] = []
    try:
        for _ in range(n):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "planfence_net.bench.perf.floor"],
                    stdout=subprocess.PIPE,
                    stdin=subprocess.DEVNULL,
                    text=True,
                )
            )
        yield [FloorServer(int(_first_line(proc)), proc.pid) for proc in procs]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait()


def _first_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.strip():
        raise RuntimeError(f"a floor server exited before it listened (exit {proc.wait()})")
    return line


async def _serve() -> None:
    server = await asyncio.get_running_loop().create_server(_Server, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


def main() -> None:
    try:  # uvloop is optional: the floor uses it where it is installed
        import uvloop

        uvloop.run(_serve())
    except ImportError:
        asyncio.run(_serve())


if __name__ == "__main__":
    main()
