"""The MCP relay and a session's read set, without processes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from planfence_net.cli.main import app
from planfence_net.mcp.readset import ReadSet
from planfence_net.mcp.relay import (
    Changed,
    CheckWrite,
    Observed,
    Relay,
    Reread,
    ToClient,
    ToolPolicy,
    ToServer,
    digest_of,
)


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def test_a_write_call_is_held_until_allowed_or_refused() -> None:
    relay = Relay(ToolPolicy(reads="get_.*"))
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "put_row", "arguments": {"k": 1}},
    }
    (held,) = relay.from_client(line(call))
    assert held == CheckWrite(1, "put_row", {"k": 1})
    (refused,) = relay.refuse(1, "no")
    assert isinstance(refused, ToClient)
    assert json.loads(refused.line) == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {"content": [{"type": "text", "text": "no"}], "isError": True},
    }
    relay.from_client(line(call))
    (forwarded,) = relay.allow(2)
    assert isinstance(forwarded, ToServer) and json.loads(forwarded.line) == call
    read = {**call, "id": 8, "params": {"name": "get_row", "arguments": {}}}
    assert relay.from_client(line(read)) == [
        ToServer(json.dumps(read, separators=(",", ":")).encode() + b"\n")
    ]


def test_reads_are_observed_and_the_relays_own_answers_stay_inside() -> None:
    relay = Relay()
    ask = {"jsonrpc": "2.0", "id": "a", "method": "resources/read", "params": {"uri": "db://s"}}
    relay.from_client(line(ask))
    contents = [{"uri": "db://s", "mimeType": "text/plain", "text": "héllo"}]
    answer = line({"jsonrpc": "2.0", "id": "a", "result": {"contents": contents}})
    assert relay.from_server(answer) == [
        ToClient(answer),
        Observed("resource/db://s", digest_of(contents), "text/plain", 6),
    ]
    own = relay.reread("resource/db://s")
    rid = json.loads(own.line)["id"]
    assert rid == "planfence-1"
    changed = [{"uri": "db://s", "text": "new"}]
    assert relay.from_server(
        line({"jsonrpc": "2.0", "id": rid, "result": {"contents": changed}})
    ) == [Reread("resource/db://s", digest_of(changed), None, 3, None, "planfence-1")]
    note = line(
        {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "db://s"}}
    )
    assert relay.from_server(note) == [Changed("db://s")]  # the agent did not subscribe
    with pytest.raises(KeyError):
        relay.reread("resource/never-read")


def test_the_one_replan_rule_per_fact() -> None:
    reads = ReadSet("db")
    reads.observed("resource/s", "v1")
    assert reads.decide("put", {"resource/s": "v1"}).allowed
    first = reads.decide("put", {"resource/s": "v2"})
    assert (first.allowed, first.drifted, first.changed_again) == (False, ("resource/s",), False)
    reads.observed("resource/s", "v2")  # the re-read the refusal asked for
    assert reads.decide("put", {"resource/s": "v2"}).allowed
    again = reads.decide("put", {"resource/s": "v3"})
    assert (again.allowed, again.changed_again) == (False, True)
    unreadable = reads.decide("put", {"resource/s": None})
    assert not unreadable.allowed and "fails closed" in unreadable.reason


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--name", "x"], "Invalid value for COMMAND: give the MCP server's command after `--`"),
        (
            ["--name", "x", "--reads", "(", "--", "true"],
            "Invalid value for '--reads': '(' is not a regular expression: missing ), unterminated "
            "subpattern at position 0",
        ),
    ],
)
def test_usage_errors_say_what_is_wrong(args: list[str], error: str) -> None:
    result = CliRunner().invoke(app, ["mcp", "proxy", *args])
    assert result.exit_code == 64
    assert result.output.strip().splitlines()[-1] == f"Error: {error}"
