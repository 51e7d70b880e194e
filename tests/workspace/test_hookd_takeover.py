"""When the workspace owner serving the hook socket dies, another owner of the cluster takes
the socket over, so the hook answers again without a person restarting that one owner.

Real owners (`cluster up`) and real `planfence hook` processes; the serving owner is killed
with SIGKILL, which leaves its socket behind (a clean stop removes it).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from planfence_net.workspace.hook.client import socket_path
from planfence_net.workspace.owner.hookd import STANDBY
from support.cluster import ClusterHandle, wait_exit
from support.workspace import payload, run_cli, run_hook_output, served_team

WORKTREES = ("api", "web")


@pytest.fixture
def team(tmp_path: Path) -> Iterator[tuple[ClusterHandle, dict[str, Path]]]:
    """Worktrees `api` (main) and `web` (branch web) of one repository, each served."""
    with served_team(tmp_path, {"src/lib.py": "v = 1\n"}) as (handle, api, web):
        yield handle, {"api": api, "web": web}


def serving(handle: ClusterHandle, name: str) -> bool:
    """Whether owner `name`'s last word on the hook socket is that it serves it."""
    said = handle.events(name, "hookd")
    return bool(said) and said[-1].get("serving") is True


def answered(handle: ClusterHandle, name: str) -> int:
    return len(handle.events(name, "hook"))


def test_another_owner_takes_the_socket_over_when_the_serving_one_is_killed(
    team: tuple[ClusterHandle, dict[str, Path]],
) -> None:
    handle, roots = team
    sock = socket_path(handle.path)
    first = next(n for n in WORKTREES if serving(handle, n))
    (other,) = (n for n in WORKTREES if n != first)
    assert handle.wait_event(other, "hookd")["reason"] == STANDBY
    root = roots[other]
    code, out, err = run_cli(
        "workspace", "trust", "fix", "--cluster", handle.path, "--target", "src/lib.py",
        "--lockfiles", "none", cwd=root,
    )  # fmt: skip
    assert code == 0, out + err
    edit = payload("claude-write", root, file_path=str(root / "src/lib.py"))

    assert run_hook_output("claude", edit, "--cluster", str(handle.path))[0] == 0
    assert (answered(handle, first), answered(handle, other)) == (1, 0)

    pid = handle.owner_pid(first)
    os.kill(pid, signal.SIGKILL)
    assert wait_exit(pid)
    assert sock.exists()  # a killed owner leaves its socket behind
    handle.wait_event(other, "hookd", lambda e: e.get("serving") is True)

    code, _, err = run_hook_output("claude", edit, "--cluster", str(handle.path))
    assert (code, err) == (0, "")
    assert answered(handle, other) == 1  # through the socket, from the owner that took over
