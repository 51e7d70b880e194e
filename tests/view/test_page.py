"""`planfence view` as a real process on 127.0.0.1: it refuses a request without its token
or with another Host, listens on the loopback address only, streams the rows as server-sent
events (a line appended to an owner's log reaches an open stream); `--json --once` prints
the same rows; the Claude Code status line that `hook install claude --statusline` writes
prints the team's status from the collector's file, else from the logs."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from support.cluster import PLANFENCE
from support.workspace import make_repo, run_cli, stop

from .scenario import A, view_page

pytestmark = pytest.mark.slow


def put(key: str, rid: str, seq: int, parents: list[str] | None = None) -> dict[str, Any]:
    return {"ts": time.time(), "agent": "planner", "event": "put", "key": key, "id": rid,
            "seq": seq, "kind": "plan", "parents": parents or []}  # fmt: skip


def block(plan: str, ts: float) -> dict[str, Any]:
    return {"ts": ts, "agent": "planner", "event": "check", "plan": plan, "source": "hook",
            "class": "critical", "exit": 2, "trust": 1, "changed_again": False, "record": "p1",
            "session": A, "subagent": None, "tool": "Edit", "files": ["src/a.py"],
            "lines": ["drift"]}  # fmt: skip


def append(cluster: Path, *lines: dict[str, Any]) -> None:
    with open(cluster / "logs" / "planner.jsonl", "a") as f:
        f.write("".join(json.dumps(line) + "\n" for line in lines))


@pytest.fixture
def cluster(tmp_path: Path) -> Path:
    """A cluster folder (no owner running: the view reads logs and asks owners only for
    bodies, which it then goes without) whose planner log holds one plan."""
    path = tmp_path / "cluster"
    code, out, err = run_cli("cluster", "init", path, "--agents", "1", "--base-port", "0")
    assert code == 0, out + err
    (path / "logs").mkdir(exist_ok=True)
    append(path, put("plan/alpha", "p1", 1))
    return path


def get(url: str, path: str, host: str | None = None) -> tuple[int, str]:
    where = urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": host} if host else {})
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    finally:
        conn.close()


def test_the_page_needs_its_token_and_a_loopback_host(cluster: Path) -> None:
    with view_page(cluster) as url:
        where = urlsplit(url)
        assert where.hostname == "127.0.0.1"
        token = where.query.removeprefix("token=")
        assert len(token) >= 32
        assert get(url, "/") == (
            403,
            "refused: this page needs the token in the URL `planfence view` printed\n",
        )
        assert get(url, "/?token=" + token[:-1] + "x")[0] == 403
        assert get(url, "/events")[0] == 403
        assert get(url, "/lineage?plan=alpha")[0] == 403
        code, page = get(url, f"/?token={token}")
        assert code == 200 and "<title>PlanFence · team view</title>" in page
        assert "http://" not in page.replace("http://www.w3.org", "")  # nothing fetched
        rebound = f"attacker.example:{where.port}"
        assert get(url, f"/?token={token}", host=rebound) == (
            421,
            "refused: not a loopback Host\n",
        )
        code, body = get(url, f"/lineage?token={token}&plan=alpha")
        assert code == 200 and json.loads(body)["text"] == ["plan/alpha  (planner seq 1, p1)"]


def test_the_page_listens_on_the_loopback_address_only(cluster: Path) -> None:
    outside = [address for address in local_addresses() if not address.startswith("127.")]
    if not outside:
        pytest.skip("this machine has no address but the loopback one")
    with view_page(cluster) as url:
        port = urlsplit(url).port
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((outside[0], port), timeout=5).close()


def test_the_stream_gives_every_row_then_each_change(cluster: Path) -> None:
    with view_page(cluster) as url:
        where = urlsplit(url)
        sock = socket.create_connection((where.hostname, where.port), timeout=10)
        stream = sock.makefile("rb")
        try:
            sock.sendall(
                f"GET /events?{where.query} HTTP/1.1\r\nHost: 127.0.0.1:{where.port}\r\n\r\n".encode()
            )
            assert stream.readline() == b"HTTP/1.1 200 OK\r\n"
            first = next_message(stream)
            assert {(r["type"], r["id"]) for r in first} >= {
                ("plan", "alpha"),
                ("status", "status"),
            }
            ts = time.time()
            append(cluster, block("alpha", ts))
            rows = next_message(stream)
            blocks = [r for r in rows if r["type"] == "block"]
            assert [(b["id"], b["session"], b["class"]) for b in blocks] == [
                (f"alpha@{ts}", A, "critical")
            ]
        finally:
            stream.close()
            sock.close()


def local_addresses() -> list[str]:
    """This machine's IPv4 addresses (`ip -4 addr`), or [] without iproute2."""
    try:
        out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    except FileNotFoundError:
        return []
    return [line.split()[3].split("/")[0] for line in out.splitlines() if len(line.split()) > 3]


def next_message(stream: Any) -> list[dict[str, Any]]:
    """The next `data:` message of a server-sent events stream (chunked framing skipped)."""
    while True:
        line = stream.readline()
        assert line, "the stream ended"
        if line.startswith(b"data: "):
            value: list[dict[str, Any]] = json.loads(line[6:])
            return value


def test_json_once_prints_the_rows(cluster: Path) -> None:
    append(cluster, block("alpha", 5.0))
    code, out, err = run_cli("view", "--cluster", cluster, "--json", "--once")
    assert (code, err) == (0, "")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["type"] for r in rows] == ["owner", "plan", "session", "block", "overlap", "status"]
    assert rows[-1]["text"] == "fence BLOCKED · 1 plan · 0 stale · 1 blocked"


def test_json_follows_the_logs(cluster: Path) -> None:
    proc = subprocess.Popen([str(PLANFENCE), "view", "--cluster", str(cluster), "--json"],
                            stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        assert proc.stdout is not None
        first = [json.loads(proc.stdout.readline()) for _ in range(4)]
        assert [r["type"] for r in first] == ["owner", "plan", "overlap", "status"]
        append(cluster, block("alpha", 6.0))
        rows = {}
        while "block" not in rows:
            row = json.loads(proc.stdout.readline())
            rows[row["type"]] = row
        assert (rows["block"]["id"], rows["block"]["tool"]) == ("alpha@6.0", "Edit")
    finally:
        stop(proc)


def test_the_statusline_hook_install_writes_prints_the_fence(cluster: Path, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.py": "x\n"})
    code, out, err = run_cli(
        "hook", "install", "claude", "--project", repo, "--cluster", cluster, "--command",
        "--statusline",
    )  # fmt: skip
    assert code == 0, out + err
    settings = json.loads((repo / ".claude" / "settings.local.json").read_text())
    line = settings["statusLine"]
    assert (line["type"], line["padding"]) == ("command", 0)
    assert line["command"].endswith(f" view --statusline --cluster {cluster.resolve()}")
    assert "PreToolUse" in settings["hooks"]

    def status(session: str) -> str:
        data = {"session_id": session, "workspace": {"current_dir": str(repo)}}
        proc = subprocess.run(line["command"], shell=True, input=json.dumps(data), cwd=repo,
                              capture_output=True, text=True, timeout=30)  # fmt: skip
        assert (proc.returncode, proc.stderr) == (0, "")
        return proc.stdout

    assert status(A) == "fence ok · 1 plan · 0 stale\n"  # no view running: from the logs
    append(cluster, block("alpha", time.time()))
    os.utime(cluster / "view" / "status.json", (0, 0))  # older than FRESH: folded again
    assert status(A) == "this session blocked · fence BLOCKED · 1 plan · 0 stale · 1 blocked\n"
    assert status("another") == "fence BLOCKED · 1 plan · 0 stale · 1 blocked\n"
    # A fresh status file (what a running `planfence view` keeps) is read as it is.
    (cluster / "view" / "status.json").write_text(json.dumps({"text": "fence ok · kept"}))
    assert status(A) == "fence ok · kept\n"
    # Installing again keeps one status line; someone else's is never replaced.
    assert run_cli("hook", "install", "claude", "--project", repo, "--cluster", cluster,
                   "--command", "--statusline")[0] == 0  # fmt: skip
    settings["statusLine"] = {"type": "command", "command": "my-own-line"}
    (repo / ".claude" / "settings.local.json").write_text(json.dumps(settings))
    code, out, err = run_cli("hook", "install", "claude", "--project", repo, "--statusline")
    assert code == 1
    assert err.endswith("already has a statusLine of its own; not replacing it\n")
    for agent, more in (("codex", ()), ("claude", ("--shared",))):
        code, out, err = run_cli("hook", "install", agent, "--project", repo, "--statusline", *more)
        assert (code, err) == (1, "error: --statusline is for a Claude Code install on this "
                               "machine (not --shared: the status line names this "
                               "installation's planfence)\n")  # fmt: skip


def test_errors_are_one_line(cluster: Path, tmp_path: Path) -> None:
    code, out, err = run_cli("view", "--cluster", tmp_path / "none", "--json", "--once")
    assert (code, out) == (1, "")
    assert err == f"error: no roster at {tmp_path / 'none' / 'cluster.toml'}\n"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out, err = run_cli("view", "--cluster", cluster, "--port", port)
    assert (code, out) == (1, "")
    assert err == f"error: cannot listen on 127.0.0.1:{port}: Address already in use\n"
