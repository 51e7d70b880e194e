"""Observing a worktree: git blob ids, branch and HEAD read from .git, the stat cache, a folder
without git (BLAKE2b), and paths that must not leave the worktree."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from planfence_net.core.errors import ConfigError
from planfence_net.workspace.place.observe import Observer, check_relative
from support.workspace import git, make_repo, write


def test_git_facts_match_git(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "repo", {"a.txt": "alpha\n", "dir/b.txt": "beta\n"}, branch="feature/auth"
    )
    observer = Observer(repo)
    facts = observer.observe(["file/a.txt", "file/gone.txt", "branch", "head", "repo", "status"])
    assert facts["file/a.txt"] == {
        "hash": "git:" + git(repo, "hash-object", "a.txt").strip(),
        "size": 6,
        "mode": "100644",
    }
    assert facts["file/gone.txt"] == {"missing": True}
    assert facts["branch"] == {"branch": "feature/auth"}
    assert facts["head"] == {"head": git(repo, "rev-parse", "HEAD").strip()}
    assert facts["repo"] == {"git": str(repo / ".git"), "path": str(repo)}
    assert facts["status"] == {"changed": []}
    write(repo, {"dir/b.txt": "beta 2\n"})
    git(repo, "checkout", "-q", "--detach")
    git(repo, "pack-refs", "--all")  # HEAD now resolves through packed-refs
    changed = observer.observe(["status", "branch", "head"])
    size, mtime = (repo / "dir/b.txt").stat().st_size, (repo / "dir/b.txt").stat().st_mtime_ns
    assert changed == {
        "status": {"changed": [["dir/b.txt", size, mtime]]},
        "branch": {"branch": None},
        "head": facts["head"],
    }


def test_an_old_unchanged_file_is_not_hashed_again(tmp_path: Path) -> None:
    write(tmp_path, {"old.txt": "x" * 100})
    os.utime(tmp_path / "old.txt", ns=(10**18, 10**18))  # far outside the racy window
    observer = Observer(tmp_path)
    first = observer.file("old.txt")
    assert observer.file("old.txt") == first and observer.hashed == 1
    (tmp_path / "old.txt").write_text("y" * 100)  # same size, new mtime: hashed again
    assert observer.file("old.txt") != first and observer.hashed == 2


def test_a_folder_without_git_uses_blake2b(tmp_path: Path) -> None:
    write(tmp_path, {"notes.txt": "read me\n"})
    observer = Observer(tmp_path)
    assert observer.git is None
    digest = hashlib.blake2b(b"read me\n", digest_size=32).hexdigest()
    assert observer.observe(["file/notes.txt", "branch", "head", "status"]) == {
        "file/notes.txt": {"hash": f"blake2b:{digest}", "size": 8, "mode": "100644"},
        "branch": {"branch": None},
        "head": {"head": None},
        "status": {"changed": None},
    }


@pytest.mark.parametrize("rel", ["../x", "/etc/passwd", "a/../../b", "", "a//b"])
def test_paths_outside_the_worktree_are_refused(rel: str) -> None:
    with pytest.raises(ConfigError):
        check_relative(rel)


def test_a_vanished_worktree_is_an_error(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    observer = Observer(gone)
    gone.rmdir()
    with pytest.raises(ConfigError, match="worktree .*/gone is gone"):
        observer.observe(["head"])
