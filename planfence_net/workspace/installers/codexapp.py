"""Asking the real Codex which hooks it will run: `codex app-server` (JSON-RPC without the
`jsonrpc` field, one JSON message a line on stdin/stdout): `initialize`, then `hooks/list`
with `{"cwds": [ROOT]}`. Each hook it reports has `key` (its `hooks.state` trust key),
`eventName` (camelCase), `command`, `matcher`, `sourcePath`, `source`, `enabled`,
`currentHash` and `trustStatus` (`trusted`, `untrusted`, `modified`, `managed`).
Notifications in between (messages with a `method`) are skipped.

    codex_hash   the hash Codex stores to trust one command handler, for when Codex is absent
"""

from __future__ import annotations

import hashlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from ...core.errors import ConfigError

TIMEOUT = 30.0
LABELS = {
    "PreToolUse": "pre_tool_use",
    "PostToolUse": "post_tool_use",
    "SessionStart": "session_start",
    "SessionEnd": "session_end",
}
END_SECONDS = (1, 3)  # a SessionEnd handler's timeout: its default and its most


def find_codex(given: Path | None) -> Path | None:
    """`given`, else `codex` on PATH, else None."""
    if given is not None:
        return given
    found = shutil.which("codex")
    return Path(found) if found else None


def hooks_list(codex: Path, root: Path, timeout: float = TIMEOUT) -> dict[str, Any]:
    """The `hooks/list` entry for `root` ({"cwd", "hooks", "warnings", "errors"}). Raises
    ConfigError when Codex cannot be started or does not answer."""
    try:
        proc = subprocess.Popen(
            [str(codex), "app-server"],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        raise ConfigError(f"cannot run {codex} app-server: {exc}") from None
    deadline = time.monotonic() + timeout
    assert proc.stdin is not None and proc.stdout is not None
    buffer = b""
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout.fileno(), selectors.EVENT_READ)

    def call(request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        nonlocal buffer
        assert proc.stdin is not None and proc.stdout is not None
        message = {"id": request_id, "method": method, "params": params}
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()
        while True:
            while b"\n" not in buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    raise ConfigError(f"{codex} app-server did not answer {method} in time")
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    raise ConfigError(f"{codex} app-server exited before answering {method}")
                buffer += chunk
            line, buffer = buffer.split(b"\n", 1)
            answer = json.loads(line)
            if answer.get("id") == request_id and "method" not in answer:
                if "error" in answer:
                    raise ConfigError(f"{codex} app-server {method}: {answer['error']}")
                return dict(answer["result"])

    try:
        call(1, "initialize", {"clientInfo": {"name": "planfence", "version": "1"}})
        data = call(2, "hooks/list", {"cwds": [str(root)]}).get("data", [])
        return dict(data[0]) if data else {"hooks": [], "warnings": [], "errors": []}
    except (ValueError, KeyError, OSError) as exc:
        raise ConfigError(f"{codex} app-server answered something unexpected: {exc}") from None
    finally:
        selector.close()
        try:
            proc.stdin.close()
        except BrokenPipeError:  # a Codex that exited before reading what was written
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        proc.stdout.close()


def codex_hash(label: str, matcher: str | None, command: str, timeout: int | None) -> str:
    """ "sha256:" + the hex SHA-256 of the compact, key-sorted JSON of the handler alone in
    its group, normalized as Codex does (a missing timeout is 600 s, at least 1; SessionEnd's,
    `session_end`, is 1 s when missing and at most 3: Codex 0.171.0's `hooks/list`)."""
    if label == LABELS["SessionEnd"]:
        seconds = min(max(END_SECONDS[0] if timeout is None else timeout, 1), END_SECONDS[1])
    else:
        seconds = max(600 if timeout is None else timeout, 1)
    handler = {"type": "command", "command": command, "async": False, "timeout": seconds}
    identity: dict[str, Any] = {"event_name": label, "hooks": [handler]}
    if matcher is not None:
        identity["matcher"] = matcher
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
