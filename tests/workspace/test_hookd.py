"""The hook's fast path answers exactly as the in-process hook, and falls back where it does
not apply.

Every test runs a real `planfence workspace serve` owner (127.0.0.1, its hook socket in the
session's state directory) and real `planfence hook` processes. "In-process" is the same
command with the owner's socket moved aside (`support.workspace.in_process`), which is what
the hook did before the fast path; the owner's log counts the calls it answered.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from planfence_net.workspace.hook import client as hookclient
from planfence_net.workspace.hook import run as hook
from support.cluster import PLANFENCE
from support.workspace import (
    hook_calls,
    hook_socket,
    in_process,
    make_repo,
    payload,
    run_cli,
    served,
    write,
)

FILES = {"auth.ts": "export const timeout = 30;\n", "src/b.ts": "export const b = 1;\n"}
OURS = {
    "planfence_net",
    "planfence_net.cli",
    "planfence_net.workspace",
    "planfence_net.workspace.place",
    "planfence_net.workspace.place.anchor",
    "planfence_net.workspace.place.paths",
    "planfence_net.workspace.hook",
    "planfence_net.workspace.hook.client",
    "planfence_net.workspace.installers",
    "planfence_net.workspace.installers.leanhook",  # where the sockets are
}


def hook_process(
    data: bytes | dict[str, Any], *args: str, env: dict[str, str] | None = None
) -> tuple[int, bytes, bytes]:
    """`planfence hook claude ARGS` as a fresh process: (exit code, stdout, stderr)."""
    stdin = data if isinstance(data, bytes) else json.dumps(data).encode()
    proc = subprocess.run(
        [str(PLANFENCE), "hook", "claude", *args],
        input=stdin,
        capture_output=True,
        timeout=30,
        env=env,
    )
    return proc.returncode, proc.stdout, proc.stderr


def both_ways(repo: Path, data: bytes | dict[str, Any], *args: str) -> tuple[int, bytes, bytes]:
    """The answer through the owner and in-process, asserted byte-identical; returns it."""
    before = hook_calls(repo)
    fast = hook_process(data, *args)
    assert hook_calls(repo) == before + 1  # the owner answered it
    with in_process(repo):
        slow = hook_process(data, *args)
    assert hook_calls(repo) == before + 1
    assert fast == slow
    return fast


def ask(sock: Path, header: dict[str, Any], data: bytes) -> bytes:
    """Speak the fast path's wire directly: the raw answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(20)
        conn.connect(str(sock))
        conn.sendall(json.dumps(header).encode() + b"\n" + data)
        conn.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def header(repo: Path, **changes: Any) -> dict[str, Any]:
    return {
        "v": hookclient.VERSION,
        "agent": "claude",
        "argv": [],
        "cluster": str(repo / ".planfence"),
        "exe": sys.executable,
        "env": hookclient.environment(),
        **changes,
    }


def test_every_kind_of_answer_is_the_same_through_the_owner(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        edit = payload("claude-edit", repo)
        no_plan = both_ways(repo, edit)
        assert no_plan[0] == 2 and b"no trusted plan for this session" in no_plan[2]
        assert run_cli("workspace", "trust", "fix", "--read", "src/b.ts", "--target", "auth.ts",
                       cwd=repo)[0] == 0  # fmt: skip
        assert both_ways(repo, edit) == (0, b"", b"")
        read = payload("claude-read", repo)
        assert both_ways(repo, read) == (0, b"", b"")
        unknown = {**edit, "tool_name": "mcp__fs__write_file", "tool_input": {"path": "a"}}
        assert (
            b"PlanFence does not know what mcp__fs__write_file changes"
            in (both_ways(repo, unknown)[2])
        )
        person = payload("claude-bash", repo, command="planfence workspace trust fix --fresh")
        assert b"--fresh lowers the plan's fence" in both_ways(repo, person)[2]
        assert both_ways(repo, edit, "--timeout", "5", "--plan", "fix") == (0, b"", b"")
        write(repo, {"src/b.ts": "export const b = 2;\n"})
        drift = both_ways(repo, edit)
        assert drift[0] == 2
        assert drift[2].startswith(
            f"PlanFence blocked Edit of {repo / 'auth.ts'}: plan 'fix' is stale (relevant "
            f"drift).\n".encode()
        )

        # Malformed stdin never reaches the owner from the client (it checks in-process);
        # sent directly, the owner's answer is the in-process hook's, byte for byte.
        sock = hook_socket(repo)
        for bad in (b"not json", b"", b"\xff\xfe", b"[1, 2]", json.dumps({"cwd": 1}).encode()):
            answer = json.loads(ask(sock, header(repo), bad))
            with in_process(repo):
                code, out, err = hook_process(bad)
            printed = (answer["stderr"].rstrip("\n") + "\n").encode()
            assert (answer["code"], answer["stdout"], printed) == (code, "", err), bad
            assert code == 2 and err.startswith(b"PlanFence blocked this call: unreadable")


def test_the_owner_reads_its_own_keys_in_process_with_the_sessions_verdict(
    tmp_path: Path,
) -> None:
    """The owner asks itself in-process (its log's `in_process`), and its answers, a drift's
    block included, are the session path's (the hook process asks the owner over a
    session)."""
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert run_cli("workspace", "trust", "fix", "--read", "src/b.ts", "--target", "auth.ts",
                       cwd=repo)[0] == 0  # fmt: skip
        edit = payload("claude-edit", repo)
        assert both_ways(repo, edit) == (0, b"", b"")
        write(repo, {"src/b.ts": "export const b = 2;\n"})
        drift = both_ways(repo, edit)
        assert drift[0] == 2 and b"is stale (relevant drift)" in drift[2]
    events = [
        json.loads(line)
        for line in (repo / ".planfence" / "logs" / "ws.jsonl").read_text().splitlines()
        if '"event":"hook"' in line
    ]
    assert len(events) == 2 and all(e["in_process"] > 0 for e in events), events


def test_where_the_fast_path_does_not_apply_the_hook_checks_in_process(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with served(repo):
        assert run_cli("workspace", "trust", "fix", "--target", "auth.ts", cwd=repo)[0] == 0
        edit = payload("claude-edit", repo)
        with in_process(repo):  # no socket: today's path, same answer
            assert hook_process(edit) == (0, b"", b"")
        assert hook_calls(repo) == 0
        # A user-scope hook in a folder no cluster serves lets the call through, in-process.
        away = {**edit, "cwd": str(elsewhere)}
        assert hook_process(away, "--scope", "user") == (0, b"", b"")
        # SessionStart (the join) and an environment the owner does not share: in-process.
        start = {"session_id": "s", "cwd": str(repo), "hook_event_name": "SessionStart"}
        assert hook_process(start) == (0, b"", b"")
        env = {**os.environ, "PLANFENCE_CLUSTER": str(repo / ".planfence")}
        assert hook_process(edit, env=env) == (0, b"", b"")
        usage = (
            2,
            b"",
            f"PlanFence blocked this call: the hook failed (ValueError: {hook.USAGE}); it fails closed\n".encode(),
        )
        assert hook_process(edit, "--bogus", "x") == usage
        deep = b"[" * 100_000  # RecursionError in json: the in-process hook's own answer
        fallback = hook_process(deep)
        with in_process(repo):
            assert fallback == hook_process(deep)
        assert fallback[0] == 2 and fallback[2].startswith(b"PlanFence blocked this call")
        assert hook_calls(repo) == 0
        assert hook_process(edit) == (0, b"", b"")
        assert hook_calls(repo) == 1
        # What the owner answers to a request it must not answer as the caller would.
        sock = hook_socket(repo)
        data = json.dumps(edit).encode()
        for changes, why in (
            ({"exe": "/elsewhere/python"}, "another installation"),
            ({"env": {**hookclient.environment(), "state": "/nowhere"}}, "another environment"),
            ({"cluster": str(tmp_path)}, "another cluster folder"),
            ({"v": 0}, "protocol version 0"),
        ):
            answer = json.loads(ask(sock, header(repo, **changes), data))
            assert list(answer) == ["fallback"] and answer["fallback"].startswith(why)
        assert hook_calls(repo) == 1


def test_the_fast_path_imports_only_the_standard_library(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert run_cli("workspace", "trust", "fix", "--target", "auth.ts", cwd=repo)[0] == 0
        bare = imported([sys.executable, "-X", "importtime", "-c", "pass"])
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", str(PLANFENCE), "hook", "claude"],
            input=json.dumps(payload("claude-edit", repo)).encode(),
            capture_output=True,
            timeout=30,
        )
        assert (proc.returncode, hook_calls(repo)) == (0, 1)
    modules = imported_from(proc.stderr.decode()) - bare
    ours = {m for m in modules if m.split(".")[0] == "planfence_net"}
    assert ours == OURS
    others = {m.split(".")[0] for m in modules - ours}
    assert sorted(others - set(sys.stdlib_module_names)) == []


def imported(argv: list[str]) -> set[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return imported_from(proc.stderr)


def imported_from(text: str) -> set[str]:
    return {
        line.rsplit("|", 1)[1].strip()
        for line in text.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def test_the_client_agrees_with_the_hook_on_options_and_the_default_timeout() -> None:
    assert hookclient.DEFAULT_TIMEOUT == hook.DEFAULT_TIMEOUT
    for option in hookclient.OPTIONS:
        value = "auto" if option == "--mode" else "1"
        hook._options([option, value])  # the hook knows every option the client passes on


# What reads the process environment among the modules `hook.decide` can reach (everything
# but the installer, `hook status` and Codex trust, which it never calls): each value is in
# what the client sends (`hookclient.environment`), so no answer depends on the owner's own.
ENVIRONMENT_READERS = {
    # $PLANFENCE_CLUSTER; Path.cwd() only as the default of `start` (decide passes the cwd)
    "workspace/place/anchor.py": ["os.environ", "Path.cwd"],
    "workspace/place/paths.py": ["os.environ", "expanduser"],  # state_dir(): XDG_STATE_HOME, HOME
    # the fence's own files: HOME, CODEX_HOME, XDG_CONFIG_HOME
    "workspace/place/guarded.py": ["os.environ", "expanduser", "Path.home"],
}
# installers; the clients themselves (the lean one sends the same variables:
# test_lean_hook.py); the owner, above the hook (its own settings, e.g. a test clock)
NOT_REACHED = (
    "workspace/installers/",
    "workspace/hook/client.py",
    "workspace/hook/lean.py",
    "workspace/owner/",
)


def test_every_environment_read_decide_can_reach_is_sent_by_the_client() -> None:
    package = Path(hook.__file__).resolve().parents[2]
    found = {}
    for layer in ("core", "protocol", "net", "cluster", "workspace"):
        for path in sorted((package / layer).rglob("*.py")):
            if str(path.relative_to(package)).startswith(NOT_REACHED):
                continue
            text = path.read_text()
            reads = [
                w
                for w in (
                    "os.environ",
                    "getenv",
                    "expanduser",
                    "Path.home",
                    "os.getcwd",
                    "Path.cwd",
                )
                if w in text
            ]
            if reads:
                found[str(path.relative_to(package))] = reads
    assert found == ENVIRONMENT_READERS
