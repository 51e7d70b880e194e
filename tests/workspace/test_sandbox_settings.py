"""`hook install claude --sandbox`: the exact sandbox settings written, merged with the user's,
and removed again by `hook uninstall claude` (installers/sandbox.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from planfence_net.workspace.hook.client import socket_dir
from planfence_net.workspace.installers.sandbox import SOCKETS, fence_paths
from planfence_net.workspace.place.paths import state_dir
from support.workspace import git, make_repo, run_cli


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"a.txt": "old\n"})


@pytest.fixture
def cluster(tmp_path: Path) -> Path:
    folder = tmp_path / "cluster"
    folder.mkdir()
    (folder / "cluster.toml").write_text("")
    return folder


def install(repo: Path, cluster: Path, *extra: str) -> tuple[int, str]:
    code, out, err = run_cli(
        "hook", "install", "claude", "--project", repo, "--cluster", cluster, "--sandbox", *extra
    )
    return code, out + err


def settings(repo: Path) -> dict[str, object]:
    value = json.loads((repo / ".claude" / "settings.local.json").read_text())
    assert isinstance(value, dict)
    return value


def test_the_socket_directory_is_the_hooks() -> None:
    assert state_dir() / SOCKETS == socket_dir()


def test_sandbox_settings_written(repo: Path, cluster: Path) -> None:
    code, said = install(repo, cluster)

    assert code == 0, said
    git = repo / ".git"
    secret = [os.path.realpath(cluster), str(state_dir() / "hookd")]
    assert settings(repo)["sandbox"] == {
        "enabled": True,
        "failIfUnavailable": True,
        "allowUnsandboxedCommands": False,
        "filesystem": {
            "denyRead": secret,
            "denyWrite": [
                *secret,
                str(repo / ".claude"),
                str(repo / ".codex"),
                str(git / "config"),
                str(git / "hooks"),
                str(git / "planfence-worktree.json"),
                str(git / "planfence.json"),
            ],
        },
    }
    assert settings(repo)["hooks"]  # the hooks themselves, as without --sandbox


def test_a_linked_worktree_protects_both_git_dirs(
    repo: Path, cluster: Path, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    git(repo, "worktree", "add", "-q", "-b", "tree", str(tree))
    writes = fence_paths(tree, cluster)["denyWrite"]
    own = repo / ".git" / "worktrees" / "tree"
    assert writes[4:] == [
        str(own / "config"),
        str(own / "hooks"),
        str(own / "planfence-worktree.json"),
        str(repo / ".git" / "config"),
        str(repo / ".git" / "hooks"),
        str(repo / ".git" / "planfence.json"),
    ]


def test_uninstall_leaves_the_users_sandbox_settings(repo: Path, cluster: Path) -> None:
    path = repo / ".claude" / "settings.local.json"
    path.parent.mkdir()
    mine = {
        "permissions": {"allow": ["Bash"]},
        "sandbox": {
            "enabled": True,
            "allowUnsandboxedCommands": True,
            "excludedCommands": ["docker"],
            "filesystem": {"denyRead": ["/secret"]},
        },
    }
    path.write_text(json.dumps(mine))

    assert install(repo, cluster)[0] == 0
    assert install(repo, cluster)[0] == 0  # twice: still once
    block = settings(repo)["sandbox"]
    assert isinstance(block, dict)
    assert (block["allowUnsandboxedCommands"], block["excludedCommands"]) == (False, ["docker"])
    assert block["filesystem"]["denyRead"] == [
        "/secret",
        os.path.realpath(cluster),
        str(state_dir() / "hookd"),
    ]
    code, out, err = run_cli("hook", "uninstall", "claude", "--project", repo)

    assert code == 0, out + err
    assert settings(repo) == mine


@pytest.mark.parametrize(
    ("agent", "extra", "reason"),
    [
        ("codex", (), "--sandbox is for claude"),
        ("claude", ("--shared",), "not with --shared"),
    ],
)
def test_sandbox_refused_where_it_does_not_apply(
    repo: Path, cluster: Path, agent: str, extra: tuple[str, ...], reason: str
) -> None:
    code, out, err = run_cli(
        "hook", "install", agent, "--project", repo, "--cluster", cluster, "--sandbox", *extra
    )

    assert code != 0 and reason in out + err, out + err
    assert not (repo / ".claude").exists() and not (repo / ".codex").exists()


def test_sandbox_needs_a_cluster(repo: Path) -> None:
    code, out, err = run_cli("hook", "install", "claude", "--project", repo, "--sandbox")

    assert code != 0 and "--sandbox needs the cluster folder" in out + err, out + err
    assert not (repo / ".claude").exists()
