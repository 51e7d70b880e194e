"""Through the real hook process, from a stale session: the writes that passed as reads
(H1, H5, H6) are blocked, and the commands an agent investigates with are let through."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.workspace import git, make_repo, payload, run_cli, run_hook, served, write

FILES = {
    "lib.py": "def f():\n    return 1\n",
    "src/a.py": "import lib\n",
    "f.json": '{"a": 1}\n',
    "-i": "a file named like an option\n",
}


def _stale(repo: Path) -> None:
    """A plan that read lib.py, then lib.py changed under it."""
    code, out, err = run_cli(
        "workspace", "trust", "fix", "--read", "lib.py", "--lockfiles", "none", cwd=repo
    )
    assert code == 0, out + err
    write(repo, {"lib.py": "def f():\n    return 2\n"})


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    repo = make_repo(tmp_path_factory.mktemp("plain") / "repo", FILES)
    with served(repo):
        _stale(repo)
        yield repo


@pytest.fixture(scope="module")
def textconv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A repository whose .gitattributes selects a textconv driver its .git/config defines."""
    repo = make_repo(tmp_path_factory.mktemp("textconv") / "repo", {**FILES, ".gitattributes": "*.py diff=evil\n"})  # fmt: skip
    git(repo, "config", "diff.evil.textconv", "sh -c 'touch pwned; cat \"$0\"'")
    with served(repo):
        _stale(repo)
        yield repo


def _bash(repo: Path, command: str) -> tuple[int, str]:
    return run_hook("claude", payload("claude-bash", repo, command=command))


@pytest.mark.parametrize(
    "command",
    [
        "sed -n 1p -i -e '1i X' src/a.py",
        "sed -n 1p -e 'w src/a.py' f.json",
        "sed -n 1p --in-place=.bak src/a.py",
        "sed -n 1p -e '1e touch x' f.json",
        "sed -n 1p *",
    ],
)
def test_h1_and_h6_are_blocked_from_a_stale_session(plain: Path, command: str) -> None:
    code, reason = _bash(plain, command)
    assert code == 2, reason
    assert "plan 'fix' is stale" in reason


def test_h5_is_blocked_where_git_would_start_a_textconv_driver(textconv: Path) -> None:
    code, reason = _bash(textconv, "git show HEAD")
    assert code == 2, reason
    assert "plan 'fix' is stale" in reason
    assert _bash(textconv, "git diff src/a.py")[0] == 2  # the same driver
    assert _bash(textconv, "git status") == (0, "")  # status shows no diff


@pytest.mark.parametrize(
    "command",
    [
        "git status",
        "git diff src/a.py",
        "git log --oneline",
        "git grep needle",
        "grep -rn needle .",
        "find . -name '*.py'",
        "jq . f.json",
        "git show HEAD",
    ],
)
def test_investigation_is_let_through_from_a_stale_session(plain: Path, command: str) -> None:
    if command.startswith("jq") and not shutil.which("jq"):
        pytest.skip("jq is not installed")
    assert _bash(plain, command) == (0, "")
    assert _bash(plain, "touch src/a.py")[0] == 2  # the session is stale indeed
