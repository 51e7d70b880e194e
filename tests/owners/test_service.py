"""An owner serves a `Service`: one table of operations, extended by rows, not subclasses.

Each test runs a real owner daemon in this process on its roster port (127.0.0.1) with the
service under test and talks to it through an ordinary client session.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from planfence_net.core.errors import RequestError
from planfence_net.core.records import record_from_wire
from planfence_net.net.client import open_session
from planfence_net.owners.daemon import OwnerDaemon
from planfence_net.owners.logs import EventLog
from planfence_net.owners.ops import owner_operations
from planfence_net.owners.service import Call, Operation, Service
from planfence_net.owners.startup import signer
from planfence_net.owners.store import Store
from planfence_net.protocol.messages import BadRequest, Request
from planfence_net.protocol.requestread import SCALAR
from support.cluster import ClusterHandle
from support.owner_client import DEADLINE

pytestmark = pytest.mark.anyio
OWNER = "reqs"


@asynccontextmanager
async def serving(h: ClusterHandle, service: Service) -> AsyncIterator[OwnerDaemon]:
    """`service` served as agent `reqs` on its roster port until the block ends."""
    identity = h.identity(OWNER)
    store = await Store.open(h.path / "service.db", signer(identity), OWNER)
    log = EventLog(h.path / "service.log", OWNER)
    daemon = OwnerDaemon(h.roster, identity, store, log, max_message=1 << 20, service=service)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(daemon.serve)
            yield daemon
            tg.cancel_scope.cancel()
    finally:
        await store.close()
        log.close()


def parse_echo(args: dict[str, Any]) -> str:
    text = args.get("text")
    if not isinstance(text, str):
        raise BadRequest("bad_request", "'text' must be a string")
    return text


async def echo(call: Call, text: str) -> dict[str, Any]:
    return {"text": text, "agent": call.owner.agent.name, "peer": call.connection.peer.name}


async def test_an_operation_is_one_row_plus_a_handler(cluster_dir: ClusterHandle) -> None:
    row = Operation("echo", {"text": SCALAR}, parse_echo, echo, inline=True)
    with anyio.fail_after(DEADLINE):
        async with serving(cluster_dir, owner_operations().with_rows(row)):
            async with open_session(cluster_dir.roster, cluster_dir.identity("ops"), OWNER) as s:
                assert await s.request("echo", {"text": "hi"}) == {
                    "text": "hi",
                    "agent": OWNER,
                    "peer": "ops",
                }
                with pytest.raises(RequestError) as info:
                    await s.request("echo", {"text": 5})
                assert (info.value.code, info.value.message) == (
                    "bad_request",
                    "'text' must be a string",
                )
                assert (await s.request("ping"))["agent"] == OWNER  # the others still served


async def test_an_op_without_a_row_is_unknown_not_stats(cluster_dir: ClusterHandle) -> None:
    """An op the table does not have is refused with a typed error; it used to fall through
    to `stats` when the reader knew it and the dispatch did not."""
    rows = [op for op in owner_operations().operations.values() if op.name != "stats"]
    with anyio.fail_after(DEADLINE):
        async with serving(cluster_dir, Service(rows)):
            async with open_session(cluster_dir.roster, cluster_dir.identity("ops"), OWNER) as s:
                with pytest.raises(RequestError) as info:
                    await s.request("stats")
                assert (info.value.code, info.value.message) == ("unknown_op", "unknown op 'stats'")
                assert (await s.request("ping"))["agent"] == OWNER


async def test_a_service_refuses_an_op_it_has_no_row_for() -> None:
    service = Service([Operation("echo", {"text": SCALAR}, parse_echo, echo)])
    call: Any = None  # never reached: the op is refused before its handler
    with pytest.raises(BadRequest) as info:
        await service.serve(call, Request(9, "stats", {}))
    assert (info.value.code, info.value.message, info.value.req_id) == (
        "unknown_op",
        "unknown op 'stats'",
        9,
    )
    assert service.schema == {"echo": {"text": SCALAR}}
    assert not service.inline("echo") and not service.inline("stats")


def test_two_rows_with_one_name_are_refused() -> None:
    row = Operation("echo", {}, parse_echo, echo)
    with pytest.raises(ValueError, match="operation 'echo' is in the table twice"):
        Service([row, row])


def test_the_owner_table_has_one_row_per_op_of_the_protocol() -> None:
    from planfence_net.protocol.messages import OPS
    from planfence_net.protocol.requestread import REQUESTS

    service = owner_operations()
    assert tuple(service.operations) == (
        "ping",
        "heads",
        "get",
        "put",
        "put_many",
        "subscribe",
        "ack",
        "synced",
        "stats",
    )
    assert set(service.operations) == set(OPS) and service.schema == REQUESTS
    assert {op for op in OPS if service.inline(op)} == {"ping", "heads", "stats", "ack"}


async def test_an_answer_without_waiting_belongs_to_its_handler(
    cluster_dir: ClusterHandle,
) -> None:
    """The owner answers an unchanged `heads` in the socket's callback through the handler's
    `answers_now`; a row whose handler is replaced loses it, so the replacement answers
    every request, unchanged heads included."""
    heads = owner_operations().operations["heads"]
    assert heads.now is not None and heads.repeatable

    async def observe(owner: Any, keys: list[str]) -> None:
        return None

    observing = owner_operations(observe=observe).operations["heads"]
    assert observing.now is None and not observing.repeatable  # heads waits for observe

    async def marked(call: Call, parsed: Any) -> dict[str, Any]:
        return {**await heads.handle(call, parsed), "marked": True}

    row = dataclasses.replace(heads, handle=marked)
    assert row.now is None
    with anyio.fail_after(DEADLINE):
        async with serving(cluster_dir, owner_operations().with_rows(row)):
            identity = cluster_dir.identity(OWNER)
            async with open_session(cluster_dir.roster, identity, OWNER) as s:
                put = await s.request("put", {"key": "req/x", "parents": [], "body": 1})
                asked = {"expect": {"req/x": put["id"]}, "short": True}
                for _ in range(3):
                    assert await s.request("heads", asked) == {
                        "heads": [["req/x", put["seq"]]],
                        "records": [],
                        "marked": True,
                    }


def test_a_request_line_written_field_by_field_is_the_generic_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "time", lambda: 1764612345.1234567)
    log = EventLog(tmp_path / "owner.log", 'r"eqs\u00e9')
    fields = {"peer": "pl\nan", "op": "heads", "keys": ["a/\u00e9", 'b"x'], "outcome": "ok"}
    for latency in (0.123, 12.0, 0.0):
        log.write_soon("request", **fields, latency_ms=latency)
        op_keys = log.request_fields(fields["op"], fields["keys"])  # type: ignore[arg-type]
        log.write_request_soon(fields["peer"], op_keys, "ok", latency)  # type: ignore[arg-type]
    log.close()
    lines = (tmp_path / "owner.log").read_text().splitlines()
    assert len(lines) == 6
    assert lines[0::2] == lines[1::2]
    assert json.loads(lines[1])["keys"] == ["a/\u00e9", 'b"x']


async def test_a_repeated_heads_is_answered_again_until_a_commit(
    cluster_dir: ClusterHandle,
) -> None:
    """The same heads (the same bytes after the req_id) is answered from the kept answer,
    with the asker's req_id, until the store commits: then it is read again and names the
    new head and its record."""
    with anyio.fail_after(DEADLINE):
        async with serving(cluster_dir, owner_operations()) as daemon:
            identity = cluster_dir.identity(OWNER)
            async with open_session(cluster_dir.roster, identity, OWNER) as s:
                first = await s.request("put", {"key": "req/x", "parents": [], "body": 1})
                asked = {"expect": {"req/x": first["id"]}, "short": True}
                for _ in range(3):
                    assert await s.request("heads", asked) == {
                        "heads": [["req/x", first["seq"]]],
                        "records": [],
                    }
                assert daemon.now.repeated == 2
                second = await s.request("put", {"key": "req/x", "parents": [], "body": 2})
                again = await s.request("heads", asked)
                assert again["heads"] == [["req/x", second["id"], second["seq"]]]
                assert [record_from_wire(r).id for r in again["records"]] == [second["id"]]
                assert daemon.now.repeated == 2
                unchanged = {"expect": {"req/x": second["id"]}, "short": True}
                for _ in range(2):
                    assert (await s.request("heads", unchanged))["heads"] == [
                        ["req/x", second["seq"]]
                    ]
                assert daemon.now.repeated == 3
    lines = (cluster_dir.path / "service.log").read_text().splitlines()
    heads = [json.loads(line) for line in lines if '"op":"heads"' in line]
    assert [(e["keys"], e["outcome"]) for e in heads] == [(["req/x"], "ok")] * 6
