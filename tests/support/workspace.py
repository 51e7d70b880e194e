"""Helpers for the workspace and hook tests: git repositories, served worktrees, payloads.

make_repo        a git repository with files, on a branch, committed
served           `planfence workspace serve PATH` as a real process on 127.0.0.1, stopped
                 (SIGTERM, then SIGKILL) when the block ends, also when a test fails
run_cli          a `planfence` command in-process (CliRunner): exit code, stdout, stderr
run_hook         `planfence hook AGENT` as a fresh process fed a payload on stdin
run_hook_output  the same, also returning stdout (the JSON an agent reads on exit 0)
payload          a recorded payload of tests/fixtures/hooks with $PROJECT filled in
quiet            stderr without the warning that no agent hook is active (no hook is
                 installed in most workspace tests)
served_team      a cluster of a planner and the workspace owners `api` and `web`, up as
                 real processes (`cluster init --workspace`, `cluster up`)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from planfence_net.cli.main import app
from planfence_net.cluster.folder import ClusterDir
from support.cluster import PLANFENCE, ClusterHandle, wait_exit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hooks"
_runner = CliRunner()


def git(repo: Path, *args: str) -> str:
    """Run git in `repo`; returns stdout (raises on failure)."""
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


def make_repo(path: Path, files: dict[str, str], branch: str = "main") -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", branch)
    git(path, "config", "user.email", "test@example.invalid")
    git(path, "config", "user.name", "test")
    write(path, files)
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "initial")
    return path


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


@contextmanager
def served(path: Path, *extra: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """`planfence workspace serve PATH` running (`env` over this process's environment);
    yields its first output line."""
    proc = subprocess.Popen(
        [str(PLANFENCE), "workspace", "serve", str(path), *extra],
        env={**os.environ, **env} if env else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed once the owner accepts sessions
        assert "serving" in line, line + proc.stdout.read()
        yield line
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, and SIGKILL if it has not exited within the wait."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        if not wait_exit(proc.pid):
            proc.kill()
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def run_cli(*args: Any, cwd: Path | None = None) -> tuple[int, str, str]:
    """Run `planfence ARGS` in-process, in `cwd`; returns (exit code, stdout, stderr)."""
    before = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        result = _runner.invoke(app, [str(a) for a in args])
    finally:
        os.chdir(before)
    return result.exit_code, result.stdout, result.stderr


def payload(name: str, project: Path, **changes: Any) -> dict[str, Any]:
    """The recorded payload `name` with $PROJECT set to `project` and `changes` applied to
    `tool_input`."""
    text = (FIXTURES / f"{name}.json").read_text().replace("$PROJECT", str(project))
    value: dict[str, Any] = json.loads(text)
    value["tool_input"].update(changes)
    return value


def run_hook(
    agent: str, data: bytes | dict[str, Any], *args: str, env: dict[str, str] | None = None
) -> tuple[int, str]:
    """`planfence hook AGENT ARGS` as a fresh process; returns (exit code, stderr)."""
    stdin = data if isinstance(data, bytes) else json.dumps(data).encode()
    proc = subprocess.run(
        [str(PLANFENCE), "hook", agent, *args],
        input=stdin,
        capture_output=True,
        timeout=30,
        env=env,
    )
    assert proc.stdout == b"", proc.stdout
    return proc.returncode, proc.stderr.decode()


def run_hook_output(
    agent: str, data: bytes | dict[str, Any], *args: str, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """`planfence hook AGENT ARGS` as a fresh process; returns (exit code, stdout, stderr)."""
    stdin = data if isinstance(data, bytes) else json.dumps(data).encode()
    proc = subprocess.run(
        [str(PLANFENCE), "hook", agent, *args],
        input=stdin,
        capture_output=True,
        timeout=30,
        env=env,
    )
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


UNGUARDED = "warning: no agent hook is active for "


def quiet(err: str) -> str:
    """`err` without the one-line warning `workspace trust|check` print when no agent hook is
    active for the worktree."""
    return "".join(line for line in err.splitlines(True) if not line.startswith(UNGUARDED))


def hook_socket(repo: Path) -> Path:
    """The hook socket of the workspace owner `workspace serve REPO` runs (see `hookd`)."""
    from planfence_net.workspace.hook.client import socket_path

    return socket_path(repo / ".planfence")


@contextmanager
def in_process(repo: Path) -> Iterator[None]:
    """Within the block the hook checks in-process, as before its fast path: the workspace
    owner's hook socket is moved aside (and back afterwards)."""
    sock = hook_socket(repo)
    aside = sock.with_suffix(".aside")
    sock.rename(aside)
    try:
        yield
    finally:
        aside.rename(sock)


def hook_calls(repo: Path) -> int:
    """How many hook calls the workspace owner of `repo` answered (its log's `hook` events)."""
    log = repo / ".planfence" / "logs" / "ws.jsonl"
    return sum(1 for line in log.read_text().splitlines() if '"event":"hook"' in line)


@contextmanager
def served_team(
    tmp: Path, api_files: dict[str, str], web_files: dict[str, str] | None = None
) -> Iterator[tuple[ClusterHandle, Path, Path]]:
    """A planner (plan/*) and the workspace owners `api` and `web` of the cluster TMP/cluster,
    up as real processes on 127.0.0.1 and stopped when the block ends. `web` is a worktree
    of api's repository (branch web) or, given `web_files`, a repository of its own."""
    api = make_repo(tmp / "api", api_files)
    web = tmp / "web"
    if web_files is None:
        git(api, "worktree", "add", "-q", "-b", "web", str(web))
    else:
        make_repo(web, web_files)
    path = tmp / "cluster"
    code, out, err = run_cli(
        "cluster", "init", path, "--agents", "1", "--base-port", "0",
        "--workspace", f"api={api}", "--workspace", f"web={web}",
    )  # fmt: skip
    assert code == 0, out + err
    handle = ClusterHandle(path, ClusterDir(path), ClusterDir(path).roster())
    assert [(a.name, a.owns) for a in handle.roster.agents] == [
        ("planner", ("plan/*",)),
        ("api", ("api:*",)),
        ("web", ("web:*",)),
    ]
    try:
        assert handle.up() == "started 3 owner(s): planner, api, web; 3 running\n"
        yield handle, api, web
    finally:
        handle.stop()
