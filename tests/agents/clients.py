"""Run the real Claude Code and Codex CLIs offline, against a ModelServer on 127.0.0.1.

    find_clients      the executables `scripts/install-agents` put in .agents/, or None
    skip_without_clients  at the top of a test module: one skip line when either is missing
    run_claude        `claude -p PROMPT --permission-mode acceptEdits --output-format json`
    run_codex         `codex exec --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check`
    write_codex_config  $CODEX_HOME/config.toml: the scripted provider, project trust, hook trust
    codex_hooks_list  `codex app-server`: `initialize`, then `hooks/list` for a folder
    codex_hook_hash   the trust hash Codex computes for one command handler
    clone_venv        a copy of the running virtualenv made of links, to move away afterwards

Every client runs with a fresh HOME (and CODEX_HOME), a dummy key, and HTTPS_PROXY/HTTP_PROXY
pointing at the model server, which refuses them: nothing leaves the machine. Nothing from
the caller's environment but PATH reaches a client, so a real key never does. Each run is
bounded by a timeout and its whole process group is killed when it ends, also on failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import selectors
import signal
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomli_w

AGENTS_DIR_ENV = "PLANFENCE_AGENTS_DIR"  # the same override scripts/install-agents reads
CLIENT_TIMEOUT = 90.0  # seconds for one client run; a run takes about one second
CODEX_MODEL = "gpt-5.5"  # a model Codex ships metadata for: it offers apply_patch (freeform)
CODEX_PROVIDER = "scripted"
CODEX_KEY_ENV = "PLANFENCE_TEST_MODEL_KEY"
DUMMY_KEY = "dummy-key-for-the-scripted-model-server"
MISSING = "the pinned Claude Code and Codex CLIs are not installed: run scripts/install-agents"


@dataclass(frozen=True, slots=True)
class Clients:
    claude: Path | None
    codex: Path | None


@dataclass(frozen=True, slots=True)
class ClientRun:
    """How one client run ended. `seconds` is its wall time."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float


def agents_dir() -> Path:
    """The prefix scripts/install-agents installs into ($PLANFENCE_AGENTS_DIR or .agents/)."""
    override = os.environ.get(AGENTS_DIR_ENV)
    return Path(override) if override else Path(__file__).resolve().parents[2] / ".agents"


def find_clients() -> Clients:
    """The installed executables (None for a missing one)."""
    bin_dir = agents_dir() / "node_modules" / ".bin"
    found = {name: bin_dir / name for name in ("claude", "codex")}
    return Clients(
        **{name: path if os.access(path, os.X_OK) else None for name, path in found.items()}
    )


def skip_without_clients() -> None:
    """Skip the calling test module, with one line, unless both clients are installed."""
    clients = find_clients()
    if clients.claude is None or clients.codex is None:
        pytest.skip(MISSING, allow_module_level=True)


def base_env(server_url: str, home: Path) -> dict[str, str]:
    """What every client run gets: PATH, a fresh HOME, and the refusing proxy."""
    home.mkdir(parents=True, exist_ok=True)
    state = os.environ.get("XDG_STATE_HOME")  # the session's, where `workspace serve` records
    return {
        **({"XDG_STATE_HOME": state} if state else {}),  # (so the hook finds the owner's socket)
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "SHELL": "/bin/sh",
        "TMPDIR": str(home),
        "HTTPS_PROXY": server_url,
        "HTTP_PROXY": server_url,
        "https_proxy": server_url,
        "http_proxy": server_url,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


def run_bounded(
    argv: list[str], cwd: Path, env: dict[str, str], timeout: float = CLIENT_TIMEOUT
) -> ClientRun:
    """Run `argv` in its own process group with no stdin; kill the group when it ends."""
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        _kill_group(proc)
    return ClientRun(proc.returncode, stdout, stderr, time.monotonic() - started)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the client's hooks and helpers too
    except ProcessLookupError:
        pass
    proc.wait()


# -- Claude Code --------------------------------------------------------------------------------


def run_claude(
    claude: Path,
    server_url: str,
    project: Path,
    home: Path,
    prompt: str,
    timeout: float = CLIENT_TIMEOUT,
    extra: tuple[str, ...] = (),
) -> ClientRun:
    """One headless Claude Code turn in `project`, its model being the server at `server_url`;
    `extra` arguments go to `claude` after the usual ones."""
    env = base_env(server_url, home)
    env.update(
        ANTHROPIC_BASE_URL=server_url,
        ANTHROPIC_API_KEY=DUMMY_KEY,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_TELEMETRY="1",
        DISABLE_ERROR_REPORTING="1",
    )
    return run_bounded(
        [
            str(claude),
            *("-p", prompt, "--permission-mode", "acceptEdits", "--output-format", "json"),
            *extra,
        ],
        project,
        env,
        timeout,
    )


# -- Codex --------------------------------------------------------------------------------------


def codex_env(server_url: str, home: Path, codex_home: Path) -> dict[str, str]:
    env = base_env(server_url, home)
    codex_home.mkdir(parents=True, exist_ok=True)
    env.update(CODEX_HOME=str(codex_home), **{CODEX_KEY_ENV: DUMMY_KEY})
    return env


def write_codex_config(
    codex_home: Path,
    server_url: str,
    trusted_projects: tuple[Path, ...] = (),
    trusted_hooks: dict[str, str] | None = None,
) -> Path:
    """Write $CODEX_HOME/config.toml: the scripted provider as the model, each project in
    `trusted_projects` trusted, and each hook key -> hash in `trusted_hooks` trusted."""
    config: dict[str, Any] = {
        "model": CODEX_MODEL,
        "model_provider": CODEX_PROVIDER,
        "model_providers": {
            CODEX_PROVIDER: {
                "name": CODEX_PROVIDER,
                "base_url": f"{server_url}/v1",
                "wire_api": "responses",
                "env_key": CODEX_KEY_ENV,
                "request_max_retries": 0,
                "stream_max_retries": 0,
            }
        },
    }
    if trusted_projects:
        config["projects"] = {str(p): {"trust_level": "trusted"} for p in trusted_projects}
    if trusted_hooks:
        config["hooks"] = {
            "state": {key: {"trusted_hash": digest} for key, digest in trusted_hooks.items()}
        }
    codex_home.mkdir(parents=True, exist_ok=True)
    path = codex_home / "config.toml"
    path.write_text(tomli_w.dumps(config))
    return path


def run_codex(
    codex: Path,
    server_url: str,
    project: Path,
    home: Path,
    codex_home: Path,
    prompt: str,
    timeout: float = CLIENT_TIMEOUT,
) -> ClientRun:
    """One `codex exec` turn in `project` (its config.toml written beforehand)."""
    return run_bounded(
        [
            str(codex),
            "exec",
            "--dangerously-bypass-approvals-and-sandbox",
            "--skip-git-repo-check",
            "--json",
            prompt,
        ],
        project,
        codex_env(server_url, home, codex_home),
        timeout,
    )


def codex_hooks_list(
    codex: Path, env: dict[str, str], folder: Path, timeout: float = 30.0
) -> dict[str, Any]:
    """Ask `codex app-server` (JSON-RPC, one message a line on stdio) which hooks apply to
    `folder`: returns the `hooks/list` entry for it ({"cwd", "hooks", "warnings", "errors"})."""
    proc = subprocess.Popen(
        [str(codex), "app-server"],
        cwd=folder,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    try:
        rpc = _LineRpc(proc)
        rpc.call(
            1, "initialize", {"clientInfo": {"name": "planfence-tests", "version": "0"}}, deadline
        )
        result = rpc.call(2, "hooks/list", {"cwds": [str(folder)]}, deadline)
        (entry,) = result["data"]
        return dict(entry)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def codex_hook_hash(
    event: str, matcher: str | None, command: str, timeout: int | None = None
) -> str:
    """The `currentHash` Codex reports for one command handler of a group: "sha256:" and the
    hex SHA-256 of the compact, key-sorted JSON of the handler alone in its group, normalized
    (`event` is the snake_case label, e.g. "pre_tool_use"; a missing timeout is 600 s)."""
    handler = {
        "type": "command",
        "command": command,
        "async": False,
        "timeout": max(600 if timeout is None else timeout, 1),
    }
    identity: dict[str, Any] = {"event_name": event, "hooks": [handler]}
    if matcher is not None:
        identity["matcher"] = matcher
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


class _LineRpc:
    """Requests and their answers over a child's stdin/stdout, one JSON message a line;
    notifications in between are skipped."""

    def __init__(self, proc: subprocess.Popen[bytes]):
        assert proc.stdin is not None and proc.stdout is not None
        self._stdin, self._fd = proc.stdin, proc.stdout.fileno()
        self._buffer = b""
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._fd, selectors.EVENT_READ)

    def call(
        self, request_id: int, method: str, params: dict[str, Any], deadline: float
    ) -> dict[str, Any]:
        """Send a request; returns its `result` (raises on an `error` or at the deadline)."""
        self._stdin.write(
            json.dumps({"id": request_id, "method": method, "params": params}).encode() + b"\n"
        )
        self._stdin.flush()
        while True:
            message = json.loads(self._line(deadline))
            if message.get("id") == request_id and "method" not in message:
                if "error" in message:
                    raise RuntimeError(f"codex app-server {method}: {message['error']}")
                return dict(message["result"])

    def _line(self, deadline: float) -> bytes:
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._selector.select(remaining):
                raise TimeoutError("codex app-server did not answer in time")
            chunk = os.read(self._fd, 65536)
            if not chunk:
                raise RuntimeError("codex app-server closed its output")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line


# -- a virtualenv that can be moved away --------------------------------------------------------


def clone_venv(destination: Path) -> Path:
    """A virtualenv at `destination` made of links to the running one (its interpreter and
    site-packages), with its own `bin/planfence`. Returns that executable: commands it
    installs name `destination`, which the caller can then rename ("the venv moved")."""
    if sys.prefix == sys.base_prefix:
        raise RuntimeError("the tests do not run in a virtualenv")
    prefix = Path(sys.prefix)
    site = Path(sysconfig.get_paths()["purelib"])
    (destination / "bin").mkdir(parents=True)
    (destination / "pyvenv.cfg").write_text((prefix / "pyvenv.cfg").read_text())
    (destination / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
    clone_site = destination / site.relative_to(prefix)
    clone_site.parent.mkdir(parents=True)
    clone_site.symlink_to(site)
    entry = prefix / "bin" / "planfence"
    _, body = entry.read_text().split("\n", 1)  # the installer's script, minus its #! line
    executable = destination / "bin" / "planfence"
    executable.write_text(f"#!{destination / 'bin' / 'python'}\n{body}")
    executable.chmod(0o755)
    return executable
