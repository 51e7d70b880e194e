"""The workspace owner's HTTP door for Claude Code's http hooks: every call it answers is the
hook's own decision, and everything else is an answer Claude Code blocks on (a non-2xx
status, or a deny), or no connection at all.

Every test runs a real `planfence workspace serve` owner on 127.0.0.1 and speaks HTTP/1.1 to
its recorded port with the standard library's client.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from pathlib import Path
from typing import Any

from planfence_net.workspace.hook.client import MAX_PAYLOAD
from planfence_net.workspace.installers import httphook
from planfence_net.workspace.owner import httpd
from support.workspace import make_repo, payload, run_cli, served, write

FILES = {"auth.ts": "export const timeout = 30;\n", "src/b.ts": "export const b = 1;\n"}
DENY_DRIFT = "plan 'fix' is stale (relevant drift)"


def cluster_of(repo: Path) -> Path:
    return repo / ".planfence"


def port_of(repo: Path) -> int:
    port = httphook.served_port(cluster_of(repo), "ws")
    assert port is not None
    return port


def post(
    repo: Path, body: bytes, *, key: str | None, query: str = "mode=explicit", **headers: str
) -> tuple[int, Any]:
    """POST `body` to the owner's door: (status, parsed JSON body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port_of(repo), timeout=20)
    try:
        sent = {"Content-Type": "application/json", **environment(), **headers}
        if key is not None:
            sent[httphook.HEADER] = key
        conn.request("POST", f"{httphook.PATH}?{query}", body=body, headers=sent)
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        conn.close()


def environment() -> dict[str, str]:
    """The environment headers Claude Code sends, with this process's (the owner's) values."""
    return {httphook.ENV_HEADER + n: os.environ.get(n, "") for n in httphook.ENVIRONMENT}


def deny_reason(answer: Any) -> str:
    output = answer["hookSpecificOutput"]
    assert (output["hookEventName"], output["permissionDecision"]) == ("PreToolUse", "deny")
    return str(output["permissionDecisionReason"])


def test_the_door_answers_with_the_hooks_decision(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        key = httphook.ensure_secret(cluster_of(repo))
        edit = json.dumps(payload("claude-edit", repo)).encode()
        status, answer = post(repo, edit, key=key)
        assert status == 200 and "no trusted plan for this session" in deny_reason(answer)
        assert run_cli("workspace", "trust", "fix", "--read", "src/b.ts", "--target", "auth.ts",
                       cwd=repo)[0] == 0  # fmt: skip
        assert post(repo, edit, key=key) == (200, {})  # allowed: no objection
        write(repo, {"src/b.ts": "export const b = 2;\n"})
        status, answer = post(repo, edit, key=key)
        assert status == 200
        assert deny_reason(answer).startswith(
            f"PlanFence blocked Edit of {repo / 'auth.ts'}: {DENY_DRIFT}."
        )
        other = {httphook.ENV_HEADER + "HOME": "/elsewhere"}
        status, answer = post(repo, edit, key=key, **other)
        assert status == 200 and deny_reason(answer).startswith(
            "PlanFence blocked this call: Claude Code runs with another HOME than the "
            "workspace owner answering its http hooks"
        )
        status, answer = post(repo, b"not json", key=key)  # decide's own block
        assert status == 200 and answer["decision"] == "block"
        assert answer["reason"].startswith("PlanFence blocked this call: unreadable hook input")


def test_a_wrong_or_missing_key_is_refused_before_the_body(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        edit = json.dumps(payload("claude-edit", repo)).encode()
        assert post(repo, edit, key="anything")[0] == 403  # no key installed yet
        key = httphook.ensure_secret(cluster_of(repo))
        assert httphook.secret_path(cluster_of(repo)).stat().st_mode & 0o777 == 0o600
        assert post(repo, edit, key=key[:-1] + ("0" if key[-1] != "0" else "1"))[0] == 403
        assert post(repo, edit, key=None)[0] == 403
        assert post(repo, edit, key="")[0] == 403
        assert post(repo, edit, key=key)[0] == 200


def test_oversize_and_malformed_requests_get_an_error_status(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        key = httphook.ensure_secret(cluster_of(repo))
        # Refused by its Content-Length, before any of the body is sent (a client still
        # sending it when the answer comes may see the connection close: it blocks too).
        with socket.create_connection(("127.0.0.1", port_of(repo)), timeout=20) as raw:
            raw.sendall(
                f"POST {httphook.PATH} HTTP/1.1\r\nHost: x\r\n{httphook.HEADER}: {key}\r\n"
                f"Content-Length: {MAX_PAYLOAD + 1}\r\n\r\n".encode()
            )
            answer = http.client.HTTPResponse(raw)
            answer.begin()
            assert (answer.status, json.loads(answer.read())) == (
                413,
                {"error": f"payload over {MAX_PAYLOAD} bytes"},
            )
        # A chunked body announces no length: it is cut off as it grows past the cap.
        chunks = [b"x" * 65536] * (MAX_PAYLOAD // 65536 + 2)
        conn = http.client.HTTPConnection("127.0.0.1", port_of(repo), timeout=20)
        try:
            conn.request("POST", httphook.PATH, body=iter(chunks),
                         headers={httphook.HEADER: key}, encode_chunked=True)  # fmt: skip
            assert conn.getresponse().status == 413
        except (BrokenPipeError, ConnectionResetError):
            pass  # the owner answered and closed while the client was still sending
        finally:
            conn.close()
        with socket.create_connection(("127.0.0.1", port_of(repo)), timeout=20) as raw:
            raw.sendall(b"POST /hook/claude HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n")
            assert raw.recv(100).startswith(b"HTTP/1.1 400 ")
        assert post(repo, b"{}", key=key, query="mode=sideways")[1]["decision"] == "block"


def test_with_the_owner_stopped_nothing_answers_and_a_restart_takes_the_same_port(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        port = port_of(repo)
    assert httphook.served_port(cluster_of(repo), "ws") is None
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        pass
    else:
        raise AssertionError(f"port {port} still answers")  # (or another process took it)
    with served(repo):
        assert port_of(repo) == port  # the installed handlers name it: they work again


def test_answers_map_exit_codes_as_claude_code_reads_them() -> None:
    assert httpd.answer_body("PreToolUse", 0, "", "") == (200, {})
    assert httpd.answer_body("SessionStart", 0, "hello\n", "") == (
        200,
        {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "hello"}},
    )
    assert httpd.answer_body("PostToolUse", 0, '{"a": 1}', "") == (200, {"a": 1})
    assert httpd.answer_body("PostToolUse", 2, "", "no\n") == (
        200,
        {"decision": "block", "reason": "no"},
    )
    assert httpd.answer_body("PreToolUse", 1, "", "") == (
        500,
        {"error": "the hook failed (exit 1)"},
    )
    assert httpd.argv_of(
        f"{httphook.PATH}?{httphook.query(['--mode', 'auto', '--cluster', '/a b&c'])}".encode()
    ) == ["--mode", "auto", "--cluster", "/a b&c"]
