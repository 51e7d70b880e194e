"""`hook install --recovery-policy`: the recovery policy is appended to the project's
CLAUDE.md or AGENTS.md once, and nothing else in the file changes."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from planfence_net.workspace.installers.recovery import POLICY, add_policy
from support.cluster import PLANFENCE
from support.workspace import make_repo, run_cli

THEIRS = "# Team rules\n\nUse tabs.\n\n## Plan: x\nRecord dependencies:\n- a @ abcdef0"  # no EOL


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh HOME and CODEX_HOME, and a PATH without codex."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CODEX_HOME", str(home / ".codex"))
    monkeypatch.setenv("PATH", str(PLANFENCE.parent) + ":/usr/bin:/bin")
    yield home


def test_the_policy_is_appended_once_and_the_rest_stays_byte_for_byte(
    tmp_path: Path, home: Path
) -> None:
    repo = make_repo(tmp_path / "repo", {"a": "1\n"})
    (repo / "AGENTS.md").write_text(THEIRS)
    os.chmod(repo / "AGENTS.md", 0o640)
    code, out, err = run_cli(
        "hook", "install", "codex", "--project", repo, "--recovery-policy", cwd=repo
    )
    assert (code, err.startswith("warning: no workspace owner serves ")) == (0, True), out + err
    assert out.splitlines()[-1] == f"added the recovery policy to {repo}/AGENTS.md"
    assert (repo / "AGENTS.md").read_text() == THEIRS + "\n\n" + POLICY
    assert oct((repo / "AGENTS.md").stat().st_mode & 0o777) == "0o640"
    code, out, err = run_cli(
        "hook", "install", "codex", "--project", repo, "--recovery-policy", "--json", cwd=repo
    )
    assert code == 0, out + err
    assert json.loads(out)["recovery_policy"] == {
        "path": f"{repo}/AGENTS.md",
        "status": "present",
    }
    assert (repo / "AGENTS.md").read_text() == THEIRS + "\n\n" + POLICY  # never twice


def test_claude_gets_claude_md_created_or_through_its_symlink(tmp_path: Path, home: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a": "1\n"})
    code, out, err = run_cli(
        "hook", "install", "claude", "--project", repo, "--recovery-policy", cwd=repo
    )
    assert code == 0, out + err
    assert out.splitlines()[-1] == f"added the recovery policy to {repo}/CLAUDE.md"
    assert (repo / "CLAUDE.md").read_text() == POLICY
    # a CLAUDE.md that links to AGENTS.md stays a link; the policy lands in AGENTS.md once
    other = make_repo(tmp_path / "other", {"a": "1\n"})
    (other / "AGENTS.md").write_text("# Rules\n")
    (other / "CLAUDE.md").symlink_to("AGENTS.md")
    assert add_policy("claude", other).status == "added"
    assert add_policy("codex", other).status == "present"
    assert (other / "CLAUDE.md").is_symlink()
    assert (other / "AGENTS.md").read_text() == "# Rules\n\n" + POLICY


def test_a_policy_of_the_teams_own_is_left_alone(tmp_path: Path, home: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a": "1\n"})
    text = "# Rules\n\n### Recovery Policy\n- halt on a second mismatch\n"
    (repo / "AGENTS.md").write_text(text)
    code, out, err = run_cli(
        "hook", "install", "codex", "--project", repo, "--recovery-policy", cwd=repo
    )
    assert code == 0, out + err
    assert out.splitlines()[-1] == (
        f"{repo}/AGENTS.md has a recovery policy of its own (line 3); left as it is"
    )
    assert (repo / "AGENTS.md").read_text() == text
    # without the flag nothing is written at all
    bare = make_repo(tmp_path / "bare", {"a": "1\n"})
    assert run_cli("hook", "install", "claude", "--project", bare, cwd=bare)[0] == 0
    assert not (bare / "CLAUDE.md").exists()


def test_an_unreadable_instructions_file_is_refused_in_one_line(tmp_path: Path, home: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a": "1\n"})
    (repo / "AGENTS.md").write_bytes(b"\xff\xfe not utf-8\n")
    code, out, err = run_cli(
        "hook", "install", "codex", "--project", repo, "--recovery-policy", cwd=repo
    )
    assert code == 1
    assert err == (
        f"error: cannot read {repo}/AGENTS.md: 'utf-8' codec can't decode byte 0xff in "
        f"position 0: invalid start byte; not touching it\n"
    )
    assert (repo / "AGENTS.md").read_bytes() == b"\xff\xfe not utf-8\n"
