"""Two Noise streams joined over a fresh loopback connection, for tests of the session."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from nacl.bindings import crypto_scalarmult_base

from planfence_net.net.transport import NoiseStream, connect

CLIENT_KEY, OWNER_KEY = bytes(range(1, 33)), bytes(range(33, 65))


@asynccontextmanager
async def pair() -> AsyncIterator[tuple[NoiseStream, NoiseStream]]:
    """(client, owner) streams over a fresh loopback connection; both closed on exit."""
    accepted: list[NoiseStream] = []
    ready = anyio.Event()

    async def handle(raw: anyio.abc.SocketStream) -> None:
        accepted.append(
            await NoiseStream.wrap(raw, initiator=False, cluster="t", static_private=OWNER_KEY)
        )
        ready.set()
        await anyio.sleep_forever()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        client = await connect(
            "127.0.0.1",
            port,
            cluster="t",
            static_private=CLIENT_KEY,
            remote_static=crypto_scalarmult_base(OWNER_KEY),
        )
        await ready.wait()
        try:
            yield client, accepted[0]
        finally:
            await client.aclose()
            await accepted[0].aclose()
            tg.cancel_scope.cancel()
