"""Background processes started from a cluster folder: their pid files (DIR/run/NAME.pid),
whether they still run, how they are spawned, and the reason they wrote for exiting
(DIR/run/NAME.out)."""

from __future__ import annotations

import os
import select
import subprocess
from pathlib import Path

from .folder import ClusterDir


def read_pid(cdir: ClusterDir, name: str) -> int | None:
    try:
        return int(cdir.pid_file(name).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def process_alive(pid: int, marker: str) -> bool:
    """True when `pid` runs and its command line contains `marker` (guards pid reuse).

    A process this one spawned is asked through its Popen (which also reaps it).
    """
    child = _CHILDREN.get(pid)
    if child is not None:
        _reap(pid)
        return child.returncode is None
    _reap(pid)
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z" and marker in cmdline


# Popen handles of the owners this process spawned: dropping a running Popen emits a
# ResourceWarning, and polling through the handle reaps the child and sets its returncode.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def _reap(pid: int) -> None:
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is not None:
            del _CHILDREN[pid]
        return
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def spawn(cdir: ClusterDir, name: str, argv: list[str]) -> int:
    """Start a detached background process logging to run/NAME.out (this run's output only:
    the file is truncated, so errors never show fragments of an earlier run); records its pid."""
    with open(cdir.out(name), "wb") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            cwd=cdir.root,
        )
    _CHILDREN[proc.pid] = proc
    cdir.pid_file(name).write_text(f"{proc.pid}\n")
    return proc.pid


def spawn_ready(cdir: ClusterDir, name: str, argv: list[str], timeout: float) -> str:
    """`spawn`, for a process that says it is ready with a first line on stdout (which then
    goes elsewhere: the pipe is closed here); returns that line, or "" when the process
    exited or said nothing within `timeout` seconds (its reason is in run/NAME.out)."""
    with open(cdir.out(name), "wb") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=out,
            start_new_session=True,
            cwd=cdir.root,
        )
    _CHILDREN[proc.pid] = proc
    cdir.pid_file(name).write_text(f"{proc.pid}\n")
    assert proc.stdout is not None
    with proc.stdout:
        readable, _, _ = select.select([proc.stdout], [], [], timeout)
        return proc.stdout.readline().decode(errors="replace").strip() if readable else ""


def last_error_line(path: Path) -> str:
    """The last `error: ...` line a process wrote to its output file (its one-line reason for
    exiting), else its last line; "" when it wrote nothing."""
    try:
        lines = [
            line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()
        ]
    except FileNotFoundError:
        return ""
    errors = [line for line in lines if line.startswith("error: ")]
    return errors[-1][len("error: ") :] if errors else (lines[-1] if lines else "")
