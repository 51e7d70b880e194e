"""Exclusivity with bounds (issue 28, H3): an agent's exclusive intent is bound to its session,
its lease is capped by the team's maximum, and it may hold only so many files exclusively;
every expiry is shown as a date and time. The person's own `trust` keeps every choice.

Run through the CLI in-process against a served worktree: an agent's shell is told by its
client's markers (Codex's CODEX_THREAD_ID names the session; Claude Code's CLAUDECODE=1 only
says it is an agent's)."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from planfence_net.workspace.model.intents import until_text
from support.workspace import make_repo, payload, run_cli, run_hook, served

SESSION = "sess-5d1e"
FILES = {f"src/f{i}.py": f"v = {i}\n" for i in range(3)}
WEEK = "604800"
DATE = re.compile(r"until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(in (\S+ \S+)\)")


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        yield repo


def trust(repo: Path, plan: str, *args: str) -> tuple[int, str, str]:
    return run_cli(
        "workspace", "trust", plan, "--exclusive", "src/f0.py", "--lockfiles", "none", *args,
        cwd=repo,
    )  # fmt: skip


def test_a_week_long_lease_from_an_agent_is_refused(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODEX_THREAD_ID", SESSION)
    code, out, err = trust(repo, "lock", "--session", SESSION, "--lease", WEEK)
    assert (code, out) == (1, "")
    assert err.startswith("error: PlanFence refused --lease 604800: an agent's intents last at ")
    assert "at most 3600 s ([intents] max_lease in " in err


def test_an_agents_exclusive_intent_needs_its_session(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAUDECODE", "1")  # an agent whose session the command cannot tell
    code, out, err = trust(repo, "lock")
    assert (code, out) == (1, "")
    assert "refused --exclusive without --session" in err


def test_an_agent_holds_at_most_max_exclusive_files(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    roster = repo / ".planfence" / "cluster.toml"
    roster.write_text(roster.read_text() + "\n[intents]\nmax_exclusive = 1\n")
    monkeypatch.setenv("CODEX_THREAD_ID", SESSION)
    code, _, err = trust(repo, "lock", "--session", SESSION, "--exclusive", "src/f1.py")
    assert code == 1
    assert "refused 2 exclusive files: an agent's plan may hold at most 1 " in err
    code, out, err = trust(repo, "lock", "--session", SESSION)  # one file is within the bound
    assert code == 0, err


def test_the_cluster_default_lease_is_capped_for_an_agent_and_shown_as_a_date(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    roster = repo / ".planfence" / "cluster.toml"
    roster.write_text(roster.read_text() + "\n[intents]\nlease = 86400\n")
    monkeypatch.setenv("CODEX_THREAD_ID", SESSION)
    code, out, err = trust(repo, "lock", "--session", SESSION)
    assert code == 0, err
    [published] = [line for line in out.splitlines() if "published (exclusive)" in line]
    found = DATE.search(published)
    assert found is not None and found.group(1) in ("60 min", "1.0 h"), published


def test_the_person_keeps_a_week_long_exclusive_lease(repo: Path) -> None:
    code, out, err = trust(repo, "lock", "--lease", WEEK)
    assert code == 0, err
    [published] = [line for line in out.splitlines() if "published (exclusive)" in line]
    found = DATE.search(published)
    assert found is not None and found.group(1) in ("168.0 h", "167.9 h"), published


def test_until_text_says_the_date_and_what_remains() -> None:
    assert until_text(1796142600.0) == "2026-12-01 16:30:00 UTC"
    assert until_text(1796142600.0, 1796140800.0) == "2026-12-01 16:30:00 UTC (in 30 min)"
    assert until_text(1796142600.0 + 6 * 86400, 1796142600.0) == (
        "2026-12-07 16:30:00 UTC (in 144.0 h)"
    )


def test_the_person_ends_any_plans_intents_and_an_agent_may_not(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODEX_THREAD_ID", SESSION)
    assert trust(repo, "lock", "--session", SESSION)[0] == 0  # the agent's exclusive intent
    code, out, err = run_cli("workspace", "release", "lock", cwd=repo)
    assert (code, out) == (1, "")
    assert "refused workspace release: ending a plan's intents" in err
    code, _, err = trust(repo, "other", "--session", SESSION)  # still held by `lock`
    assert code == 1 and "plan 'lock' (session sess-5d1) in " in err, err
    assert "already intends it exclusively" in err
    monkeypatch.delenv("CODEX_THREAD_ID")  # the person
    assert run_cli("workspace", "release", "lock", cwd=repo) == (
        0,
        "released lock: 1 intent ended\n",
        "",
    )
    assert (
        run_cli("workspace", "release", "lock", cwd=repo)[1] == "released lock: 0 intents ended\n"
    )
    monkeypatch.setenv("CODEX_THREAD_ID", SESSION)
    code, _, err = trust(repo, "other", "--session", SESSION)  # free again
    assert code == 0, err


def test_the_hook_blocks_release_in_an_agents_shell_in_every_spelling(repo: Path) -> None:
    """Release is the person's: the hook blocks it before it runs, with the reason."""
    for command in (
        "planfence workspace release lock",
        f"{sys.executable} -m planfence_net workspace 'release' lock",
        "/opt/x/bin/planfence workspace rel\\ease lock",
    ):
        data = {**payload("claude-bash", repo), "tool_input": {"command": command}}
        code, reason = run_hook("claude", data)
        assert code == 2, command
        assert "`planfence workspace release` ends a plan's intents" in reason, reason
