"""True messages (issue 28, item 10): a branch or HEAD change never asks for a re-read, also
when files changed with it; a re-read spends the replan count only when it fixes what
blocks (never while the branch or HEAD drifted); "a file you already re-read has changed
again" is said only when one did; a write blocked by another plan's exclusive intent is
logged as a block. Real hook processes against a real workspace owner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from planfence_net.cluster.command import executable
from planfence_net.workspace.hook.text import stopped_line
from support.auto_hook import AUTO, PLAN, claude
from support.workspace import git, make_repo, payload, quiet, run_cli, run_hook, served, write
from support.writers import no_writers

FILES = {"lib.py": "def f():\n    return 1\n", "util.py": "u = 1\n", "main.py": "import lib\n"}
STOP = (
    f"The branch or HEAD changed: stop and tell the user. Only the user can re-base this plan "
    f"on it, with `{executable()} workspace refresh {PLAN}` (never run it yourself)."
)


def hook(repo: Path, event: str, tool: str, tool_input: dict[str, Any], n: int) -> tuple[int, str]:
    return no_writers(run_hook("claude", claude(event, tool, tool_input, repo, n), *AUTO))


def read(repo: Path, rel: str, n: int) -> tuple[int, str]:
    return hook(repo, "PostToolUse", "Read", {"file_path": str(repo / rel)}, n)


def write_call(repo: Path, rel: str = "main.py", n: int = 90) -> tuple[int, str]:
    return hook(repo, "PreToolUse", "Write", {"file_path": str(repo / rel), "content": "x\n"}, n)


def check(repo: Path) -> dict[str, Any]:
    code, out, err = run_cli("workspace", "check", PLAN, "--json", cwd=repo)
    report: dict[str, Any] = json.loads(out)
    assert code == report["exit_code"], err
    return report


def header(repo: Path, level: str) -> list[str]:
    return [
        f"PlanFence blocked Write of {repo / 'main.py'}: plan '{PLAN}' (what this session read "
        f"and wrote) is stale ({level} drift).",
        "Workspace drift detected since the previous trusted state:",
    ]


def test_a_branch_switch_with_a_file_change_says_only_stop(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert read(repo, "lib.py", 1) == (0, "")
        git(repo, "checkout", "-q", "-b", "other")
        write(repo, {"lib.py": "def f():\n    return 2\n"})
        code, reason = write_call(repo)
        assert code == 2
        assert reason.splitlines() == [
            *header(repo, "critical"),
            "- Branch changed: main -> other",
            "- 1 previously inspected file changed: lib.py",
            STOP,
        ]
        assert "Re-read" not in reason and "re-read" not in reason
        # A model that re-reads anyway: the file moves, the replan count does not (a re-read
        # fixes no branch switch), and the retry is told the truth again.
        assert read(repo, "lib.py", 2) == (0, "")
        assert check(repo)["trust"] == 1
        code, reason = write_call(repo)
        assert (code, reason.splitlines()) == (
            2,
            [*header(repo, "critical"), "- Branch changed: main -> other", STOP],
        )
        assert "already re-read" not in reason
        # The person re-bases it: the write goes through; the count was never spent.
        code, out, err = run_cli("workspace", "refresh", PLAN, "--yes", cwd=repo)
        assert (code, err) == (0, ""), out
        assert write_call(repo) == (0, "")


def test_changed_again_names_a_re_read_file_only_when_one_changed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert read(repo, "lib.py", 1) == (0, "")
        assert read(repo, "util.py", 2) == (0, "")
        write(repo, {"lib.py": "def f():\n    return 2\n"})
        assert write_call(repo)[0] == 2
        assert read(repo, "lib.py", 3) == (0, "")  # the re-read: the plan's one replan
        assert check(repo)["trust"] == 2
        assert write_call(repo) == (0, "")
        write(repo, {"util.py": "u = 2\n"})  # a file it read once, never re-read
        code, reason = write_call(repo)
        assert (code, reason.splitlines()) == (
            2,
            [
                *header(repo, "relevant"),
                "- 1 previously inspected file changed: util.py",
                "This plan was already re-made once after a re-read and has changed since: "
                "stop and report the drift above to the user; do not retry this call and do "
                "not re-read again.",
                stopped_line(PLAN),  # the stop holds until a person re-bases
            ],
        )


def test_a_branch_switch_after_the_replan_says_stop_not_changed_again(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert read(repo, "lib.py", 1) == (0, "")
        write(repo, {"lib.py": "def f():\n    return 2\n"})
        assert write_call(repo)[0] == 2
        assert read(repo, "lib.py", 2) == (0, "")
        assert check(repo)["trust"] == 2
        git(repo, "checkout", "-q", "-b", "other")
        code, reason = write_call(repo)
        assert (code, reason.splitlines()) == (
            2,
            [*header(repo, "critical"), "- Branch changed: main -> other", STOP],
        )


def test_a_write_held_by_an_exclusive_intent_is_logged_as_a_block(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        code, out, err = run_cli(
            "workspace", "trust", "holder", "--session", "another", "--lockfiles", "none",
            "--exclusive", "main.py", cwd=repo,
        )  # fmt: skip
        assert (code, quiet(err)) == (0, ""), out + err
        assert read(repo, "lib.py", 1) == (0, "")
        code, reason = write_call(repo)
        assert code == 2 and "is held exclusively by plan 'holder'" in reason, reason
        code, out, err = run_cli("workspace", "show", PLAN, "--json", cwd=repo)
        assert code == 0, out + err
        [row] = [r for r in json.loads(out)["history"] if r["event"] in ("allowed", "blocked")]
        assert (row["event"], row["exit"], row["class"], row["tool"]) == (
            "blocked",
            2,
            "none",
            "Write",
        )
        log = (repo / ".planfence" / "logs" / "ws.jsonl").read_text().splitlines()
        [line] = [json.loads(x) for x in log if '"event":"check"' in x and PLAN in x]
        assert line["held"] == reason.rstrip("\n")


def test_an_explicit_plan_after_a_branch_switch_is_told_only_to_stop(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        code, out, err = run_cli(
            "workspace", "trust", "fix", "--read", "lib.py", "--lockfiles", "none", cwd=repo
        )
        assert code == 0, out + err
        git(repo, "checkout", "-q", "-b", "other")
        write(repo, {"lib.py": "def f():\n    return 2\n"})
        data = {**payload("claude-write", repo), "tool_input": {"file_path": str(repo / "main.py")}}
        code, reason = no_writers(run_hook("claude", data))
        assert (code, reason.splitlines()) == (
            2,
            [
                f"PlanFence blocked Write of {repo / 'main.py'}: plan 'fix' is stale (critical "
                "drift).",
                "Workspace drift detected since the previous trusted state:",
                "- Branch changed: main -> other",
                "- 1 previously inspected file changed: lib.py",
                STOP.replace(PLAN, "fix"),
            ],
        )
