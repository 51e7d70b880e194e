"""The lean hook client (`hook/lean.py`, what Codex runs with `python -I -S`): answers exactly
as the ordinary hook does, through the owner; runs the ordinary hook where the owner does not
answer; blocks on every failure once a socket is there. And the owner answers hook calls
concurrently, each with its own answer, over warm sessions (one handshake for many calls).

Every test that needs an owner runs a real `planfence workspace serve`; the failures of an
owner (gone, silent, garbled) are a Unix socket this test holds.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planfence_net.workspace.clients.table import answered, normalized
from planfence_net.workspace.hook import client as hookclient
from planfence_net.workspace.hook import lean
from planfence_net.workspace.installers import httphook
from planfence_net.workspace.installers.leanhook import lean_line, lean_script
from support.cluster import PLANFENCE
from support.native_calls import calls
from support.workspace import hook_calls, hook_socket, make_repo, payload, run_cli, served

FILES = {"a.txt": "old\n", "notes.txt": "read\n"}
PATCH = "*** Begin Patch\n*** Update File: a.txt\n@@\n-old\n+new\n*** End Patch\n"


def run_lean(
    where: Path | str, data: bytes, *full: str, env: dict[str, str] | None = None
) -> tuple[int, bytes, bytes]:
    """The lean client as Codex runs it: (exit code, stdout, stderr)."""
    argv = [sys.executable, "-I", "-S", str(lean_script()), "--socket", str(where), *full]
    proc = subprocess.run(argv, input=data, capture_output=True, timeout=60, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def ordinary(data: bytes, *args: str) -> tuple[int, bytes, bytes]:
    proc = subprocess.run(
        [str(PLANFENCE), "hook", "codex", *args], input=data, capture_output=True, timeout=60
    )
    return proc.returncode, proc.stdout, proc.stderr


def script(path: Path, body: str) -> str:
    """An executable shell script at `path` (what the lean client runs in its place)."""
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def codex(name: str, repo: Path, **changes: Any) -> bytes:
    return json.dumps(payload(name, repo, **changes)).encode()


def test_its_constants_are_the_ordinary_clients() -> None:
    assert (lean.VERSION, lean.MAX_PAYLOAD, lean.GRACE, lean.DEFAULT_TIMEOUT) == (
        hookclient.VERSION,
        hookclient.MAX_PAYLOAD,
        hookclient.GRACE,
        hookclient.DEFAULT_TIMEOUT,
    )
    assert lean.ENVIRONMENT == httphook.ENVIRONMENT


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(st.characters(blacklist_categories=())),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
))  # fmt: skip
def test_its_json_is_json(value: Any) -> None:
    assert json.loads(lean._json(value)) == value


def test_it_answers_as_the_ordinary_hook_through_the_owner(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        sock = hook_socket(repo)
        full = (str(PLANFENCE), "hook", "codex")
        patch = codex("codex-apply-patch", repo, command=PATCH)
        read = codex("codex-bash", repo, command="cat notes.txt")
        person = codex("codex-bash", repo, command="planfence workspace trust p --fresh")
        for data, code in ((patch, 2), (read, 0), (person, 2)):
            before = hook_calls(repo)
            answer = run_lean(sock, data, *full)
            assert hook_calls(repo) == before + 1  # the owner answered it
            assert answer == ordinary(data)
            assert answer[0] == code, answer
        assert b"no trusted plan" in run_lean(sock, patch, *full)[2]
        assert run_cli("workspace", "trust", "p", "--target", "a.txt", cwd=repo)[0] == 0
        assert run_lean(sock, patch, *full) == (0, b"", b"") == ordinary(patch)


def test_where_the_owner_does_not_answer_it_runs_the_ordinary_hook(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    elsewhere = make_repo(tmp_path / "elsewhere", FILES)  # no cluster serves it
    echo = (script(tmp_path / "echo", "cat; exit 3"), "hook", "codex")  # shows its stdin
    with served(repo):
        sock = hook_socket(repo)
        patch = codex("codex-apply-patch", repo, command=PATCH)
        away = codex("codex-apply-patch", elsewhere, command=PATCH)
        start = {"session_id": "s", "cwd": str(elsewhere), "hook_event_name": "SessionStart"}
        join = json.dumps(start).encode()  # the join of an unserved worktree
        other_env = {**os.environ, "CODEX_HOME": str(tmp_path)}
        for data, env in ((away, None), (join, None), (patch, other_env)):
            assert run_lean(sock, data, *echo, env=env) == (3, data, b"")  # the whole payload
        assert hook_calls(repo) == 0
        # In a worktree it serves, the owner answers SessionStart and SessionEnd too.
        for event in ("SessionStart", "SessionEnd"):
            served_start = json.dumps({**start, "cwd": str(repo), "hook_event_name": event})
            assert run_lean(sock, served_start.encode(), *echo) == (0, b"", b"")
        assert hook_calls(repo) == 2
        big = b" " * (lean.MAX_PAYLOAD + 10)
        assert run_lean(sock, big, *echo) == (3, big, b"")
        # No socket there (no owner serves it): the ordinary hook, which checks in-process.
        assert run_lean(tmp_path / "none.sock", patch, str(PLANFENCE), "hook", "codex") == (
            ordinary(patch)
        )
        assert hook_calls(repo) == 4  # the ordinary client found the owner itself (twice)
    code, out, err = run_lean(tmp_path / "none.sock", patch, "/nonexistent/planfence", "hook")
    assert (code, out) == (2, b"") and b"could not start '/nonexistent/planfence'" in err


@contextmanager
def fake_owner(tmp_path: Path, answer: bytes | None) -> Iterator[Path]:
    """A hook socket (0600 in a 0700 folder) whose server reads each request and sends
    `answer` (None: listens but never answers, until the block ends)."""
    folder = tmp_path / "state" / "hookd"
    folder.mkdir(parents=True, mode=0o700)
    path = folder / "x.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    os.chmod(path, 0o600)
    server.listen()
    done = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            while conn.recv(65536):
                pass
            if answer is not None:
                conn.sendall(answer)
            else:
                done.wait(30)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        done.set()
        thread.join(30)
        server.close()


def test_once_a_socket_is_there_every_failure_blocks(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    data = codex("codex-apply-patch", repo, command=PATCH)
    full = (script(tmp_path / "allow", "exit 0"), "hook", "codex")  # must not run
    cases = [
        (b"nonsense", b"sent no valid answer"),
        (b"", b"closed the connection before answering"),
        (b"0 5 0\nabc", b"sent no valid answer"),  # cut off
        (b"2 0 0\n", b"sent no valid answer"),  # a block without a reason
        (b"1 0 0\n", b"sent no valid answer"),  # exit 1 would let the call run
    ]
    for n, (answer, why) in enumerate(cases):
        with fake_owner(tmp_path / str(n), answer) as path:
            code, out, err = run_lean(path, data, *full)
        assert (code, out) == (2, b"") and why in err, (answer, err)
        assert err.startswith(b"PlanFence blocked this call: the workspace owner's hook socket")
    with fake_owner(tmp_path / "slow", None) as path:
        code, _, err = run_lean(path, data, *full, "--timeout", "0.2")
    assert code == 2 and b"gave no answer within the hook's deadline" in err
    with fake_owner(tmp_path / "answers", b"0 2 0\nok") as path:
        assert run_lean(path, data, *full) == (0, b"ok\n", b"")
        os.chmod(path.parent, 0o755)
        code, _, err = run_lean(path, data, *full)
    assert code == 2 and b"is open to group or others (mode 755)" in err
    gone = tmp_path / "gone" / "state" / "hookd"
    gone.mkdir(parents=True, mode=0o700)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(gone / "x.sock"))  # bound, never listening: the owner is gone
    os.chmod(gone / "x.sock", 0o600)
    code, _, err = run_lean(gone / "x.sock", data, *full)
    assert code == 2 and b"refused the connection" in err


def test_the_owner_answers_concurrent_calls_each_its_own_over_warm_sessions(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert run_cli("workspace", "trust", "p", "--target", "a.txt", cwd=repo)[0] == 0
        sock = hook_socket(repo)
        full = (str(PLANFENCE), "hook", "codex", "--plan", "p")
        allowed = codex("codex-apply-patch", repo, command=PATCH)
        person = codex("codex-bash", repo, command="planfence workspace trust p --fresh")
        calls = [allowed, person] * 6
        with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
            answers = list(pool.map(lambda d: run_lean(sock, d, *full), calls))
        assert hook_calls(repo) == len(calls)
        assert answers[0::2] == [(0, b"", b"")] * 6
        blocked = ordinary(person, "--plan", "p")
        assert blocked[0] == 2 and answers[1::2] == [blocked] * 6
        log = (repo / ".planfence" / "logs" / "ws.jsonl").read_text().splitlines()
        events = [json.loads(line) for line in log]
        handshakes = sum(1 for e in events if e["event"] == "handshake")
        assert all("cpu_ms" in e for e in events if e["event"] == "hook")
        # each hook line names the call's event (what `planfence view` and the bench read)
        assert {e["hook_event"] for e in events if e["event"] == "hook"} == {"PreToolUse"}
        for _ in range(5):  # one at a time: each takes the session the one before gave back
            assert run_lean(sock, allowed, *full) == (0, b"", b"")
        log = (repo / ".planfence" / "logs" / "ws.jsonl").read_text().splitlines()
        assert sum(1 for line in log if '"event":"handshake"' in line) == handshakes


def test_install_writes_the_lean_line_where_a_cluster_serves_the_project(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    line = "/x/planfence hook codex --mode auto"
    assert lean_line(line, repo) == line  # no cluster serves it yet
    with served(repo):
        made = lean_line(line, repo)
        assert lean_line(line, None) == line  # a user-wide install names no one cluster
    assert made.endswith(f" --socket {hook_socket(repo)} {line}")
    assert made.startswith(f"{sys.executable} -I -S {lean_script()} ")


def native(client: str, repo: Path, which: str) -> bytes:
    """`client`'s own payload (`support.native_calls`) of a write of a.txt in `repo`, before
    it (`pre`) or after it (`post`)."""
    pair = calls(client, "s-1", str(repo)).write(str(repo / "a.txt"), "new\n")
    chosen = pair[0] if which == "pre" else pair[1]
    assert chosen is not None
    return json.dumps(chosen).encode()


def said(client: str, got: tuple[int, bytes, bytes]) -> str:
    """The reason the client reads in the hook's answer `got`: stderr, or in its JSON."""
    if not got[1]:
        return got[2].decode()
    value = json.loads(got[1])
    field = {"copilot": "permissionDecisionReason", "cursor": "agent_message"}.get(client)
    return str(value[field] if field else value["hookSpecificOutput"]["additionalContext"])


def printed(text: str) -> bytes:
    """`text` as the hook prints it (`client.write_answer`)."""
    return text.rstrip("\n").encode() + b"\n" if text else b""


@pytest.mark.parametrize(
    ("client", "which", "code"),
    [
        ("gemini", "pre", 2),  # exit 2 blocks, the reason on stderr (no fail-closed option)
        ("gemini", "post", 0),  # after a call exit 2 would replace its result: told, as context
        ("opencode", "pre", 2),  # our plugin throws on exit 2
        ("copilot", "pre", 0),  # a deny on stdout: it skips any exit code but 0
        ("cursor", "pre", 0),  # a deny permission on stdout
        ("windsurf", "pre", 2),
    ],
)
def test_every_failure_blocks_in_the_clients_own_form(
    tmp_path: Path, client: str, which: str, code: int
) -> None:
    """Owner garbled, gone mid-answer, silent, gone, or the ordinary hook not startable: each
    client gets a block in the form the ordinary hook gives it (its adapter's), and the
    command behind the lean client (which would allow) never runs."""
    repo = make_repo(tmp_path / "repo", FILES)
    data = native(client, repo, which)
    allow = (script(tmp_path / "allow", "exit 0"), "hook", client)

    def check(why: str, got: tuple[int, bytes, bytes]) -> None:
        reason = said(client, got).rstrip("\n")
        answer = answered(client, normalized(client, data), (2, reason, ""))
        assert got == (answer[0], printed(answer[2]), printed(answer[1]))
        assert got[0] == code and why in reason, got
        assert reason.startswith("PlanFence blocked this call: ") and "fails closed" in reason

    for n, (answer, why) in enumerate(
        [(b"nonsense", "sent no valid answer"), (b"", "closed the connection before answering")]
    ):
        with fake_owner(tmp_path / str(n), answer) as path:
            check(why, run_lean(path, data, *allow))
    with fake_owner(tmp_path / "slow", None) as path:
        check("gave no answer within", run_lean(path, data, *allow, "--timeout", "0.2"))
    gone = tmp_path / "gone" / "state" / "hookd"
    gone.mkdir(parents=True, mode=0o700)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(gone / "x.sock"))  # bound, never listening: the owner is gone
    os.chmod(gone / "x.sock", 0o600)
    check("refused the connection", run_lean(gone / "x.sock", data, *allow))
    unstartable = ("/nonexistent/planfence", "hook", client)
    check("could not start", run_lean(tmp_path / "none.sock", data, *unstartable))


def test_install_writes_the_lean_command_for_every_command_hook_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hook install CLIENT` writes the lean line where an owner serves the project (the
    ordinary one where none does, or user-wide), `hook status` says so, `hook uninstall`
    removes it."""
    from planfence_net.workspace.installers import clientstatus, hookfiles, opencodeplugin
    from planfence_net.workspace.installers.clients import hook_command

    monkeypatch.setenv("GEMINI_CLI_TRUST_WORKSPACE", "true")
    repo = make_repo(tmp_path / "repo", {**FILES, "README.md": "x\n"})
    clients = ("gemini", "copilot", "cursor", "windsurf")
    for client in clients:
        path = hookfiles.install(client, repo)
        assert "leanrun.py" not in path.read_text() and f"hook {client}" in path.read_text()
    with served(repo):
        lean = f"{sys.executable} -I -S {lean_script()} --socket {hook_socket(repo)} "
        for client in clients:
            path = hookfiles.install(client, repo)
            commands = {
                str(h.get("command") or h.get("bash"))
                for hs in clientstatus.found(client, [path]).values()
                for _, h in hs
            }
            assert commands == {lean + hook_command(client)}, commands
            status = clientstatus.client_status(client, repo)
            assert status.state == "active", status
            assert status.detail.startswith("the command runs; "), status
            assert status.detail.endswith(f"; {clientstatus.LEAN}"), status
        plugin = opencodeplugin.install(repo)
        assert f'const COMMAND = ["{sys.executable}", "-I", "-S", "{lean_script()}"' in (
            plugin.read_text()
        )
        status = opencodeplugin.status(repo)
        assert status.state == "active" and status.detail.endswith(clientstatus.LEAN), status
    for client in clients:
        assert hookfiles.uninstall(client, repo) == (hookfiles.config_path(client, repo), True)
        assert not hookfiles.config_path(client, repo).exists()  # nothing but ours was in it
    assert opencodeplugin.uninstall(repo) == (plugin, True) and not plugin.exists()


def test_its_fast_path_loads_no_adapter_for_any_client(tmp_path: Path) -> None:
    """The owner maps the other clients' payloads: on the way to an answer the lean client
    imports for each client what it imports for Codex, no adapter and nothing of ours."""
    repo = make_repo(tmp_path / "repo", FILES)
    flags = (sys.executable, "-I", "-S", "-X", "importtime")
    loaded: dict[str, set[str]] = {}
    with served(repo):
        lean = [*flags, str(lean_script()), "--socket", str(hook_socket(repo)), str(PLANFENCE)]
        for n, client in enumerate(("codex", "gemini", "copilot", "cursor", "windsurf")):
            data = codex("codex-apply-patch", repo, command=PATCH)
            if client != "codex":
                data = native(client, repo, "pre")
            loaded[client] = imported_by([*lean, "hook", client], data)
            assert hook_calls(repo) == n + 1  # the owner answered it
    assert "lean" in loaded["codex"] and "_socket" in loaded["codex"]
    assert not {"json", "socket", "planfence_net"} & loaded["codex"]
    assert all(modules == loaded["codex"] for modules in loaded.values()), loaded


def imported_by(argv: list[str], data: bytes) -> set[str]:
    """The modules `argv` (run with `-X importtime`) imported, fed `data` on stdin."""
    err = subprocess.run(argv, input=data, capture_output=True, timeout=60).stderr.decode()
    return {
        line.rsplit("|", 1)[1].strip()
        for line in err.splitlines()
        if line.startswith("import time:") and "|" in line and "cumulative" not in line
    }
