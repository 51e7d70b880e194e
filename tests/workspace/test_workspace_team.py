"""A team across two git worktrees: a parent's plan declares a file of each; its owners run as
real processes (`cluster init --workspace`, `cluster up`) and the hook asks both."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cluster import ClusterHandle
from support.workspace import payload, run_cli, run_hook, served_team, write


@pytest.fixture
def team(tmp_path: Path) -> Iterator[tuple[ClusterHandle, Path, Path]]:
    """Worktrees `api` (main) and `web` (branch web) of one repository, each served."""
    files = {"src/auth.ts": "export const v = 1;\n", "web/page.tsx": "<Login />\n"}
    with served_team(tmp_path, files) as team:
        yield team


def test_a_change_in_either_worktree_blocks_the_parents_write(
    team: tuple[ClusterHandle, Path, Path],
) -> None:
    handle, api, web = team
    code, out, err = run_cli(
        "workspace",
        "trust",
        "login",
        "--cluster",
        handle.path,
        "--read",
        "api:src/auth.ts",
        "--target",
        "web:web/page.tsx",
        "--lockfiles",
        "none",
        cwd=api,
    )
    assert code == 0 and out.startswith("trusted login (trust 1): 1 read, 1 target"), out + err
    write_call = payload("claude-write", api, file_path=str(web / "web" / "page.tsx"))
    hook = ("--cluster", str(handle.path))
    assert run_hook("claude", write_call, *hook) == (0, "")

    write(web, {"web/page.tsx": "<Login next />\n"})
    code, reason = run_hook("claude", write_call, *hook)
    assert code == 2
    assert reason.splitlines()[:3] == [
        f"PlanFence blocked Write of {web}/web/page.tsx: plan 'login' is stale (critical drift).",
        "Workspace drift detected since the previous trusted state:",
        "- 1 file the plan will modify changed: web:web/page.tsx",
    ]

    write(web, {"web/page.tsx": "<Login />\n"})  # back to the trusted content: allowed again
    assert run_hook("claude", write_call, *hook) == (0, "")
    write(api, {"src/auth.ts": "export const v = 2;\n"})
    code, reason = run_hook("claude", write_call, *hook)
    assert code == 2
    assert "- 1 previously inspected file changed: api:src/auth.ts\n" in reason
    # Both worktree owners were asked by the one hook process.
    for name in ("api", "web"):
        assert handle.events(name, "request")[-1]["op"] == "heads"


@pytest.mark.parametrize(
    ("option", "error"),
    [
        ("api", "--workspace 'api': expected NAME=PATH (NAME: letters, digits, '_', '.', '-')"),
        ("a/b=.", "--workspace 'a/b=.': expected NAME=PATH (NAME: letters, digits, '_', '.', '-')"),
        ("api=/nonexistent/x", "--workspace 'api=/nonexistent/x': /nonexistent/x is not a folder"),
    ],
)
def test_a_bad_workspace_option_is_refused(tmp_path: Path, option: str, error: str) -> None:
    code, out, err = run_cli("cluster", "init", tmp_path / "c", "--workspace", option)
    assert (code, out, err) == (1, "", f"error: {error}\n")
    assert not (tmp_path / "c" / "cluster.toml").exists()
