"""The read set where agents look (issue 28, item 9): the files a search or a diff showed
(`grep -rn`, `rg`, `git grep`, `git diff`, `git log -p`, `git show`, a content-mode Grep
tool) join an automatic plan as reads, parsed from the PostToolUse payload's
`tool_response` (`model.shown`); the lockfiles beside a manifest the session read join as
lockfiles (`model.manifests`). Real hook processes against a real workspace owner, and the
pure parsers on their own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planfence_net.cluster.folder import ClusterDir
from planfence_net.net.syncclient import SyncSessions
from planfence_net.workspace.model.facts import plan_key
from planfence_net.workspace.model.manifests import beside
from planfence_net.workspace.model.payload import parse_payload
from planfence_net.workspace.model.shown import MAX_SHOWN, command_kinds, shown_paths
from planfence_net.workspace.plans.session import auto_plan, heads
from support.workspace import git, make_repo, payload, run_hook, served, write
from support.writers import no_writers

AUTO = ("--mode", "auto")
SESSION = "9f2c6a1e-4b7d-4e0a-9c55-2f1d8e7b3a10"
PLAN = auto_plan(SESSION)
FILES = {"lib.py": "def f():\n    return 1\n", "main.py": "import lib\n", "src/util.py": "u\n"}


def post(
    repo: Path,
    tool: str,
    tool_input: dict[str, Any],
    response: Any,
    n: int,
    cwd: Path | None = None,
) -> tuple[int, str]:
    data = {
        **payload("claude-read", repo),
        "cwd": str(cwd or repo),
        "hook_event_name": "PostToolUse",
        "tool_name": tool,
        "tool_input": tool_input,
        "tool_response": response,
        "tool_use_id": f"toolu_{n:04}",
    }
    return run_hook("claude", data, *AUTO)


def bash_out(
    repo: Path, command: str, stdout: str, n: int, cwd: Path | None = None
) -> tuple[int, str]:
    """Claude Code's PostToolUse of a Bash call that printed `stdout`."""
    response = {"stdout": stdout, "stderr": "", "interrupted": False, "isImage": False}
    return post(repo, "Bash", {"command": command, "description": "look"}, response, n, cwd)


def write_call(repo: Path, rel: str, n: int = 90) -> tuple[int, str]:
    data = {
        **payload("claude-read", repo),
        "tool_name": "Write",
        "tool_input": {"file_path": str(repo / rel), "content": "x\n"},
        "tool_use_id": f"toolu_{n:04}",
    }
    return no_writers(run_hook("claude", data, *AUTO))


def declared(repo: Path) -> dict[str, list[str]]:
    """The declaration of the session's plan record, as its owner holds it."""
    cdir = ClusterDir(repo / ".planfence")
    roster = cdir.roster()
    owner = roster.owner_of(plan_key(PLAN))
    assert owner is not None
    sessions = SyncSessions(roster, cdir.identity(owner))
    try:
        record = heads(sessions, roster, [plan_key(PLAN)], 5.0)[plan_key(PLAN)]
    finally:
        sessions.close()
    assert record is not None
    found: dict[str, list[str]] = record.body["declaration"]
    return found


def blocked_naming(repo: Path, line: str, reread: str) -> tuple[int, str]:
    return (
        2,
        "\n".join(
            [
                f"PlanFence blocked Write of {repo / 'main.py'}: plan '{PLAN}' (what this "
                "session read and wrote) is stale (relevant drift).",
                "Workspace drift detected since the previous trusted state:",
                line,
                f"Re-read {reread} (with Read, or cat in the shell), then retry the same call: "
                "the re-read records what the files hold now. If one changes again, stop and "
                "report.",
            ]
        )
        + "\n",
    )


def test_grep_rn_output_makes_its_files_reads_whose_drift_blocks(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        found = "./lib.py:1:def f():\n./src/util.py:1:u\n"
        assert bash_out(repo, "grep -rn 'def f\\|u' .", found, 1) == (0, "")
        assert write_call(repo, "main.py") == (0, "")
        write(repo, {"lib.py": "def f():\n    return 2\n"})  # another process
        assert write_call(repo, "main.py") == blocked_naming(
            repo, "- 1 previously inspected file changed: lib.py", "lib.py"
        )


def test_git_diff_from_a_subfolder_names_files_from_the_root(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    write(repo, {"lib.py": "def f():\n    return 7\n"})
    diff = git(repo, "diff")
    assert diff.startswith("diff --git a/lib.py b/lib.py\n")
    with served(repo):
        assert bash_out(repo, "git diff", diff, 1, cwd=repo / "src") == (0, "")
        write(repo, {"lib.py": "def f():\n    return 8\n"})
        assert write_call(repo, "main.py")[0] == 2


def test_a_content_mode_grep_tool_shows_its_files(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        response = {
            "mode": "content",
            "numFiles": 0,
            "filenames": [],
            "content": f"{repo / 'lib.py'}:1:def f():",
            "numLines": 1,
        }
        assert post(repo, "Grep", {"pattern": "def f", "output_mode": "content"}, response, 1) == (
            0,
            "",
        )
        names = {"mode": "files_with_matches", "filenames": [str(repo / "main.py")], "numFiles": 1}
        assert post(repo, "Grep", {"pattern": "import"}, names, 2) == (0, "")  # names only
        write(repo, {"main.py": "changed\n", "lib.py": "changed\n"})
        code, reason = write_call(repo, "src/util.py")
        assert code == 2 and "- 1 previously inspected file changed: lib.py\n" in reason


def test_a_lockfile_beside_a_read_manifest_is_relevant(tmp_path: Path) -> None:
    files = {
        **FILES,
        "package.json": '{"name": "app"}\n',
        "package-lock.json": '{"lockfileVersion": 3}\n',
    }
    repo = make_repo(tmp_path / "repo", files)
    with served(repo):
        read = {"file_path": str(repo / "package.json")}
        assert post(repo, "Read", read, {}, 1) == (0, "")
        assert declared(repo)["ws:file/package-lock.json"] == ["lockfile"]
        write(repo, {"package-lock.json": '{"lockfileVersion": 3, "packages": {}}\n'})
        expected = blocked_naming(repo, "- package-lock.json changed", "package-lock.json")
        assert write_call(repo, "main.py") == expected
        assert post(repo, "Read", read, {}, 2) == (0, "")  # the manifest again: not the lock
        assert write_call(repo, "main.py") == expected
        lock = {"file_path": str(repo / "package-lock.json")}
        assert post(repo, "Read", lock, {}, 3) == (0, "")  # the lockfile itself: it moves
        assert write_call(repo, "main.py") == (0, "")


@pytest.mark.parametrize(
    ("command", "stdout", "shown"),
    [
        ("grep -rn foo .", "./a.py:3:foo\n./b/c.py:9:  foo()\n", ("./a.py", "./b/c.py")),
        ("rg foo", "a.py:3:foo\n", ("a.py",)),
        ("git grep -n foo | head -5", "a.py:3:foo\n", ("a.py",)),
        ("cd src && grep -c foo *.py", "x.py:2\n", ("x.py",)),
        ("timeout 5 grep -rn foo", "a.py:1:foo\n", ("a.py",)),
        (
            "git --no-pager log -p -3",
            "commit 1\n\ndiff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@\n-x\n+y\n",
            (":a.py",),
        ),
        (
            "git -C . show HEAD",
            "diff --git a/old.py b/new.py\nrename from old.py\n",
            (":old.py", ":new.py"),
        ),
        ("git diff --cached", "diff --cc m.py\n", (":m.py",)),
        ("git diff", "diff --git a/x b/x\nnew file mode 100644\n--- /dev/null\n+++ b/x\n", (":x",)),
        (
            "diff -u a.txt b.txt",
            "--- a.txt\t2026-01-01\n+++ b.txt\t2026-01-02\n@@\n",
            ("a.txt", "b.txt"),
        ),
        ("grep -rl foo .", "./a.py\n./b.py\n", ()),  # names only: no content shown
        ("rg --files", "a.py\nb.py\n", ()),
        ("git diff --stat", " a.py | 2 +-\n 1 file changed\n", ()),
        ("cat a.py", "a.py:1:looks like a match\n", ()),  # not a search: its output is content
        ("echo grep", "a.py:1:x\n", ()),
    ],
)
def test_shown_paths_of_shell_output(command: str, stdout: str, shown: tuple[str, ...]) -> None:
    assert shown_paths("Bash", command, {"stdout": stdout, "stderr": ""}) == shown
    assert shown_paths("Bash", command, stdout) == shown  # Codex: the output as a string


def test_shown_paths_are_bounded_and_need_a_search() -> None:
    many = "".join(f"f{i}.py:1:x\n" for i in range(MAX_SHOWN + 10))
    assert len(shown_paths("Bash", "grep -rn x .", {"stdout": many})) == MAX_SHOWN
    assert shown_paths("Grep", None, {"mode": "count", "content": "a.py:3"}) == ()
    assert shown_paths("Grep", None, {"mode": "content", "content": "/r/a.py:3:x"}) == ("/r/a.py",)
    assert shown_paths("Bash", "grep x a.py", {"stderr": "b.py:1:x"}) == ()  # stdout only
    assert command_kinds("FOO=1 sudo -E git -c core.pager=cat diff") == {"git-diff"}
    data = {
        **payload("claude-bash", Path("/p")),
        "hook_event_name": "PostToolUse",
        "tool_response": {"stdout": "a.py:1:x\n"},
    }
    data["tool_input"]["command"] = "grep -n x a.py b.py"
    assert parse_payload("claude", json.dumps(data).encode()).shown == ("a.py",)
    data["hook_event_name"] = "PreToolUse"
    assert parse_payload("claude", json.dumps(data).encode()).shown == ()


def test_lockfiles_beside_a_manifest() -> None:
    assert beside("web/package.json") == [
        "web/package-lock.json",
        "web/npm-shrinkwrap.json",
        "web/yarn.lock",
        "web/pnpm-lock.yaml",
        "web/bun.lock",
        "package-lock.json",
        "npm-shrinkwrap.json",
        "yarn.lock",
        "pnpm-lock.yaml",
        "bun.lock",
    ]
    assert beside("pyproject.toml") == ["poetry.lock", "uv.lock", "pdm.lock"]
    assert beside("crates/a/Cargo.toml") == [
        "crates/a/Cargo.lock",
        "crates/Cargo.lock",
        "Cargo.lock",
    ]
    assert beside("go.mod") == ["go.sum"]
    assert beside("src/lib.py") == [] and beside("package-lock.json") == []
