"""Bounded costs of a workspace owner (issue 17, item 6): a 3 GB sparse file is refused, never
read (the real owner process stays under 100 MB); one look's hashing never makes another
session's heads wait; a directory symlink cannot lead the owner out of the worktree; a tracked
name that is not UTF-8 is escaped, not a crash."""

from __future__ import annotations

import functools
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from planfence_net.net.api import query_heads
from planfence_net.workspace.owner import daemon as owner_module
from planfence_net.workspace.place.config import ensure_local_cluster
from planfence_net.workspace.place.observe import Observer
from support.cluster import PLANFENCE
from support.workspace import git, make_repo, quiet, run_cli, stop, write
from support.writers import without_writers

FILES = {"auth.ts": "export const timeout = 30;\n", "README.md": "# app\n"}
GB3 = 3 * 1024**3
RSS_LIMIT_KB = 100 * 1024


@contextmanager
def owner_process(path: Path) -> Iterator[int]:
    """`planfence workspace serve PATH` running; yields its pid."""
    proc = subprocess.Popen(
        [str(PLANFENCE), "workspace", "serve", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "serving" in line, line + proc.stdout.read()
        yield proc.pid
    finally:
        stop(proc)


def peak_rss_kb(pid: int) -> int:
    """The process's peak resident set (VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for {pid}")


def test_a_3gb_sparse_file_is_refused_and_never_read(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with open(repo / "big.bin", "wb") as f:
        f.truncate(GB3)  # sparse: no disk used, 3 GB of zeros to whoever reads it
    write(repo, {"small.bin": "small\n"})
    with owner_process(repo) as pid:
        code, out, err = run_cli("workspace", "trust", "p", "--read", "big.bin", cwd=repo)
        assert (code, out, err) == (
            1,
            "",
            f"error: declared file refused by its owner: ws:big.bin ({GB3} bytes, over the "
            f"cap of {64 * 1024 * 1024})\n",
        )
        assert run_cli("workspace", "trust", "p", "--read", "small.bin", cwd=repo)[0] == 0
        os.truncate(repo / "small.bin", GB3)  # grows past the cap after the trust
        code, out, err = run_cli("workspace", "check", "p", cwd=repo)
        assert (code, without_writers(out).splitlines()[1:]) == (
            2,
            ["- 1 previously inspected file changed: small.bin", "Drift class: relevant"],
        )
        peak = peak_rss_kb(pid)
        print(f"workspace owner peak RSS: {peak} KiB")
        assert peak < RSS_LIMIT_KB


def test_a_directory_symlink_cannot_lead_out_of_the_worktree(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("the key\n")
    (repo / "vendor").symlink_to(tmp_path / "outside")  # absolute, out
    (repo / "lib").mkdir()
    (repo / "lib" / "up").symlink_to("../../outside")  # relative, out
    (repo / "src").mkdir()
    (repo / "src" / "a.ts").write_text("a\n")
    (repo / "alias").symlink_to("lib/../src")  # relative, stays inside
    (repo / "abs").symlink_to(repo / "src")  # absolute, stays inside
    with owner_process(repo):
        for path in ("vendor/secret.txt", "lib/up/secret.txt"):
            code, out, err = run_cli("workspace", "trust", "p", "--read", path, cwd=repo)
            assert (code, err) == (
                1,
                f"error: declared file refused by its owner: ws:{path} (a symlink on its "
                f"path leads outside the worktree)\n",
            )
        code, out, err = run_cli(
            "workspace", "trust", "p", "--read", "alias/a.ts", "--read", "abs/a.ts", cwd=repo
        )
        assert (code, quiet(err)) == (0, "")
        (repo / "alias").unlink()
        (repo / "alias").symlink_to(tmp_path / "outside")  # swapped after the trust
        (tmp_path / "outside" / "a.ts").write_text("a\n")  # same content, outside
        code, out, err = run_cli("workspace", "check", "p", cwd=repo)
        assert (code, without_writers(out).splitlines()[1:]) == (
            2,
            ["- 1 previously inspected file changed: alias/a.ts", "Drift class: relevant"],
        )


def test_a_tracked_name_that_is_not_utf8_is_escaped(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    name = os.fsdecode(b"caf\xe9.txt")
    (repo / name).write_text("v1\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "latin-1 name")
    with owner_process(repo):
        assert run_cli("workspace", "trust", "p", "--read", "auth.ts", cwd=repo)[0] == 0
        (repo / name).write_text("v2, longer\n")
        code, out, err = run_cli("workspace", "check", "p", cwd=repo)
    assert (code, out, quiet(err)) == (
        0,
        "Workspace drift detected since the previous trusted state:\n"
        "- Unrelated tracked files changed (informational): caf\\xe9.txt\n"
        "Drift class: informational\n",
        "",
    )


class GatedObserver(Observer):
    """Hashes `slow.txt` only once the test lets it: a look that takes as long as it likes."""

    entered = threading.Event()
    release = threading.Event()

    def file(self, rel: str, folders: Any = None) -> dict[str, Any]:
        if rel == "slow.txt":
            self.entered.set()
            assert self.release.wait(30)
        return super().file(rel, folders)


def test_one_session_hashing_never_makes_another_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "wt", {"slow.txt": "slow\n", "fast.txt": "fast\n"})
    cdir, _ = ensure_local_cluster(tmp_path / "wt", "ws")
    roster = cdir.roster()
    me = cdir.identity("ws")
    monkeypatch.setattr(owner_module, "Observer", GatedObserver)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(
                functools.partial(
                    owner_module.run_workspace_owner,
                    tmp_path / "wt",
                    roster,
                    me,
                    cdir.db("ws"),
                    cdir.log("ws"),
                )
            )
            slow: list[dict[str, Any]] = []
            answered = anyio.Event()

            async def ask_slow() -> None:
                slow.extend(await query_heads(roster, me, ["ws:file/slow.txt"], owner_timeout=30))
                answered.set()

            tg.start_soon(ask_slow)
            await anyio.to_thread.run_sync(GatedObserver.entered.wait, 30)
            with anyio.fail_after(10):  # before the fix: waits on the lock held by the slow look
                [fast] = await query_heads(roster, me, ["ws:file/fast.txt"], owner_timeout=10)
            assert (fast["seq"], slow) == (1, [])
            GatedObserver.release.set()
            await answered.wait()
            assert slow[0]["seq"] == 2
            tg.cancel_scope.cancel()

    anyio.run(main)


pytestmark = pytest.mark.timeout(90)
