"""Where Claude Code's http hook finds the workspace owner, and the handler that points at it:
the names the installer and the owner's door (`owner/httpd.py`) share.

    record_path   CLUSTER/run/hook-http-AGENT.json: {"port", "pid"} of the owner's door
    secret_path   CLUSTER/run/hook-http.secret: the per-install key (0600)
    served_port   the recorded port when that owner is up and listening, else None
    ensure_secret the key, made once (32 random bytes, hex) and kept across installs
    http_handler  {"type": "http", "url", "headers", "allowedEnvVars", "timeout", "onFailure"}
    other_environment  which of ENVIRONMENT a request's headers give otherwise than here
    query         the `planfence hook claude` options as the URL's query

Claude Code 2.1.332 POSTs the hook's JSON payload to `url`; a header value's `$NAME` or
`${NAME}` is replaced by the environment variable NAME only when NAME is listed in
`allowedEnvVars` (else by ""). The key reaches Claude Code as ENV through the `env` of the
same settings file (`hook install` writes both; settings.local.json is this machine's, and
is not committed).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

HEADER = "X-PlanFence-Key"  # the key's header
ENV = "PLANFENCE_HOOK_KEY"  # the environment variable Claude Code interpolates into it
PATH = "/hook/claude"
PROBE_TIMEOUT = 1.0  # seconds to see whether the recorded port listens
# What `hook.decide` reads from the environment (`hook.client.environment`): the client sends
# its values (one header each), and the owner answers only when they are its own.
ENVIRONMENT = ("PLANFENCE_CLUSTER", "XDG_STATE_HOME", "HOME", "CODEX_HOME", "XDG_CONFIG_HOME")
ENV_HEADER = "X-PlanFence-Env-"  # + NAME


def record_path(cluster: Path, agent: str) -> Path:
    """Where the owner of `agent` records its hook door (JSON {"port", "pid"})."""
    return cluster / "run" / f"hook-http-{agent}.json"


def secret_path(cluster: Path) -> Path:
    """The cluster's http-hook key (0600)."""
    return cluster / "run" / "hook-http.secret"


def served_port(cluster: Path, agent: str) -> int | None:
    """The port of `agent`'s hook door when one is recorded and accepts a connection on
    127.0.0.1, else None."""
    try:
        port = json.loads(record_path(cluster, agent).read_text())["port"]
        with socket.create_connection(("127.0.0.1", int(port)), timeout=PROBE_TIMEOUT):
            return int(port)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def ensure_secret(cluster: Path) -> str:
    """The cluster's http-hook key: read, or made (0600, written whole or not at all)."""
    path = secret_path(cluster)
    try:
        text = path.read_text().strip()
        if text:
            return text
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    text = secrets.token_hex(32)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(temporary, path)
    return text


def query(argv: list[str]) -> str:
    """`--NAME VALUE` pairs as a URL query (`httpd.argv_of` reads them back)."""
    return urlencode([(argv[i].removeprefix("--"), argv[i + 1]) for i in range(0, len(argv), 2)])


def http_handler(port: int, argv: list[str], timeout: int) -> dict[str, Any]:
    """Our Claude Code http handler: the owner's door on `port`, with the hook options `argv`
    (after `hook claude`), the key from ENV, blocking whenever it gets no usable answer."""
    tail = f"?{query(argv)}" if argv else ""
    return {
        "type": "http",
        "url": f"http://127.0.0.1:{port}{PATH}{tail}",
        "headers": {HEADER: f"${{{ENV}}}", **{ENV_HEADER + n: f"${{{n}}}" for n in ENVIRONMENT}},
        "allowedEnvVars": [ENV, *ENVIRONMENT],
        "timeout": timeout,
        "onFailure": "block",
    }


def other_environment(headers: dict[str, str]) -> list[str]:
    """The names of ENVIRONMENT whose value in `headers` (lower-case names; missing: unset)
    differs from this process's (unset and "" are the same: Claude Code sends "" for an
    unset variable)."""
    return [
        name
        for name in ENVIRONMENT
        if headers.get((ENV_HEADER + name).lower(), "") != os.environ.get(name, "")
    ]
