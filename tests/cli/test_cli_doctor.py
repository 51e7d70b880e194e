"""`planfence doctor`: one health check for a folder, each failure named with its fix, and a
non-zero exit when anything would block the agents or let their calls through unchecked:
a folder no owner serves, hooks not installed, Codex's hooks untrusted, no git gate."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cluster import PLANFENCE, REPO
from support.workspace import make_repo, run_cli, served


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh HOME and CODEX_HOME, and a PATH without codex."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CODEX_HOME", str(home / ".codex"))
    monkeypatch.setenv("PATH", str(PLANFENCE.parent) + ":/usr/bin:/bin")
    yield home


def doctor(repo: Path) -> tuple[int, list[str], str]:
    code, out, err = run_cli("doctor", "--project", repo)
    return code, out.splitlines(), err


def test_a_folder_no_owner_serves_fails_first_on_the_owner(tmp_path: Path, home: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    code, lines, err = doctor(repo)
    assert code == 1
    assert lines == [
        f"FAIL  owner: no workspace owner serves {repo}: every write there will be blocked",
        f"      fix: planfence workspace serve {repo}",
        f"FAIL  hooks: no PlanFence hook for Claude Code or Codex in {repo}: the agents' tool "
        "calls there are not checked",
        f"      fix: planfence hook install claude --project {repo} (or codex)",
        f"FAIL  git gate: no PlanFence hook in {repo}/.git/hooks/pre-commit",
        f"      fix: planfence hook install git --project {repo}",
    ]
    assert err == "error: 3 of 3 checks failed: owner, hooks, git gate\n"


def test_served_without_hooks_fails_on_the_hooks(tmp_path: Path, home: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    with served(repo):
        assert run_cli("hook", "install", "git", "--project", repo)[0] == 0
        code, lines, err = doctor(repo)
    assert code == 1
    assert lines[0] == (
        f"ok    owner: ws of the cluster {repo}/.planfence serves {repo} and answers"
    )
    assert lines[1].startswith("FAIL  hooks: no PlanFence hook for Claude Code or Codex")
    assert lines[3] == f"ok    git gate: {repo}/.git/hooks/pre-commit runs {PLANFENCE}"
    assert err == "error: 1 of 3 checks failed: hooks\n"


def test_codex_hooks_untrusted_fail_until_trusted(tmp_path: Path, home: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    config = home / ".codex" / "config.toml"
    with served(repo):
        for agent in ("codex", "git"):
            assert run_cli("hook", "install", agent, "--project", repo)[0] == 0
        code, lines, err = doctor(repo)
        assert (code, err) == (1, "error: 1 of 4 checks failed: codex trust\n")
        assert lines[1:4] == [
            "ok    codex hooks: PreToolUse and PostToolUse are installed; the command runs",
            f"FAIL  codex trust: {config} does not exist: Codex has recorded no trust in the "
            "project or our hooks (no codex to ask)",
            f"      fix: planfence hook install codex --project {repo} --trust",
        ]
        assert run_cli("hook", "install", "codex", "--project", repo, "--trust")[0] == 0
        code, out, err = run_cli("doctor", "--project", repo, "--json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["ok"] is True
    assert [(c["name"], c["ok"], c["fix"]) for c in report["checks"]] == [
        ("owner", True, ""),
        ("codex hooks", True, ""),
        ("codex trust", True, ""),
        ("git gate", True, ""),
    ]


def test_a_claude_hook_that_fails_open_fails(tmp_path: Path, home: Path) -> None:
    """The hooks are installed, but one would let a call through when it cannot answer."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    settings = repo / ".claude" / "settings.local.json"
    with served(repo):
        for agent in ("claude", "git"):
            assert run_cli("hook", "install", agent, "--project", repo)[0] == 0
        assert doctor(repo)[0] == 0
        config = json.loads(settings.read_text())
        del config["hooks"]["PreToolUse"][0]["hooks"][0]["onFailure"]
        settings.write_text(json.dumps(config))
        code, lines, err = doctor(repo)
    assert (code, err) == (1, "error: 1 of 3 checks failed: claude hooks\n")
    assert lines[1] == (
        'FAIL  claude hooks: fails open: a PlanFence handler lacks "onFailure": "block": '
        "Claude Code lets the call through when it cannot start or times out"
    )
    assert lines[2] == f"      fix: planfence hook install claude --project {repo}"


def test_a_codex_that_does_not_answer_is_a_failed_check(tmp_path: Path, home: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    mute = tmp_path / "mute-codex"  # reads the first request, then exits without answering
    mute.write_text("#!/bin/sh\nread request\n")
    mute.chmod(0o755)
    with served(repo):
        assert run_cli("hook", "install", "codex", "--project", repo)[0] == 0
        code, out, err = run_cli("doctor", "--project", repo, "--codex", mute)
    assert (code, err) == (1, "error: 2 of 3 checks failed: codex trust, git gate\n")
    assert out.splitlines()[1:3] == [
        f"FAIL  codex trust: cannot ask Codex: {mute} app-server exited before answering "
        "initialize",
        "      fix: pass --codex PATH",
    ]


def pinned_codex() -> Path:
    """The Codex CLI scripts/install-agents installs ($PLANFENCE_AGENTS_DIR or .agents/)."""
    prefix = os.environ.get("PLANFENCE_AGENTS_DIR") or str(REPO / ".agents")
    return Path(prefix) / "node_modules" / ".bin" / "codex"


@pytest.mark.agents
def test_the_real_codex_is_asked_whether_it_trusts_our_hooks(tmp_path: Path, home: Path) -> None:
    codex = pinned_codex()
    if not os.access(codex, os.X_OK):
        pytest.skip("the pinned Codex CLI is not installed: run scripts/install-agents")
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    (home / ".codex").mkdir()  # Codex refuses a CODEX_HOME that does not exist
    with served(repo):
        for agent in ("codex", "git"):
            assert run_cli("hook", "install", agent, "--project", repo)[0] == 0
        code, out, err = run_cli("doctor", "--project", repo, "--codex", codex)
        assert (code, err) == (1, "error: 1 of 4 checks failed: codex trust\n")
        assert out.splitlines()[2] == (
            f"FAIL  codex trust: untrusted: the project {repo} is not trusted: Codex ignores "
            "its .codex/ config"
        )
        trusted = run_cli(
            "hook", "install", "codex", "--project", repo, "--trust", "--codex", codex
        )
        assert trusted[0] == 0, trusted
        code, out, err = run_cli("doctor", "--project", repo, "--codex", codex)
    assert (code, err) == (0, ""), out
    assert out.splitlines()[2] == "ok    codex trust: Codex lists our hooks enabled and trusted"
