"""The commit gate: `planfence hook install git` and real `git commit`s against real owners
on 127.0.0.1 (`workspace serve`, or a team's `cluster up`)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from planfence_net.cluster.command import executable
from support.auto_hook import PLAN, read, write_call
from support.cluster import ClusterHandle
from support.team import A, trust
from support.workspace import git, make_repo, quiet, run_cli, served, write

BYPASS = "To commit anyway, `git commit --no-verify` skips this check: that is your decision."
OUTSIDE = (  # who changed lib.py, as the agents' hook says it: a plain process, and its diff
    "Who changed what:\n"
    "- lib.py: outside any fenced session, TIME; diff since the version the plan read:\n"
    "    @@ -1 +1 @@\n"
    "    -v = 1\n"
    "    +v = 2  # another process\n"
)


def timeless(text: str) -> str:
    """`text` with each UTC time a writer line names as TIME."""
    return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", "TIME", text)


def commit(root: Path, *extra: str) -> tuple[int, str]:
    """`git add -A` and `git commit` in `root`; returns (exit code, stderr)."""
    git(root, "add", "-A")
    proc = subprocess.run(
        ["git", "commit", "-q", "-m", "change", *extra],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode, proc.stderr


def test_install_keeps_chains_and_restores_an_existing_hook(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"lib.py": "v = 1\n"})
    hooks = repo / ".git" / "hooks"
    ran = tmp_path / "theirs.log"
    theirs = f"#!/bin/sh\necho ran >> {ran}\n"
    (hooks / "pre-commit").write_text(theirs)
    (hooks / "pre-commit").chmod(0o755)
    for _ in range(2):  # twice: one copy, theirs kept once
        code, out, err = run_cli("hook", "install", "git", "--project", repo)
        assert (code, err) == (0, ""), out + err
    assert out == (
        f"installed the PlanFence pre-commit hook in {hooks / 'pre-commit'}\n"
        f"it runs the hook that was there ({hooks / 'pre-commit.planfence-chained'}) after its "
        f"own check\n"
    )
    assert (hooks / "pre-commit.planfence-chained").read_text() == theirs
    code, out, _ = run_cli("hook", "status", "git", "--project", repo)
    assert (code, out) == (  # no owner serves it: every commit would be refused
        1,
        f"git: not active: no workspace owner serves {repo}: every commit there will be "
        f"refused; planfence workspace serve {repo}\n",
    )
    # Installing marked the repository as one that uses PlanFence: nothing serves it yet, so
    # the commit is refused (their hook does not run); served, it goes through, then theirs.
    write(repo, {"lib.py": "v = 2\n"})
    code, err = commit(repo)
    assert (code, err) == (
        1,
        f"PlanFence refused the commit: {repo} is a worktree of a repository that uses "
        f"PlanFence, but no workspace owner serves it (planfence workspace join {repo}). "
        f"{BYPASS}\n",
    )
    assert not ran.exists()
    with served(repo):
        code, out, _ = run_cli("hook", "status", "git", "--project", repo)
        assert code == 0 and out.startswith(f"git: active: {hooks / 'pre-commit'} runs ")
        assert commit(repo) == (0, "")
    assert ran.read_text() == "ran\n"
    assert run_cli("hook", "uninstall", "git", "--project", repo)[:2] == (
        0,
        f"removed the PlanFence pre-commit hook from {hooks / 'pre-commit'}\n",
    )
    assert (hooks / "pre-commit").read_text() == theirs
    assert not (hooks / "pre-commit.planfence-chained").exists()
    assert run_cli("hook", "status", "git", "--project", repo)[0] == 1


def test_a_commit_of_a_stale_plans_target_is_refused_until_the_re_trust(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"lib.py": "v = 1\n", "main.py": "import lib\n"})
    with served(repo):
        assert run_cli("hook", "install", "git", "--project", repo)[0] == 0
        args = ("--session", A, "--read", "main.py", "--target", "lib.py", "--lockfiles", "none")
        code, out, err = run_cli("workspace", "trust", "parser", *args, cwd=repo)
        assert code == 0, out + err
        write(repo, {"lib.py": "v = 2  # another process\n"})
        code, err = commit(repo)
        assert (code, timeless(err)) == (
            1,
            "PlanFence refused the commit:\n"
            "lib.py is a target of plan 'parser', which is stale (critical drift).\n"
            "Workspace drift detected since the previous trusted state:\n"
            "- 1 file the plan will modify changed: lib.py\n"
            + OUTSIDE
            + "Re-read lib.py, then re-trust the plan (planfence workspace trust parser ...) and "
            "commit again.\n" + BYPASS + "\n",
        )
        assert git(repo, "log", "--oneline").count("\n") == 1  # nothing committed
        code, out, err = run_cli("workspace", "trust", "parser", *args, cwd=repo)
        assert code == 0 and out.startswith("trusted parser (trust 2)"), out + err
        assert commit(repo) == (0, "")
        assert git(repo, "log", "--oneline").count("\n") == 2


def test_another_worktrees_exclusive_intent_refuses_the_commit_and_failures_close(
    team: tuple[ClusterHandle, Path, Path],  # noqa: F811
) -> None:
    handle, api, web = team
    cluster = ("--cluster", str(handle.path))
    assert run_cli("hook", "install", "git", "--project", api, *cluster)[0] == 0
    trust(handle, api, "parser", A, "--exclusive", "src/lib.py")
    write(web, {"src/lib.py": "v = 3\n"})
    code, err = commit(web)  # the hooks folder is shared by every worktree of the repository
    assert code == 1
    assert err.startswith(
        f"PlanFence refused the commit:\nsrc/lib.py is held exclusively by plan 'parser' "
        f"(session aaaaaaaa) in {api} until "
    ), err
    assert err.endswith(f"wait until that plan ends or its lease runs out.\n{BYPASS}\n")
    # A commit of another file in web goes through; the owner of api down: refused.
    git(web, "reset", "-q")
    git(web, "checkout", "--", "src/lib.py")
    write(web, {"notes.txt": "x\n"})
    assert commit(web) == (0, "")
    handle.kill9("api")
    write(web, {"notes.txt": "y\n"})
    code, err = commit(web)
    assert code == 1 and quiet(err).startswith(
        "PlanFence refused the commit: cannot ask every owner of the team for intents on the "
        "staged files (api: cannot connect to api at 127.0.0.1:"
    ), err
    assert err.endswith(f"it fails closed. {BYPASS}\n")
    assert commit(web, "--no-verify") == (0, "")  # the person's decision
    # A worktree the team's cluster does not serve: refused, with the step that joins it.
    extra = web.parent / "extra"
    git(api, "worktree", "add", "-q", "-b", "extra", str(extra))
    write(extra, {"notes.txt": "z\n"})
    assert commit(extra) == (
        1,
        f"PlanFence refused the commit: {extra} is a worktree of a repository that uses "
        f"PlanFence, but the cluster {handle.path} does not serve it (planfence workspace join "
        f"{extra}). {BYPASS}\n",
    )


def test_a_gate_that_cannot_start_refuses_the_commit(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"lib.py": "v = 1\n"})
    assert run_cli("hook", "install", "git", "--project", repo)[0] == 0
    hook = repo / ".git" / "hooks" / "pre-commit"
    moved = str(tmp_path / "gone" / "planfence")  # the virtualenv moved away
    hook.write_text(hook.read_text().replace(executable(), moved))
    write(repo, {"lib.py": "v = 2\n"})
    code, err = commit(repo)
    assert code == 1 and f"{moved}: not found" in err, err  # git: any non-zero refuses
    assert git(repo, "log", "--oneline").count("\n") == 1
    code, out, _ = run_cli("hook", "status", "git", "--project", repo)
    assert (code, out) == (
        1,
        f"git: not active: {moved} cannot start; planfence hook install git\n",
    )


def test_a_commit_of_an_automatic_plans_target_is_refused_until_the_re_read(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", {"lib.py": "v = 1\n", "main.py": "import lib\n"})
    with served(repo):
        assert run_cli("hook", "install", "git", "--project", repo)[0] == 0
        assert read(repo, "lib.py") == (0, "")  # the session's plan: lib.py read
        assert write_call(repo, "main.py") == (0, "")
        write(repo, {"main.py": "import lib\nlib.v\n"})
        assert write_call(repo, "main.py", "PostToolUse") == (0, "")  # main.py: a target
        write(repo, {"lib.py": "v = 2  # another process\n"})
        code, err = commit(repo)
        assert (code, timeless(err)) == (
            1,
            "PlanFence refused the commit:\n"
            f"main.py is a target of plan '{PLAN}', which is stale (relevant drift).\n"
            "Workspace drift detected since the previous trusted state:\n"
            "- 1 previously inspected file changed: lib.py\n"
            + OUTSIDE
            + "Re-read lib.py in the agent's session (with Read, or cat in the shell), then "
            "commit again.\n" + BYPASS + "\n",
        )
        assert git(repo, "log", "--oneline").count("\n") == 1  # nothing committed
        assert read(repo, "lib.py", 2) == (0, "")  # the re-read
        assert commit(repo) == (0, "")
        assert git(repo, "log", "--oneline").count("\n") == 2
