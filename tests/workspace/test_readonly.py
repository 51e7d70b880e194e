"""The read-only screen's verdicts on the issue's forms, and test runs as agents type them."""

from __future__ import annotations

from pathlib import Path

import pytest

from planfence_net.workspace.model.readonly import TRIGGERS, git_triggers, is_read_only
from planfence_net.workspace.model.reads import is_test_command
from planfence_net.workspace.place.gitsetup import git_setup
from support.workspace import git, make_repo

PLAIN: frozenset[str] = frozenset()  # a repository whose configuration starts nothing

INVESTIGATION = [
    "git status",
    "git diff lib.py",
    "git log --oneline",
    "git log -p",
    "git show HEAD",
    "git grep needle",
    "grep -rn needle .",
    "rg needle",
    "find . -name '*.py'",
    "jq . f.json",
    "ls",
    "ls -la src",
    "wc -l lib.py",
    "cat lib.py",
    "head -n 20 lib.py",
    "tail -5 lib.py",
    "sed -n '1,80p' lib.py",
    "rg -n foo src | head -n 5",
    "git show HEAD:lib.py",
    "cat src/*.py",  # a glob that starts with a literal cannot become an option
    "git --no-pager diff --stat",
    "git status --short && git log -n 5 --format='%h %s'",
    "grep -rn needle . 2>/dev/null | head -n 20",  # nothing written but to /dev/null
    "cat lib.py 2>&1 >/dev/null",
]
H1 = [
    "sed -n 1p -i -e '1i X' f",
    "sed -n 1p -e 'w f' g",
    "sed -n 1p --in-place=.bak f",
    "sed -n 1p -e '1e touch x' g",
]
H6 = ["sed -n 1p *", "cat *", "grep x -- *", "head -n 1 ?x"]
WRITES = [
    "cat a > b",
    "cat a & rm b",
    "FOO=1 cat a",
    "./cat a",
    "env cat a",
    "sort -o out in",
    "uniq in out",
    "cat $(echo a)",
    'cat "$HOME/x"',
    "cat `x`",
    "cat {a,b}",
    "cat ~/x",
    "rg --pre ./x foo",
    "rg -z foo",
    "git show --output=x HEAD",
    "git diff --ext-diff",
    "git log --format=%G?",
    "git log --pretty --output=out",  # --pretty takes no next word: --output is its own
    "git -c core.pager=evil log",
    "git -C /elsewhere status",
    "git branch topic",
    "git remote add origin x",
    "git grep -O foo",
    "find . -delete",
    "find . -exec touch {} ;",
    "find . -fprint out",
    "find . -name *.py",
    "jq -f prog.jq f.json",
    "tail -f log",
    "sed 's/a/b/w out' f",
    "sed -n '1w out' f",
    "sed -f script f",
    "cat 'open",
    "pytest -q",
    "",
    "cat a |& tee b",
    "cat a 3>/dev/null",
    "cat a >/dev/null2",
    "cat a &>/dev/null",
    "cat a2>/dev/null",
    "cat a; (rm b)",
]


@pytest.mark.parametrize("command", INVESTIGATION)
def test_what_an_agent_investigates_with_is_read_only(command: str) -> None:
    assert is_read_only(command, PLAIN)


@pytest.mark.parametrize("command", H1 + H6 + WRITES)
def test_writes_and_what_cannot_be_proven_are_not(command: str) -> None:
    assert not is_read_only(command, PLAIN)


@pytest.mark.parametrize(
    ("trigger", "command"),
    [
        ("textconv", "git show HEAD"),  # H5
        ("textconv", "git diff lib.py"),
        ("textconv", "git log -p"),
        ("extdiff", "git diff"),
        ("pager", "git log --oneline"),
        ("pager", "git status"),  # pager.status = true
        ("textconv", "git blame lib.py"),
        ("signature", "git log --oneline"),
        ("filter", "git status"),
        ("fsmonitor", "git grep needle"),
        ("hook", "git diff"),
        ("unknown", "git rev-parse HEAD"),
    ],
)
def test_a_git_form_that_configuration_can_make_start_a_program_is_not(
    trigger: str, command: str
) -> None:
    assert is_read_only(command, PLAIN)
    assert not is_read_only(command, frozenset({trigger}))
    assert not is_read_only(command)  # no facts: every trigger assumed


@pytest.mark.parametrize(
    ("trigger", "command"),
    [
        ("textconv", "git diff --no-textconv --no-ext-diff lib.py"),
        ("pager", "git --no-pager log --oneline"),
        ("signature", "git log --oneline --no-show-signature"),
        ("textconv", "git log --oneline"),  # no diff shown: no textconv
    ],
)
def test_options_that_avoid_a_trigger_make_the_form_read_only(trigger: str, command: str) -> None:
    assert is_read_only(command, frozenset({trigger}))


def test_the_git_facts_are_asked_only_when_a_git_command_is_left_to_decide() -> None:
    asked: list[int] = []

    def facts() -> frozenset[str]:
        asked.append(1)
        return PLAIN

    assert is_read_only("cat a", facts) and not asked
    assert not is_read_only("git status; rm x", facts) and not asked
    assert is_read_only("git status", facts) and asked == [1]


def test_configuration_keys_map_to_their_triggers() -> None:
    listing = "".join(
        f"{key}\n{value}\0"
        for key, value in [
            ("core.repositoryformatversion", "0"),
            ("user.name", "x"),
            ("diff.evil.textconv", "sh -c x"),
            ("diff.python.xfuncname", "^def"),
            ("core.fsmonitor", "false"),
            ("log.showSignature", "true"),
            ("trace2.eventTarget", "/tmp/x"),
        ]
    )
    assert git_triggers(listing) == {"textconv", "signature", "unknown"}
    assert git_triggers("core.pager\nless\0filter.lfs.clean\nx\0") == {"pager", "filter"}
    assert git_triggers("") == frozenset()


def test_git_setup_reads_the_repositorys_configuration(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"lib.py": "x = 1\n"})
    assert git_setup(str(repo)) - {"unknown"} == frozenset()  # the user's own keys aside
    git(repo, "config", "diff.evil.textconv", "sh -c 'touch pwned; cat \"$1\"' -")
    (repo / ".git" / "hooks" / "post-index-change").write_text("#!/bin/sh\n")
    assert {"textconv", "hook"} <= git_setup(str(repo))
    assert git_setup(str(tmp_path / "nowhere")) == TRIGGERS


@pytest.mark.parametrize(
    "command",
    [
        ".venv/bin/python -m pytest -q",
        "python3 -m pytest tests/test_x.py",
        "python3.11 -m pytest",
        "uv run pytest",
        "uv run --with pytest-xdist python -m pytest -n 2",
        "poetry run pytest",
        "pdm run pytest",
        "npx jest",
        "npx --yes vitest run",
        "./node_modules/.bin/jest --ci",
        "timeout 600 .venv/bin/pytest -x",
        "cd src && CI=1 go test ./...",
    ],
)
def test_test_runs_are_found_as_agents_type_them(command: str) -> None:
    assert is_test_command(command) is not None


@pytest.mark.parametrize(
    "command", ["python script.py", "uv run ruff check", "npx prettier .", "echo pytest"]
)
def test_other_runs_are_not_test_runs(command: str) -> None:
    assert is_test_command(command) is None
