"""Looking into a running cluster: keys, records, history, lineage, shortened ids, restarting
one owner, reading a shaper's log; in-process against real owners on 127.0.0.1."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from planfence_net.cli.main import app
from planfence_net.cli.support import resolve_ids
from planfence_net.cluster.folder import ClusterDir
from planfence_net.core.errors import PlanfenceError
from planfence_net.owners.logs import EVENTS
from support.cluster import REPO, ClusterHandle


def run(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def ok_json(*args: object) -> object:
    result = run(*args, "--json")
    assert (result.exit_code, result.stderr) == (0, ""), (result.output, result.exception)
    return json.loads(result.stdout)


def error(*args: object) -> str:
    result = run(*args)
    assert (result.exit_code, result.stdout) == (1, ""), (result.output, result.exception)
    assert result.stderr.count("\n") == 1, result.stderr
    return result.stderr[:-1]


def put(path: Path, key: str, body: str, *parents: str, command: str = "put") -> str:
    args: list[object] = [command, path, key, "--body", body]
    for parent in parents:
        args += ["--parent", parent]
    rid = ok_json(*args)["id"]  # type: ignore[index]
    assert isinstance(rid, str)
    return rid


def test_keys_records_history_lineage_and_short_ids(live_cluster: ClusterHandle) -> None:
    path = live_cluster.path
    r1 = put(path, "req/a", '{"qty": 1}')
    r2 = put(path, "req/a", '{"qty": 2}', r1[:8])  # a parent by its 8-hex prefix
    stock = put(path, "inv/s", "40")
    plan = put(path, "plan/p", '["ship"]', r2[:12], stock, command="plan")

    assert ok_json("keys", path, "reqs") == [{"key": "req/a", "seq": 2, "id": r2, "versions": 2}]
    table = run("keys", path, "reqs").stdout.splitlines()
    assert [line.split() for line in table] == [
        ["key", "seq", "head", "versions"],
        ["req/a", "2", r2[:16], "2"],
    ]
    row = {"key": "req/a", "kind": "fact", "owner": "reqs"}
    assert ok_json("history", path, "req/a") == [
        {**row, "id": r1, "seq": 1, "parents": []},
        {**row, "id": r2, "seq": 2, "parents": [r1]},
    ]
    assert ok_json("records", path, "inventory") == [
        {"id": stock, "key": "inv/s", "seq": 1, "kind": "fact", "owner": "inventory", "parents": []}
    ]
    assert ok_json("records", path, "reqs", "--key", "req/a") == ok_json("history", path, "req/a")

    walked = ok_json("lineage", path, plan[:10])
    assert [(r["depth"], r["id"]) for r in walked] == [  # type: ignore[index]
        (0, plan),
        (1, r2),
        (1, stock),
        (2, r1),
    ]
    assert [
        (r["depth"], r["id"])
        for r in ok_json(  # type: ignore[index]
            "lineage", path, plan, "--depth", "1"
        )
    ] == [(0, plan), (1, r2), (1, stock)]

    assert [r["id"] for r in ok_json("get", path, r1[:8], stock[:9].upper())] == [r1, stock]  # type: ignore[index]
    missing = "cd" * 32
    assert error("plan", path, "plan/q", "--body", "1", "--parent", missing) == (
        f"error: --parent: no owner has record {missing}"
    )
    assert error("get", path, "0123abcd") == (
        f"error: no record id starts with 0123abcd in the stores under {path / 'data'}"
    )
    assert error("history", path, "req/never") == "error: reqs holds no record of 'req/never'"


def test_an_ambiguous_id_prefix_is_refused(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    ids = [bytes.fromhex("aabbccdd" + "00" * 28), bytes.fromhex("aabbccdd" + "11" * 28)]
    with sqlite3.connect(tmp_path / "data" / "x.sqlite") as db:
        db.execute(
            "CREATE TABLE records (id BLOB PRIMARY KEY, key TEXT, owner TEXT, seq INT, wire BLOB)"
        )
        db.executemany("INSERT INTO records (id) VALUES (?)", [(i,) for i in ids])
    db.close()
    cdir = ClusterDir(tmp_path)
    assert resolve_ids(cdir, ["aabbccdd0"]) == [ids[0]]
    with pytest.raises(PlanfenceError) as caught:
        resolve_ids(cdir, ["AABBCCDD"])
    assert str(caught.value) == (
        "id prefix AABBCCDD is ambiguous: 2 records match "
        "(aabbccdd00000000, aabbccdd11111111); give more hex digits"
    )
    with pytest.raises(click.BadParameter):
        resolve_ids(cdir, ["aabbccd"])  # too short to be a prefix


def test_restart_one_owner_and_read_a_shaper_log(live_cluster: ClusterHandle) -> None:
    path = live_cluster.path
    rid = put(path, "req/a", "1")
    old = live_cluster.owner_pid("reqs")
    restarted = ok_json("owner", "restart", path, "reqs")
    assert restarted == {
        "agent": "reqs",
        "pid": live_cluster.owner_pid("reqs"),
        "was_running": True,
    }
    assert restarted["pid"] != old  # type: ignore[index]
    assert ok_json("heads", path, "req/a")[0]["id"] == rid  # type: ignore[index]
    assert live_cluster.owner_pid("planner")  # the others were left alone

    bad_event = run("logs", path, "reqs", "--event", "nosuchevent")  # a usage error
    assert (bad_event.exit_code, bad_event.stdout) == (64, "")
    assert bad_event.stderr.splitlines()[-1] == (
        f"Error: Invalid value for '--event': unknown event 'nosuchevent'; "
        f"owners log: {', '.join(EVENTS)}"
    )
    assert error("logs", path, "reqs", "--shaper") == (
        f"error: no shaper output for reqs yet at {path / 'run' / 'shaper-reqs.out'}"
    )
    up = run("cluster", "up", path, "--profile", "synthetic-lte", "--delay-ms", "1")
    assert up.exit_code == 0, up.output
    link = ok_json("cluster", "status", path)[1]["shaper"]["address"]  # type: ignore[index]
    lines = run("logs", path, "reqs", "--shaper").stdout.splitlines()
    assert lines == [
        f"shaping {link} -> {live_cluster.roster.agent('reqs').address} with "
        f"profile synthetic-lte (one-way delay 1 ms)"
    ]
    assert ok_json("logs", path, "reqs", "--shaper") == {"agent": "reqs", "line": lines[0]}


def test_every_event_an_owner_writes_is_known_to_logs() -> None:
    """`logs --event` refuses names outside EVENTS: the list must hold every event written."""
    import re

    root = REPO / "planfence_net" / "owners"
    written = {
        m
        for p in root.glob("*.py")
        for m in re.findall(r"(?:log\.write|stranger_event)\(\s*\"([a-z_]+)\"", p.read_text())
    }
    assert written and written <= set(EVENTS), written - set(EVENTS)


def test_keys_with_newlines_and_terminal_escapes_are_printed_escaped(
    live_cluster: ClusterHandle,
) -> None:
    """A key is chosen by whoever writes it: in text output its newline and terminal escape
    are backslash escapes and rich markup is shown as written, never interpreted."""
    path = live_cluster.path
    key = "req/a\nforged line\x1b[31mred[bold]x[/bold]\\"
    rid = put(path, key, "1")
    shown = "req/a\\x0aforged line\\x1b[31mred[bold]x[/bold]\\\\"
    out = run("keys", path, "reqs").stdout
    assert [line.rstrip() for line in out.splitlines()] == [
        "key" + " " * (len(shown) - 1) + "seq  head              versions",
        f"{shown}  1    {rid[:16]}  1",
    ]
    assert "\x1b" not in run("history", path, key).stdout
    written = run("put", path, key, "--body", "2").stdout
    assert written.startswith(f"{shown} seq 2 id ") and written.count("\n") == 1


def test_an_error_an_owner_sent_is_printed_as_one_escaped_line() -> None:
    from planfence_net.cli.support import user_errors
    from planfence_net.cli.text import escaped_lines
    from planfence_net.core.errors import RequestError

    @user_errors
    def fail() -> None:
        raise RequestError("bad_request", "x\n\x1b[2Jforged")

    result = CliRunner().invoke(click.command()(fail), [])
    assert (result.exit_code, result.stderr) == (1, "error: bad_request: x\\x0a\\x1b[2Jforged\n")
    assert escaped_lines("ship: blocked\n  \x1b[31mdetail") == "ship: blocked\n  \\x1b[31mdetail"
