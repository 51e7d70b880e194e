"""The client session's bookkeeping, over a real loopback connection to a peer the test
drives by hand (it answers late, or never): requests given up by their waiters are forgotten."""

from __future__ import annotations

import anyio
import msgpack
import pytest

from planfence_net.core.errors import TransportError
from planfence_net.core.roster import Agent
from planfence_net.net import client
from planfence_net.net.client import Session
from planfence_net.protocol.messages import encode_response
from support.noise_pair import pair

pytestmark = pytest.mark.anyio
OWNER = Agent("reqs", "127.0.0.1", 0, bytes(32), ("req/*",))


async def test_a_request_given_up_is_forgotten_and_its_late_answer_dropped() -> None:
    async with pair(match_responses=True) as (stream, owner), anyio.create_task_group() as tg:
        session = Session(stream, OWNER)
        tg.start_soon(session.run_reader)
        with anyio.move_on_after(0.05):
            await session.request("ping")
        assert stream.requests == (0, 1)
        late = msgpack.unpackb(await owner.receive_message())
        await owner.send_message(encode_response(late[0], True, {"agent": "reqs"}))
        reply = await session.send_request("ping")  # the late answer comes first: dropped
        assert msgpack.unpackb(await owner.receive_message())[0] == reply.req_id == 2
        await owner.send_message(encode_response(2, True, {"agent": "reqs", "n": 2}))
        assert await reply.wait() == {"agent": "reqs", "n": 2}
        assert session.alive and stream.requests == (0, 0)
        tg.cancel_scope.cancel()


async def test_an_owner_that_leaves_too_many_requests_unanswered_loses_the_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client, "MAX_ABANDONED", 3)
    async with pair(match_responses=True) as (stream, owner), anyio.create_task_group() as tg:
        session = Session(stream, OWNER)
        tg.start_soon(session.run_reader)
        for _ in range(4):
            with anyio.move_on_after(0.02):
                await session.request("ping")
        assert not session.alive
        with pytest.raises(
            TransportError, match="^reqs left 3 requests unanswered past their deadlines$"
        ):
            await session.request("ping")
        assert stream.requests == (0, 4)  # the session is gone: nothing waits
        tg.cancel_scope.cancel()
