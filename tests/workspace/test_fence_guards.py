"""The fence guards itself (issue 28, H4): with a fresh plan, an agent's tool or shell command
that would change the cluster folder, the clients' hook settings or the git gate exits 2 with
a reason saying a person must do it; the same session's ordinary writes, and reads of those
files, still pass. And "once" enforced (H8): after a plan's one replan, a second change
stops its writes, re-read or not, until a person re-bases it. Real hook processes against a
real workspace owner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from planfence_net.cluster.command import executable
from planfence_net.workspace.model.guarded import Guarded, shell_touches
from planfence_net.workspace.plans.session import auto_plan
from support.workspace import git, make_repo, payload, run_cli, run_hook, served, write
from support.writers import without_writers

AUTO = ("--mode", "auto")
PLAN = auto_plan("9f2c6a1e-4b7d-4e0a-9c55-2f1d8e7b3a10")  # the recorded payloads' session
FILES = {"lib.py": "def f():\n    return 1\n", "main.py": "import lib\n"}
PERSON = (
    "one of the fence's own files, which only a person may change (whatever the plan). Do "
    "not try another way; ask the user to make this change.\n"
)


def claude(repo: Path, tool: str, tool_input: dict[str, Any], n: int) -> dict[str, Any]:
    return {
        **payload("claude-read", repo),
        "tool_name": tool,
        "tool_input": tool_input,
        "tool_use_id": f"toolu_{n:04}",
    }


def fresh_session(repo: Path) -> None:
    """The session read lib.py: its plan is fresh, so only the fence's rule can block."""
    data = claude(repo, "Read", {"file_path": str(repo / "lib.py")}, 0)
    assert run_hook("claude", {**data, "hook_event_name": "PostToolUse"}, *AUTO) == (0, "")


FILE_WRITES = [
    ("Edit", ".planfence/cluster.toml", {"old_string": "[", "new_string": "["}),
    ("Write", ".planfence/workspace.json", {"content": "{}"}),
    ("Write", ".claude/settings.local.json", {"content": "{}"}),
    ("MultiEdit", ".claude/settings.json", {"edits": []}),
    ("Write", ".codex/hooks.json", {"content": "{}"}),
    ("Write", ".git/hooks/pre-commit", {"content": "#!/bin/sh\n"}),
    ("Edit", ".git/config", {"old_string": "[core]", "new_string": "[core]\nhooksPath=/x"}),
    ("Write", ".githooks/pre-commit", {"content": "#!/bin/sh\n"}),  # core.hooksPath
    ("Write", "alias/config", {"content": "[core]\n"}),  # a symlink to .git
]
SHELL_WRITES = [
    "echo '[hook]' >> .planfence/cluster.toml",
    "sed -i s/a/b/ .planfence/workspace.json",
    "cp /dev/null .planfence/keys/ws.key",
    "printf '{}' > .claude/settings.local.json",
    "rm -rf .codex",
    "cat x > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
    "git config core.hooksPath /tmp/elsewhere",
    "git -C . config diff.x.textconv 'sh -c id'",
    "cd .git && echo x >> config",
    "python3 -c \"open('.g''it/config','a').write('x')\"",
    "tee .githooks/pre-commit < /dev/null",
]


def test_every_person_only_path_is_refused_to_an_agent_with_a_fresh_plan(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    git(repo, "config", "core.hooksPath", ".githooks")
    (repo / "alias").symlink_to(repo / ".git")
    with served(repo):
        fresh_session(repo)
        for n, (tool, rel, extra) in enumerate(FILE_WRITES, start=1):
            data = claude(repo, tool, {"file_path": str(repo / rel), **extra}, n)
            code, reason = run_hook("claude", data, *AUTO)
            assert code == 2, (rel, reason)
            assert reason.startswith(f"PlanFence blocked {tool} of {repo / rel}: it would change ")
            assert reason.endswith(PERSON)
        for n, command in enumerate(SHELL_WRITES, start=100):
            data = claude(repo, "Bash", {"command": command}, n)
            code, reason = run_hook("claude", data, *AUTO)
            assert code == 2 and reason.endswith(PERSON), (command, reason)
        patch = "*** Begin Patch\n*** Add File: .git/hooks/post-checkout\n+x\n*** End Patch\n"
        codex = payload("codex-apply-patch", repo, command=patch)
        code, reason = run_hook("codex", codex, *AUTO)
        assert code == 2 and reason.endswith(PERSON), reason
        # The same session's ordinary work goes on: a write, a shell write, a look at .git.
        for n, tool_input, tool in (
            (200, {"file_path": str(repo / "main.py"), "content": "x\n"}, "Write"),
            (201, {"command": "echo hi > out.txt && git add out.txt"}, "Bash"),
            (202, {"command": "cat .git/config .planfence/cluster.toml"}, "Bash"),
            (203, {"command": "git commit -qm x && git log --oneline"}, "Bash"),
        ):
            assert run_hook("claude", claude(repo, tool, tool_input, n), *AUTO) == (0, ""), tool


@pytest.mark.parametrize(
    "command",
    [
        "git add .gitignore .gitattributes",
        "cat .git/HEAD > head.txt",
        "echo .claude-notes > x",
        "grep -rl old --exclude-dir=.git . | xargs sed -i s/old/new/",
        "find . -not -path './.git/*' -name '*.py' -exec sed -i s/a/b/ {} +",
        "find . -path ./.git -prune -o -name '*.orig' -delete",
    ],
)
def test_names_that_only_look_like_the_fences_files_pass(command: str) -> None:
    assert shell_touches(command, "/r", Guarded(("/r/.planfence",))) is None


@pytest.mark.parametrize(
    ("command", "touched"),
    [
        ("cp x /c/cluster/cluster.toml", "/c/cluster (/c/cluster)"),
        ("git remote add evil ext::sh", "`git remote`"),
        ("git init --template=/t", "`git init`"),
        ("X=1 git config alias.x '!sh'", "`git config`"),
        ("bash -c 'git config core.hooksPath /tmp/x'", "`git config`"),
        ("env git -c x=y remote add evil ext::sh", "`git remote`"),
        ("rm -rf ~/.claude/", ".claude/ (the Claude Code settings in .claude)"),
        ("find . -path './.git/*' -delete", ".git/* (the git gate"),
        ("find .git -name '*.sample' -exec mv {} x \\;", ".git (the git gate"),
        ("tar xf evil.tar -C .git --exclude=x", ".git (the git gate"),
    ],
)
def test_shell_forms_name_what_they_touch(command: str, touched: str) -> None:
    found = shell_touches(command, "/r", Guarded(("/c/cluster",)))
    assert found is not None and found.startswith(touched)


def write_main(repo: Path, n: int, event: str = "PreToolUse") -> tuple[int, str]:
    data = claude(repo, "Write", {"file_path": str(repo / "main.py"), "content": "x\n"}, n)
    return run_hook("claude", {**data, "hook_event_name": event}, *AUTO)


def read_lib(repo: Path, n: int) -> None:
    data = claude(repo, "Read", {"file_path": str(repo / "lib.py")}, n)
    assert run_hook("claude", {**data, "hook_event_name": "PostToolUse"}, *AUTO) == (0, "")


def test_changed_again_stops_the_plans_writes_until_a_person_refreshes(tmp_path: Path) -> None:
    """H8: after the one replan, a second change stops the plan; a re-read, round after
    round, does not lift it, nor does a write that landed meanwhile; `workspace refresh`
    (a person's) does."""
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        fresh_session(repo)
        write(repo, {"lib.py": "v2\n"})
        assert write_main(repo, 1)[0] == 2  # re-read lib.py, then retry
        read_lib(repo, 2)  # the one replan
        assert write_main(repo, 3) == (0, "")  # let through, lands later
        write(repo, {"lib.py": "v3\n"})
        code, reason = write_main(repo, 4)
        stop_line = (
            f"The plan's writes now stay blocked until the user re-bases it with "
            f"`{executable()} workspace refresh {PLAN}` (never run it yourself); re-reading "
            f"does not lift this."
        )
        assert code == 2 and without_writers(reason).splitlines()[-2:] == [
            "A file you already re-read has changed again: stop and report the drift above "
            "to the user; do not retry this call and do not re-read again.",
            stop_line,
        ]
        stopped = (
            f"PlanFence blocked Write of {repo / 'main.py'}: plan '{PLAN}' changed again after "
            f"its one replan, so it is stopped. {stop_line} Stop and report the drift to the "
            f"user.\n"
        )
        for n in range(5, 11, 2):  # round after round: re-read, retry
            read_lib(repo, n)
            assert write_main(repo, n + 1) == (2, stopped)
        assert write_main(repo, 3, "PostToolUse") == (0, "")  # the earlier write lands
        assert write_main(repo, 20) == (2, stopped)
        code, out, err = run_cli("workspace", "refresh", PLAN, "--yes", cwd=repo)
        assert (code, err) == (0, ""), out
        assert write_main(repo, 21) == (0, "")


def test_an_explicit_plan_stops_too_until_a_person_starts_its_count_over(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    edit = claude(repo, "Write", {"file_path": str(repo / "main.py"), "content": "x"}, 1)

    def trust(*extra: str) -> str:
        code, out, err = run_cli(
            "workspace", "trust", "fix", "--read", "lib.py", "--target", "main.py",
            "--lockfiles", "none", *extra, cwd=repo,
        )  # fmt: skip
        assert code == 0, out + err
        return out

    def changed_twice() -> None:  # drift, re-trust (its one replan), drift again
        write(repo, {"lib.py": "v1\n"})
        assert run_hook("claude", edit)[0] == 2
        assert "(trust 2)" in trust()
        write(repo, {"lib.py": "v2\n"})
        code, reason = run_hook("claude", edit)
        assert code == 2 and "changed again" in reason

    with served(repo):
        trust()
        changed_twice()
        assert "(trust 3)" in trust()  # an agent may re-trust: it does not lift the stop
        assert run_hook("claude", edit)[1].endswith("Stop and report the drift to the user.\n")
        code, out, err = run_cli("workspace", "refresh", "fix", "--yes", cwd=repo)
        assert (code, err) == (0, ""), out
        assert run_hook("claude", edit) == (0, "")
        changed_twice()
        assert "(trust 1)" in trust("--fresh")  # a person's: starts the count over
        assert run_hook("claude", edit) == (0, "")
