"""The trace shaper: a TCP relay that replays a link profile in each direction (anyio).

One `Shaper` is one shaped link. It accepts connections on a listen address and opens one
upstream connection per accepted one. All connections share the link: client -> upstream bytes
go through the uplink model (the profile's `.up` trace), upstream -> client bytes through the
downlink model (`.down`), both anchored at the moment the shaper starts serving, on a monotonic
clock in integer ms. The models live in `link.Link` (sans-IO); this module is the loop around
them: readers push bytes, one timer task per direction polls releases and hands them to the
connection's writer.

Backpressure instead of loss of stream bytes: a reader stops reading its socket while the
direction's bottleneck queue holds more than `queue_bytes` payload bytes (a read of up to
64 KiB may overshoot it once), or while its connection has more than `OUTBOX_BYTES` released
but unwritten bytes (the receiver is not reading). Not modelled: the TCP handshake's round
trip (the relay accepts at once and connects upstream unshaped) and reverse-direction ACKs.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import random
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import anyio.abc
from anyio.abc import SocketAttribute, SocketStream

from planfence_net.core.errors import ConfigError
from planfence_net.net.socketwire import accept_socket
from planfence_net.traces.link import DEFAULT_QUEUE_BYTES, Link, LinkStatistics
from planfence_net.traces.mmlink import Schedule
from planfence_net.traces.profiles import Profile, load_profile, load_trace

OUTBOX_BYTES = 4 * 1024 * 1024
CONNECT_TIMEOUT_S = 10.0
READ_BYTES = 65536
_CONNECTION_ERRORS = (OSError,)  # asyncio's streams raise ConnectionResetError and kin
# A relay of `Shaper.serve_routes`: upstream address, inward?, and the listener to accept on
# (None: bind a new one). anyio's create_tcp_listener returns a MultiListener, hence Listener.
Route = tuple[tuple[str, int], bool, anyio.abc.Listener[SocketStream] | None]


@dataclass(frozen=True, slots=True)
class ShaperStatistics:
    """Counters of one shaper; `uplink` is client -> upstream, `downlink` upstream -> client."""

    connections_total: int
    connections_open: int
    connect_failures: int
    uplink: LinkStatistics
    downlink: LinkStatistics


class _Signal:
    """A re-armable event: `fire` wakes every current waiter. Usable before a loop runs."""

    def __init__(self) -> None:
        self._event: anyio.Event | None = None

    def fire(self) -> None:
        if self._event is not None:
            self._event.set()
            self._event = None

    async def wait(self) -> None:
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()


class _Stream:
    """One relayed TCP connection on asyncio's streams: its reader stops reading the socket
    while READ_BYTES are unread (twice that at most), so a fast sender meets TCP
    backpressure instead of growing the relay's memory."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, host: str, port: int) -> _Stream:
        return cls(*await asyncio.open_connection(host, port, limit=READ_BYTES))

    @classmethod
    async def accepted(cls, sock: socket.socket) -> _Stream:
        return cls(*await asyncio.open_connection(sock=sock, limit=READ_BYTES))

    async def receive(self) -> bytes:
        """Up to READ_BYTES; b"" at the end of the stream."""
        return await self.reader.read(READ_BYTES)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    def send_eof(self) -> None:
        if self.writer.can_write_eof():
            self.writer.write_eof()

    def close(self) -> None:
        """Close at once (what is unsent is dropped)."""
        self.writer.transport.abort()


class _Outbox:
    """Released bytes of one connection and direction, waiting for its writer; b"" = EOF."""

    def __init__(self) -> None:
        self.chunks: deque[bytes] = deque()
        self.pending = 0
        self.ready = _Signal()

    def put(self, data: bytes) -> None:
        self.chunks.append(data)
        self.pending += len(data)
        self.ready.fire()


class _Direction:
    def __init__(self, link: Link) -> None:
        self.link = link
        self.outboxes: dict[int, _Outbox] = {}
        self.wake = _Signal()  # new bytes were pushed: the next event may have changed
        self.progress = _Signal()  # bytes left the queue or an outbox: readers may resume


class Shaper:
    """One shaped link to `upstream_host:upstream_port` (see the module docstring).

    The constructor loads the profile's traces and raises ConfigError if they are missing or
    invalid, before anything listens.
    """

    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        profile: str | Profile,
        *,
        offset_ms: int = 0,
        delay_ms: int | None = None,
        loss: float = 0.0,
        seed: int = 0,
        queue_bytes: int = DEFAULT_QUEUE_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.profile = load_profile(profile) if isinstance(profile, str) else profile
        delay = self.profile.delay_ms if delay_ms is None else delay_ms
        if delay < 0 or offset_ms < 0 or queue_bytes <= 0 or not 0.0 <= loss < 1.0:
            raise ConfigError(
                "shaper needs delay_ms >= 0, offset_ms >= 0, queue_bytes > 0 and 0 <= loss < 1; "
                f"got delay_ms={delay}, offset_ms={offset_ms}, queue_bytes={queue_bytes}, loss={loss}"
            )
        self.delay_ms = delay
        self._upstream = (upstream_host, upstream_port)
        self._queue_bytes = queue_bytes
        self._clock = clock
        self._t0: float | None = None
        self._ids = itertools.count()
        self._total = 0
        self._open = 0
        self._connect_failures = 0
        self.uplink = _Direction(self._link(self.profile.up, offset_ms, delay, loss, f"{seed}:up"))
        self.downlink = _Direction(
            self._link(self.profile.down, offset_ms, delay, loss, f"{seed}:down")
        )

    @staticmethod
    def _link(trace: str | None, offset_ms: int, delay: int, loss: float, seed: str) -> Link:
        schedule = None if trace is None else Schedule(load_trace(trace), offset_ms)
        return Link(schedule, delay_ms=delay, loss=loss, rng=random.Random(seed))

    def now_ms(self) -> int:
        """Milliseconds since the shaper started serving (its links' time base)."""
        if self._t0 is None:
            raise RuntimeError("the shaper has not started serving")
        return int((self._clock() - self._t0) * 1000)

    def statistics(self) -> ShaperStatistics:
        """Connection counters and both directions' link statistics."""
        return ShaperStatistics(
            connections_total=self._total,
            connections_open=self._open,
            connect_failures=self._connect_failures,
            uplink=self.uplink.link.statistics(),
            downlink=self.downlink.link.statistics(),
        )

    async def serve(
        self,
        listen_host: str,
        listen_port: int,
        *,
        task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen, report the bound port via `task_status.started`, relay until cancelled.

        Raises ConfigError if it cannot listen on the address.
        """
        try:
            listener = await anyio.create_tcp_listener(
                local_host=listen_host, local_port=listen_port
            )
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {listen_host}:{listen_port}: {exc.strerror or exc}"
            ) from exc
        async with listener, anyio.create_task_group() as tg:
            self._t0 = self._clock()
            tg.start_soon(self._run_direction, self.uplink)
            tg.start_soon(self._run_direction, self.downlink)
            task_status.started(listener.extra(SocketAttribute.local_port))
            await self._accept(listener, self._handle, tg)

    async def serve_routes(
        self,
        routes: list[Route],
        *,
        task_status: anyio.abc.TaskStatus[list[int]] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """One link, many relays: for each route `((host, port), inward, listener)` accept on
        `listener` (None: a new one on a free loopback port; a caller that must know a port
        before serving binds it itself, so no other process can take it in between) and relay
        to `host:port`; report the bound ports in order, relay until cancelled (closing every
        listener). Raises ConfigError if it cannot listen. Every route shares this shaper's two directions: an outward route (this
        side connects out) sends through the uplink, an inward route (the relay in front of
        this side's server) through the downlink, so one shaper is one agent's access link.
        """
        listeners: list[anyio.abc.Listener[SocketStream]] = []
        try:
            for _, _, given in routes:
                listeners.append(given or await anyio.create_tcp_listener(local_host="127.0.0.1"))
        except OSError as exc:
            for listener in listeners + [g for _, _, g in routes[len(listeners) :] if g]:
                await listener.aclose()
            raise ConfigError(f"cannot listen for a shaper route: {exc.strerror or exc}") from exc
        try:
            async with anyio.create_task_group() as tg:
                self._t0 = self._clock()
                tg.start_soon(self._run_direction, self.uplink)
                tg.start_soon(self._run_direction, self.downlink)
                for listener, (upstream, inward, _) in zip(listeners, routes, strict=False):
                    there, back = (
                        (self.downlink, self.uplink) if inward else (self.uplink, self.downlink)
                    )
                    tg.start_soon(
                        self._accept,
                        listener,
                        functools.partial(self._relay, upstream=upstream, there=there, back=back),
                        tg,
                    )
                task_status.started([lst.extra(SocketAttribute.local_port) for lst in listeners])
        finally:
            with anyio.CancelScope(shield=True):  # close them all, also when cancelled
                for listener in listeners:
                    await listener.aclose()

    def rephase(self, phase_ms: int) -> None:
        """From now on, replay both traces from trace time `phase_ms` (bytes already queued
        keep their place; they are served by the opportunities from the new phase on)."""
        now = self.now_ms()
        for direction in (self.uplink, self.downlink):
            direction.link.rephase(now, phase_ms)
            direction.wake.fire()

    async def _run_direction(self, direction: _Direction) -> None:
        """Timer loop: poll the link at each event and hand releases to the writers."""
        link = direction.link
        while True:
            for release in link.poll(self.now_ms()):
                outbox = direction.outboxes.get(release.tag)
                if outbox is not None:
                    outbox.put(release.data)
            direction.progress.fire()
            event_ms = link.next_event_ms()
            if event_ms is None:
                await direction.wake.wait()
                continue
            assert self._t0 is not None
            with anyio.move_on_after(max(0.0, self._t0 + event_ms / 1000 - self._clock())):
                await direction.wake.wait()

    @staticmethod
    async def _accept(
        listener: anyio.abc.Listener[SocketStream],
        relay: Callable[[socket.socket], object],
        tg: anyio.abc.TaskGroup,
    ) -> None:
        """Accept on every socket of `listener` until cancelled; relay each connection in
        `tg`."""

        async def accept_on(raw: socket.socket) -> None:
            while True:
                sock, _ = await accept_socket(raw)
                tg.start_soon(relay, sock)  # type: ignore[arg-type]

        async with anyio.create_task_group() as loops:
            for one in getattr(listener, "listeners", [listener]):
                loops.start_soon(accept_on, one.extra(SocketAttribute.raw_socket))

    async def _handle(self, sock: socket.socket) -> None:
        await self._relay(sock, self._upstream, self.uplink, self.downlink)

    async def _relay(
        self, sock: socket.socket, upstream: tuple[str, int], there: _Direction, back: _Direction
    ) -> None:
        """Relay one accepted connection: client -> upstream bytes through `there`,
        upstream -> client bytes through `back`."""
        tag = next(self._ids)
        self._total += 1
        try:
            client = await _Stream.accepted(sock)
        except BaseException as exc:
            sock.close()
            if isinstance(exc, OSError):
                return
            raise
        try:
            try:
                with anyio.fail_after(CONNECT_TIMEOUT_S):
                    server = await _Stream.connect(*upstream)
            except (OSError, TimeoutError):
                self._connect_failures += 1
                return
            self._open += 1
            boxes = (_Outbox(), _Outbox())
            there.outboxes[tag] = boxes[0]
            back.outboxes[tag] = boxes[1]
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._guard, tg, self._read, client, there, tag, boxes[0])
                    tg.start_soon(self._guard, tg, self._write, server, there, boxes[0])
                    tg.start_soon(self._guard, tg, self._read, server, back, tag, boxes[1])
                    tg.start_soon(self._guard, tg, self._write, client, back, boxes[1])
            finally:
                server.close()
                self._open -= 1
                for direction in (there, back):
                    del direction.outboxes[tag]
                    direction.link.forget(tag)
        finally:
            client.close()

    @staticmethod
    async def _guard(tg: anyio.abc.TaskGroup, func: Callable[..., object], *args: object) -> None:
        """Run one relay half; a broken or closed socket ends the whole connection."""
        try:
            await func(*args)  # type: ignore[misc]
        except _CONNECTION_ERRORS:
            tg.cancel_scope.cancel()

    async def _read(
        self, source: _Stream, direction: _Direction, tag: int, outbox: _Outbox
    ) -> None:
        link = direction.link
        while True:
            data = await source.receive()
            if not data:
                link.push_eof(self.now_ms(), tag)
                direction.wake.fire()
                return
            link.push(self.now_ms(), tag, data)
            direction.wake.fire()
            while link.queued_bytes > self._queue_bytes or outbox.pending > OUTBOX_BYTES:
                await direction.progress.wait()

    @staticmethod
    async def _write(sink: _Stream, direction: _Direction, outbox: _Outbox) -> None:
        while True:
            while not outbox.chunks:
                await outbox.ready.wait()
            parts: list[bytes] = []
            eof = False
            while outbox.chunks and not eof:
                part = outbox.chunks.popleft()
                eof = not part
                parts.append(part)
            data = b"".join(parts)
            if data:
                await sink.send(data)
            outbox.pending -= len(data)
            direction.progress.fire()
            if eof:
                sink.send_eof()
                return


async def serve_shaper(
    listen_host: str,
    listen_port: int,
    upstream_host: str,
    upstream_port: int,
    profile: str | Profile,
    *,
    offset_ms: int = 0,
    delay_ms: int | None = None,
    loss: float = 0.0,
    seed: int = 0,
    queue_bytes: int = DEFAULT_QUEUE_BYTES,
    task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve one shaped link until cancelled; reports the bound port via `task_status.started`.

    `delay_ms` None takes the profile's one-way delay. Raises ConfigError for an unknown
    profile, missing or invalid traces, bad parameters or an address it cannot listen on.
    """
    shaper = Shaper(
        upstream_host,
        upstream_port,
        profile,
        offset_ms=offset_ms,
        delay_ms=delay_ms,
        loss=loss,
        seed=seed,
        queue_bytes=queue_bytes,
    )
    await shaper.serve(listen_host, listen_port, task_status=task_status)
