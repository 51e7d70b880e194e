"""`planfence mcp proxy --cluster`: the facts read through the proxy served as an owner.

A six-agent cluster whose sixth member owns `db:*` runs nothing else; the proxy serves as
that member. Another member asks for heads with `planfence heads`, as any executor would.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomli_w

from planfence_net.cluster import processes as clusterlib
from support.cluster import PLANFENCE, ClusterHandle, run_planfence
from support.mcp_proxy import Agent, migrate, proxy_session, served

KEY = "db:resource/db://schema"


@pytest.fixture(params=["lazy", "subscribed"])
def proxied(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Agent, ClusterHandle, Path, Path]]:
    """A six-agent cluster whose sixth member owns db:* and is served by the proxy."""
    path = tmp_path / "cluster"
    clusterlib.init_cluster(path, agents=6, base_port=0)
    roster = tomllib.loads((path / "cluster.toml").read_text())
    roster["agents"][5]["owns"] = ["db:*"]
    (path / "cluster.toml").write_text(tomli_w.dumps(roster))
    handle = ClusterHandle(path, clusterlib.ClusterDir(path), clusterlib.ClusterDir(path).roster())
    with proxy_session(tmp_path, request.param, "--cluster", str(path), "--as", "agent6") as (
        agent,
        db,
        log,
    ):
        handle.wait_event("agent6", "listening")
        yield agent, handle, db, log


def head(h: ClusterHandle) -> dict[str, object]:
    out = run_planfence("heads", str(h.path), KEY, "--as", "planner", "--json").stdout
    (row,) = json.loads(out)
    return row


def test_a_read_becomes_a_record_and_heads_follow_the_server(proxied) -> None:  # type: ignore[no-untyped-def]
    agent, h, db, log = proxied
    subscribed = agent.mode == "subscribed"
    agent.read_schema()
    first = h.wait_event("agent6", "put", lambda e: e["key"] == KEY)
    assert head(h)["id"] == first["id"]
    # without a subscription every heads query reads the resource again; with one, never
    assert served(log, "resources/read") == (1 if subscribed else 2)
    migrate(db, ["id", "name", "email"])
    if subscribed:  # the server's notice moves the head at once, with no heads query
        second = h.wait_events("agent6", "put", 2, lambda e: e["key"] == KEY)[1]
        assert served(log, "resources/read") == 2
        assert head(h)["id"] == second["id"]
        assert served(log, "resources/read") == 2  # the heads query read nothing
    else:
        assert served(log, "resources/read") == 2  # nothing reads until somebody asks
        moved = head(h)
        assert served(log, "resources/read") == 3  # the heads query read it, lazily
        second = h.wait_events("agent6", "put", 2, lambda e: e["key"] == KEY)[1]
        assert moved["id"] == second["id"]
    assert first["id"] != second["id"]


def test_nobody_puts_a_fact_read_from_the_server(proxied) -> None:  # type: ignore[no-untyped-def]
    agent, h, db, log = proxied
    out = subprocess.run(
        [
            str(PLANFENCE),
            "put",
            str(h.path),
            KEY,
            "--body",
            '{"digest": "forged"}',
            "--as",
            "agent6",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode != 0
    assert "is read from the MCP server; nobody writes it" in out.stderr, out.stderr
