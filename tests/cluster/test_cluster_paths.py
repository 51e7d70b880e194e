"""Paths of a cluster folder cannot be steered elsewhere (issue 17, items 1 and 3): a roster
name that walks out of `keys/` is refused when the roster is read, a `keys/` symlink pointing
out of the folder is refused, and `cluster init` keeps keys and stores out of git. Each
attack runs a real `planfence` process."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import tomli_w

from planfence_net.cluster.folder import ClusterDir
from planfence_net.core.errors import ConfigError
from support.cluster import PLANFENCE
from support.workspace import git, make_repo, payload, run_cli, run_hook, served, write

TRAVERSAL = "../../../../.planfence/keys/ws"
RULE = "use up to 64 letters, digits, '_', '.' or '-', starting with a letter or digit"


def planfence(*args: object, cwd: Path | None = None) -> tuple[int, str, str]:
    proc = subprocess.run(
        [str(PLANFENCE), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=60
    )
    return proc.returncode, proc.stdout, proc.stderr


def test_a_roster_name_that_walks_to_another_key_is_refused(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"auth.ts": "a\n", "vendor/dep/x.ts": "x\n"})
    with served(repo):
        assert run_cli("workspace", "trust", "fix", "--read", "auth.ts", cwd=repo)[0] == 0
    write(repo, {"auth.ts": "b\n"})  # the plan is stale now
    victim = ClusterDir(repo / ".planfence").roster().agent("ws")
    shipped = repo / "vendor" / "dep" / ".planfence"
    shipped.mkdir()
    (shipped / "cluster.toml").write_text(
        tomli_w.dumps(
            {
                "cluster": "workspace-ws",
                "agents": [
                    {
                        "name": TRAVERSAL,  # keys/NAME.key is the victim's own 0600 key
                        "address": "127.0.0.1:1",
                        "public_key": victim.public_key.hex(),
                        "owns": ["plan/*", "ws:*"],
                    }
                ],
            }
        )
    )
    (shipped / "workspace.json").write_text(json.dumps({"current": "fix"}))
    assert (shipped / "keys" / f"{TRAVERSAL}.key").resolve() == ClusterDir(repo / ".planfence").key(
        "ws"
    )
    call = payload("claude-edit", repo, file_path=str(repo / "vendor/dep/x.ts"))
    assert run_hook("claude", call, "--cluster", str(shipped)) == (
        2,
        f"PlanFence blocked Edit of {repo}/vendor/dep/x.ts: {shipped}/cluster.toml: "
        f"agents[0]: 'name' {TRAVERSAL!r} is not a valid agent name: {RULE}\n",
    )
    assert planfence("workspace", "check", "--cluster", shipped) == (
        3,
        "",
        f"error: {shipped}/cluster.toml: agents[0]: 'name' {TRAVERSAL!r} is not a valid "
        f"agent name: {RULE}\n",
    )
    with pytest.raises(ConfigError, match="is not a valid agent name"):
        ClusterDir(shipped).key(TRAVERSAL)


def test_a_keys_folder_that_points_out_of_the_cluster_is_refused(tmp_path: Path) -> None:
    assert planfence("cluster", "init", tmp_path / "mine", "--agents", 1, "--base-port", 0)[0] == 0
    assert planfence("cluster", "init", tmp_path / "c", "--agents", 1, "--base-port", 0)[0] == 0
    (tmp_path / "c" / "keys" / "planner.key").unlink()
    (tmp_path / "c" / "keys").rmdir()
    (tmp_path / "c" / "keys").symlink_to(tmp_path / "mine" / "keys")
    real = tmp_path / "mine" / "keys" / "planner.key"
    assert planfence("workspace", "check", "p", "--cluster", tmp_path / "c") == (
        3,
        "",
        f"error: {tmp_path}/c/keys/planner.key resolves to {real}, outside the cluster "
        f"folder {tmp_path}/c; refusing it\n",
    )


def test_cluster_init_keeps_keys_and_stores_out_of_git(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "checkout", {"README.md": "# app\n"})
    code, out, err = planfence("cluster", "init", "mycluster", "--base-port", 0, cwd=repo)
    assert (code, err) == (0, "")
    (repo / "mycluster" / "data" / "planner.sqlite").write_bytes(b"store")
    (repo / "mycluster" / "logs" / "planner.jsonl").write_text("{}\n")
    assert git(repo, "status", "--porcelain", "--untracked-files=all").splitlines() == [
        "?? mycluster/.gitignore",
        "?? mycluster/cluster.toml",
    ]
    git(repo, "add", "-A")  # what `git add -A` after the README's steps would commit
    assert git(repo, "diff", "--cached", "--name-only").splitlines() == [
        "mycluster/.gitignore",
        "mycluster/cluster.toml",
    ]
