"""Aider has no hooks: the commit gate (`hook install git`) is its fence. Aider commits each
edit itself with `git commit -m MESSAGE [--no-verify] -- FILES` (aider/repo.py,
`GitRepo.commit`), adding `--no-verify` unless it runs with `--git-commit-verify`. Run that
command line as Aider builds it: with `--git-commit-verify` a commit of the target of a plan
whose read drifted is refused with the reason, and goes through once the person re-trusts;
Aider's default skips the gate (docs/HOOKS.md states the bypass). No hook records Aider's
own edit, so the gate names the target Aider changed too: the re-trust takes both."""

from __future__ import annotations

import subprocess
from pathlib import Path

from support.workspace import git, make_repo, run_cli, served, write

MESSAGE = "aider: use the new helper"


def aider_commit(root: Path, files: list[str], verify: bool) -> tuple[int, str]:
    """Aider's commit of its edited `files`: `git add`, then `git commit -m MESSAGE
    [--no-verify] -- ABSOLUTE FILES`; returns (exit code, stderr)."""
    paths = [str(root / f) for f in files]
    git(root, "add", *paths)
    argv = ["git", "commit", "-m", MESSAGE, *([] if verify else ["--no-verify"]), "--", *paths]
    proc = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stderr


def test_aider_commits_go_through_the_gate_only_with_git_commit_verify(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"lib.py": "v = 1\n", "main.py": "import lib\n"})
    with served(repo):
        assert run_cli("hook", "install", "git", "--project", repo)[0] == 0
        args = ("--read", "main.py", "--target", "lib.py", "--lockfiles", "none")
        code, out, err = run_cli("workspace", "trust", "aider-task", *args, cwd=repo)
        assert code == 0, out + err
        write(repo, {"main.py": "import lib  # another session changed this\n"})
        write(repo, {"lib.py": "v = 2  # aider's edit\n"})

        code, err = aider_commit(repo, ["lib.py"], verify=True)  # aider --git-commit-verify
        assert code == 1, err
        assert err.startswith(
            "PlanFence refused the commit:\n"
            "lib.py is a target of plan 'aider-task', which is stale (critical drift).\n"
        ), err
        assert "- 1 previously inspected file changed: main.py\n" in err, err
        assert git(repo, "log", "--oneline").count("\n") == 1  # nothing committed

        code, err = aider_commit(repo, ["lib.py"], verify=False)  # aider's default
        assert (code, err) == (0, "")  # --no-verify: the gate never ran
        assert git(repo, "log", "-1", "--format=%s").strip() == MESSAGE

        write(repo, {"lib.py": "v = 3  # aider's next edit\n"})
        code, out, err = run_cli("workspace", "trust", "aider-task", *args, cwd=repo)
        assert code == 0 and out.startswith("trusted aider-task (trust 2)"), out + err
        assert aider_commit(repo, ["lib.py"], verify=True) == (0, "")  # re-trusted: through
        assert git(repo, "log", "--oneline").count("\n") == 3
