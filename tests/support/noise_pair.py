"""Two Noise streams joined over a fresh loopback connection, for tests of the session."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.abc import SocketAttribute
from nacl.bindings import crypto_scalarmult_base

from planfence_net.net.socketwire import accept_socket
from planfence_net.net.transport import NoiseStream, accept, connect
from planfence_net.protocol.session import Session

CLIENT_KEY, OWNER_KEY = bytes(range(1, 33)), bytes(range(33, 65))


@asynccontextmanager
async def pair(**client_options: object) -> AsyncIterator[tuple[NoiseStream, NoiseStream]]:
    """(client, owner) streams over a fresh loopback connection; both closed on exit. The
    client receives messages as they are (no response matching) unless told otherwise."""
    accepted: list[NoiseStream] = []
    ready = anyio.Event()

    async def serve(listening: socket.socket) -> None:
        sock, _ = await accept_socket(listening)
        owner = Session(initiator=False, cluster="t", static_private=OWNER_KEY)
        accepted.append(await accept(sock, owner, lambda key: True, None))
        ready.set()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(serve, listener.extra(SocketAttribute.raw_socket))
        client = await connect(
            "127.0.0.1",
            port,
            cluster="t",
            static_private=CLIENT_KEY,
            remote_static=crypto_scalarmult_base(OWNER_KEY),
            **{"match_responses": False, **client_options},  # type: ignore[arg-type]
        )
        await ready.wait()
        try:
            yield client, accepted[0]
        finally:
            await client.aclose()
            await accepted[0].aclose()
            tg.cancel_scope.cancel()
