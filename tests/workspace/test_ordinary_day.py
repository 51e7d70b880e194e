"""An ordinary day with PlanFence, as real processes (a served worktree, the agent's hook, the
git gate), the refusals a person met that were false:

- commits of what a session's plan holds (the person's commit of the agent's edit, the
  agent's own) move HEAD inside the plan; a commit that brings in other content is drift,
  named; the commit gate's advice names the step that fixes what it refuses;
- a plan trusted without a session never captures a session that started its own;
- `hook status` is active only where an owner serves the folder; `hook install` says so;
- `workspace serve` refuses a missing path and joins a subfolder to its served repository;
- an unreadable file is refused with its reason, and its later changes show.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from planfence_net.cluster.command import executable
from planfence_net.workspace.model.commits import foreign
from support.auto_hook import AUTO, PLAN, SESSION, claude, read, write_call
from support.cluster import PLANFENCE
from support.workspace import (
    git,
    make_repo,
    run_cli,
    run_hook,
    run_hook_output,
    served,
    stop,
    write,
)
from support.writers import without_writers

FILES = {"lib.py": "def f():\n    return 1\n", "main.py": "import lib\n"}
BYPASS = "To commit anyway, `git commit --no-verify` skips this check: that is your decision."


def commit(root: Path, *paths: str) -> tuple[int, str]:
    """`git add PATHS` (all when none) and `git commit`; returns (exit code, stderr)."""
    git(root, "add", *(paths or ("-A",)))
    proc = subprocess.run(
        ["git", "commit", "-q", "-m", "change"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode, proc.stderr


def bash(repo: Path, command: str, event: str = "PreToolUse", n: int = 2) -> tuple[int, str]:
    data = claude(event, "Bash", {"command": command, "description": "run"}, repo, n)
    return run_hook("claude", data, *AUTO)


def edit(repo: Path, rel: str, text: str, n: int) -> None:
    """The agent's Write of `rel`: let through, landed, recorded."""
    assert write_call(repo, rel, n=n) == (0, "")
    write(repo, {rel: text})
    assert write_call(repo, rel, "PostToolUse", n=n) == (0, "")


def test_commits_of_the_sessions_own_work_never_stop_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert run_cli("hook", "install", "git", "--project", repo)[0] == 0
        assert read(repo, "lib.py") == (0, "")
        edit(repo, "main.py", "import lib\nlib.f()\n", 1)
        assert commit(repo) == (0, "")  # the person commits the agent's edit
        edit(repo, "main.py", "import lib\nprint(lib.f())\n", 3)
        assert commit(repo) == (0, "")  # no refusal at the next commit either
        edit(repo, "lib.py", "def f():\n    return 2\n", 5)
        assert bash(repo, "git commit -qam wip", n=4) == (0, "")  # the agent's own commit
        git(repo, "commit", "-qam", "wip")  # what the Bash call runs (the gate too)
        assert bash(repo, "git commit -qam wip", "PostToolUse", n=4) == (0, "")
        edit(repo, "main.py", "import lib\n", 6)
        assert commit(repo) == (0, "")
        # A commit that brings in another agent's change: blocked, naming it.
        write(repo, {"other.py": "x = 1\n"})
        git(repo, "add", "other.py")
        git(repo, "commit", "-qm", "another agent")
        code, reason = write_call(repo, "main.py", n=7)
        assert code == 2
        lines = without_writers(reason).splitlines()
        assert lines[2].startswith("- HEAD changed: ")
        assert lines[3] == "- The new HEAD brings in content this plan does not hold: other.py"
        assert lines[-1] == (
            "The branch or HEAD changed: stop and tell the user. Only the user can re-base "
            f"this plan on it, with `{executable()} workspace refresh {PLAN}` (never run it "
            "yourself)."
        )


def test_the_gate_refusing_a_moved_head_names_refresh(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert run_cli("hook", "install", "git", "--project", repo)[0] == 0
        edit(repo, "main.py", "import lib\nlib.f()\n", 1)
        write(repo, {"other.py": "x = 1\n"})
        assert commit(repo, "other.py") == (0, "")  # not a target: the gate lets it through
        code, err = commit(repo, "main.py")
        assert code == 1
        lines = err.splitlines()
        assert lines[1] == f"main.py is a target of plan '{PLAN}', which is stale (critical drift)."
        assert lines[4] == "- The new HEAD brings in content this plan does not hold: other.py"
        assert lines[-2] == (
            f"HEAD moved past what the plan holds: re-reading cannot fix that. Check the "
            f"commits, then re-base the plan with `planfence workspace refresh {PLAN}` and "
            f"commit again."
        )
        assert lines[-1] == BYPASS
        code, out, err = run_cli("workspace", "refresh", PLAN, "--yes", cwd=repo)
        assert code == 0, out + err
        assert commit(repo, "main.py") == (0, "")


def session_start(repo: Path, session: str = SESSION) -> None:
    """Claude Code's SessionStart of `session` in `repo`, as a fresh hook process."""
    start = {
        "session_id": session,
        "transcript_path": None,
        "cwd": str(repo),
        "hook_event_name": "SessionStart",
        "source": "startup",
    }
    code, out, err = run_hook_output("claude", start, *AUTO)
    assert (code, err) == (0, ""), out


def test_a_shared_plan_never_captures_a_session_that_started_its_own(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {**FILES, "README.md": "hi\n"})
    with served(repo):
        # A plan trusted without a session (by a person, an agent's shell, `mcp serve`).
        code, out, err = run_cli("workspace", "trust", "shared", "--read", "README.md", cwd=repo)
        assert code == 0, out + err
        session_start(repo)  # the session starts its own plan all the same
        assert read(repo, "lib.py") == (0, "")  # recorded in the session's plan
        write(repo, {"lib.py": "def f():\n    return 2\n"})  # another process
        code, reason = write_call(repo, "main.py")
        assert code == 2 and f"plan '{PLAN}'" in reason, reason
        assert "- 1 previously inspected file changed: lib.py" in reason
        # The shared plan is not this session's, nor its subagent's: its drift stops neither.
        assert read(repo, "lib.py", 3) == (0, "")
        write(repo, {"README.md": "changed\n"})
        assert write_call(repo, "main.py") == (0, "")
        tool = {"file_path": str(repo / "main.py"), "content": ""}
        task = {**claude("PreToolUse", "Write", tool, repo, 9), "agent_id": "sub1"}
        assert run_hook_output("claude", task, *AUTO)[::2] == (0, "")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh HOME (the user's Claude Code settings and PlanFence's served records)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    return home


def claude_status(repo: Path) -> tuple[int, dict[str, Any]]:
    code, out, err = run_cli("hook", "status", "claude", "--project", repo, "--json")
    assert err == "", err
    [found] = json.loads(out)["agents"]
    return code, found


def test_hook_status_is_active_only_where_an_owner_serves(tmp_path: Path, home: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    serve = f"planfence workspace serve {repo}"
    code, out, err = run_cli("hook", "install", "claude", "--project", repo)
    assert code == 0, out + err
    assert err == (
        f"warning: no workspace owner serves {repo}: every write there will be blocked\n"
        f"  to activate: {serve}\n"
    )
    code, found = claude_status(repo)
    assert (code, found["state"], found["active"], found["step"]) == (
        1,
        "not served",
        False,
        serve,
    )
    with served(repo):
        code, found = claude_status(repo)
        assert (code, found["state"]) == (0, "active"), found
        code, out, err = run_cli("hook", "install", "claude", "--project", repo)
        assert (code, err) == (0, ""), out + err
    code, found = claude_status(repo)  # its folder is there, its owner is not
    assert (code, found["state"], found["step"]) == (1, "not served", serve)
    assert found["detail"].startswith(f"the workspace owner ws of {repo} does not answer (")


def test_serve_refuses_a_missing_path_and_joins_a_subfolder_to_its_repository(
    tmp_path: Path, home: Path
) -> None:
    repo = make_repo(tmp_path / "repo", {**FILES, "src/app.py": "x = 1\n"})
    typo = tmp_path / "rpeo"
    assert run_cli("workspace", "serve", typo) == (
        1,
        "",
        f"error: {typo} does not exist: nothing to serve (check the path)\n",
    )
    assert not typo.exists()
    assert run_cli("workspace", "serve", repo / "lib.py")[::2] == (
        1,
        f"error: {repo / 'lib.py'} is not a folder: serve the folder that holds it\n",
    )
    with served(repo):
        pass  # the repository is served (and uses PlanFence) from now on
    with served(repo / "src") as line:  # a subfolder joins it: one cluster, the whole repo
        assert f" serving {repo} on " in line, line
        assert line.endswith(f"(cluster folder {repo / '.planfence'})\n"), line
        assert not (repo / "src" / ".planfence").exists()
        assert read(repo, "src/app.py") == (0, "")
        assert write_call(repo, "lib.py") == (0, "")  # the rest of the repo is the same plan's


@contextmanager
def served_without_root_reads(repo: Path) -> Iterator[None]:
    """`workspace serve REPO` as a real process that file permissions bind: as root, without
    the capabilities that let root read any file (setpriv drops them before the exec)."""
    prefix = []
    if os.geteuid() == 0:
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    proc = subprocess.Popen(
        [*prefix, str(PLANFENCE), "workspace", "serve", str(repo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "serving" in line, line + proc.stdout.read()
        yield
    finally:
        stop(proc)


def test_an_unreadable_file_is_refused_with_its_reason_and_its_changes_show(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", {**FILES, "secret.txt": "one\n"})
    (repo / "secret.txt").chmod(0)
    with served_without_root_reads(repo):
        code, out, err = run_cli("workspace", "trust", "p", "--read", "secret.txt", cwd=repo)
        assert (code, out, err) == (
            1,
            "",
            "error: declared file refused by its owner: ws:secret.txt (cannot read it: "
            "Permission denied)\n",
        )
        # A session that read it (as its agent could, another user) sees its next change.
        assert read(repo, "secret.txt") == (0, "")
        assert write_call(repo, "main.py") == (0, "")
        (repo / "secret.txt").write_text("two\n")  # the owner still cannot read it
        code, reason = write_call(repo, "main.py", n=2)
        assert code == 2 and "- 1 previously inspected file changed: secret.txt" in reason


def test_a_new_head_is_foreign_where_it_differs_from_what_the_plan_holds() -> None:
    held = {
        "a.py": {"hash": "git:aa", "size": 1, "mode": "100644"},
        "gone.py": {"missing": True},
        "odd": {"missing": True, "kind": "not a regular file"},
        "big.bin": {"refused": "over the cap", "size": 9, "stat": [1, 2, 3]},
    }
    assert foreign({"a.py": "git:aa", "gone.py": None}, held) == []
    changed = {"a.py": "git:ab", "gone.py": "git:cc", "odd": None, "big.bin": "git:dd"}
    assert foreign({**changed, "new.py": "git:ee"}, held) == [
        "a.py",
        "big.bin",
        "gone.py",
        "new.py",
        "odd",
    ]
    assert foreign({"a.py": None}, held) == ["a.py"]
