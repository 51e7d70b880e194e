"""Bounded hook work (issue 28, H9): a payload over `client.MAX_PAYLOAD` is refused with its
reason before anything parses it (the fast path's client, the in-process hook, the owner);
the workspace owner decides hook calls concurrently, so one slow call never delays another
session's; and it gives up a call whose client's deadline has passed. Real processes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from planfence_net.workspace.hook import client as hookclient
from planfence_net.workspace.hook.run import decide
from support.cluster import PLANFENCE
from support.workspace import (
    in_process,
    make_repo,
    payload,
    run_cli,
    run_hook,
    served,
    served_team,
)

FILES = {"lib.py": "def f():\n    return 1\n", "main.py": "import lib\n"}
HUGE = 14 * 1024 * 1024  # the size that held the owner for 116 s before


def bash(repo: Path, command: str, session: str) -> dict[str, Any]:
    return {**payload("claude-bash", repo, command=command), "session_id": session}


def ask_owner(cluster: Path, call: dict[str, Any], left: float) -> bytes:
    """The workspace owner's answer to `call` sent as the client would, with `left` seconds
    of the client's deadline (and a --timeout of 40 s, so the check itself waits longer)."""
    header = {
        "v": hookclient.VERSION,
        "agent": "claude",
        "argv": ["--cluster", str(cluster), "--timeout", "40"],
        "cluster": str(cluster),
        "exe": sys.executable,
        "env": hookclient.environment(),
        "left": left,
    }
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(30)
        conn.connect(str(hookclient.socket_path(cluster)))
        conn.sendall(json.dumps(header).encode() + b"\n" + json.dumps(call).encode())
        conn.shutdown(socket.SHUT_WR)
        return conn.recv(65536)


def test_a_huge_payload_is_refused_unread_by_every_side(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    refused = hookclient.oversize() + "\n"
    assert refused.startswith(
        f"PlanFence blocked this call: its hook input is larger than {hookclient.MAX_PAYLOAD} "
        f"bytes, the most the hook reads, so it was refused unread."
    )
    huge = json.dumps(bash(repo, "echo " + "x" * HUGE, "s-huge")).encode()
    with served(repo):
        started = time.monotonic()
        assert run_hook("claude", huge, "--mode", "auto") == (2, refused)
        with in_process(repo):
            assert run_hook("claude", huge, "--mode", "auto") == (2, refused)
        assert time.monotonic() - started < 20  # not the 116 s a parse of it took
    # Refused before parsing: bytes that are not even JSON get the size's reason.
    answer = decide("claude", [], b"{" * (hookclient.MAX_PAYLOAD + 1))
    assert (answer.code, answer.stderr) == (2, hookclient.oversize())
    # Just under the cap it is read and checked as usual (here: not JSON).
    answer = decide("claude", [], b"{" * hookclient.MAX_PAYLOAD)
    assert answer.code == 2 and "unreadable hook input" in answer.stderr


def test_another_sessions_hook_answers_while_one_call_is_slow(tmp_path: Path) -> None:
    """Session B's check waits on the plan's owner (a listener that accepts and never
    answers, in the killed planner's place); meanwhile session A's call gets its answer
    from the same workspace owner within its own short deadline, as a huge payload is
    refused."""
    with served_team(tmp_path, FILES) as (handle, api, _web):
        cluster = ("--cluster", str(handle.path))
        code, out, err = run_cli(
            "workspace", "trust", "fix", "--session", "s-slow", "--read", "lib.py",
            "--target", "main.py", "--lockfiles", "none", *cluster, cwd=api,
        )  # fmt: skip
        assert code == 0, out + err
        planner = handle.roster.agent("planner")
        handle.kill9("planner")
        with socket.socket() as mute:
            mute.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            mute.bind((planner.host, planner.port))
            mute.listen()
            mute.settimeout(30)
            write = {
                **payload("claude-write", api),
                "session_id": "s-slow",
                "tool_input": {"file_path": str(api / "main.py"), "content": "x\n"},
            }
            slow = subprocess.Popen(
                [str(PLANFENCE), "hook", "claude", *cluster, "--timeout", "40"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            try:
                assert slow.stdin is not None
                slow.stdin.write(json.dumps(write).encode())
                slow.stdin.close()
                held, _ = mute.accept()  # B's check is under way, in the owner
                with held:
                    quick = bash(api, "cat lib.py", "s-quick")
                    assert run_hook("claude", quick, *cluster, "--timeout", "3") == (0, "")
                    huge = bash(api, "echo " + "x" * HUGE, "s-huge")
                    assert run_hook("claude", huge, *cluster) == (2, hookclient.oversize() + "\n")
                    assert run_hook("claude", quick, *cluster, "--timeout", "3") == (0, "")
                    # A call whose client's deadline passed is given up, unanswered.
                    assert ask_owner(handle.path, write, 0.5) == b""
                    server = next(
                        name
                        for name in ("api", "web")
                        if handle.events(name, "hookd")
                        and handle.events(name, "hookd")[0]["serving"]
                    )
                    gave_up = handle.wait_event(server, "hook_abandoned")
                    # at its 0.5 s deadline (an event loop may fire a timer a hair early)
                    assert gave_up["client"] == "claude" and 490 <= gave_up["ms"] < 5000
                assert slow.wait(60) == 2  # B's own answer: its plan's owner failed
            finally:
                if slow.poll() is None:
                    slow.kill()
                slow.wait()
                assert slow.stdout is not None and slow.stderr is not None
                slow.stdout.close()
                slow.stderr.close()
