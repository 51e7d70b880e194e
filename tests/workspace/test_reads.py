"""The read-command heuristic and the hand-written dependency lists, without I/O."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planfence_net.workspace.model.depslist import (
    Dependency,
    DependencyListError,
    content_matches,
    git_blob_id,
    parse_dependencies,
)
from planfence_net.workspace.model.reads import is_read_only, is_test_command, read_operands


@pytest.mark.parametrize(
    ("command", "files"),
    [
        ("cat a.py b.py", ["a.py", "b.py"]),
        ("head -n 20 lib.py", ["lib.py"]),
        ("tail -5 lib.py", ["lib.py"]),
        ("sed -n 1,20p lib.py", ["lib.py"]),
        ("nl -ba 'my file.txt'; echo hi", ["my file.txt"]),
        ("grep -n foo src/a.py src/b.py", ["src/a.py", "src/b.py"]),
        ("grep -rF needle a b", ["a", "b"]),
        ("rg -e foo -g '*.py' src/a.py", ["src/a.py"]),
        ("jq --arg x y .a data.json", ["data.json"]),
        ("awk -F, '{print $1}' t.csv", ["t.csv"]),
        ("FOO=1 env -i cat x && git show HEAD:lib/x.py | less", ["x", ":lib/x.py"]),
        ("git cat-file -p main:README.md", [":README.md"]),
        ("wc -l < data.txt", ["data.txt"]),
        ("cat a > b", ["a"]),  # b is written, not read
        ("cat a 2>/dev/null; cat a", ["a"]),  # each file once
        ("/usr/bin/cat a", ["a"]),
        ("cd src && cat ../README.md # a comment", ["../README.md"]),
    ],
)
def test_reading_commands_name_their_files(command: str, files: list[str]) -> None:
    assert read_operands(command) == files


@pytest.mark.parametrize(
    "command",
    [
        "sed -i s/a/b/ x",  # sed without -n may edit: checked as a write, never a read
        "sed -n -i 1p x",
        "cat <<EOF",
        "cat 'unterminated",
        "python script.py data.txt",  # a program we do not know: no guess
        "git log -- lib.py",
        "echo cat a",
        "",
    ],
)
def test_what_the_heuristic_cannot_see_it_does_not_guess(command: str) -> None:
    assert read_operands(command) == []


@pytest.mark.parametrize(
    ("command", "match"),
    [
        ("cd x && python -m pytest -q tests", "python -m pytest -q tests"),
        ("npm test", "npm test"),
        ("CI=1 cargo test --all", "cargo test --all"),
        ("echo pytest", None),
        ("pytestify", "pytestify"),  # a glob: `pytest*` is what the default list says
        ("ls", None),
    ],
)
def test_test_commands_are_found_by_their_patterns(command: str, match: str | None) -> None:
    assert is_test_command(command) == match


def test_configured_patterns_replace_the_defaults() -> None:
    assert is_test_command("just check", ("just check*",)) == "just check"
    assert is_test_command("pytest", ("just check*",)) is None


AGENTS_MD = """# Plan: add the audit column

Some prose. - not a list item

## Record dependencies
- schema.sql @ sha256:5891b5b (owner: db-migration-agent)
- `src/api/types.ts` @ git:ce01362
* package-lock.json @ CE013625030BA8D

## Recovery policy
- Do not retry the blocked action.
"""


def test_a_dependency_list_reads_as_written() -> None:
    assert parse_dependencies(AGENTS_MD) == [
        Dependency("schema.sql", "sha256", "5891b5b", "db-migration-agent", 6),
        Dependency("src/api/types.ts", "git", "ce01362", None, 7),
        Dependency("package-lock.json", "any", "ce013625030ba8d", None, 8),
    ]


def test_hash_prefixes_match_the_content_they_were_written_from() -> None:
    content = b"hello\n"
    assert git_blob_id(content) == "ce013625030ba8dba906f756967f9e9ca394464a"  # git hash-object
    sha, git, either = parse_dependencies(AGENTS_MD)
    assert [content_matches(d, content) for d in (sha, git, either)] == [True, True, True]
    assert [content_matches(d, b"hello, world\n") for d in (sha, git, either)] == [False] * 3
    wrong_kind = Dependency("x", "sha256", "ce01362", None, 1)  # a git id given as sha256
    assert not content_matches(wrong_kind, content)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("# Plan\n- a @ sha256:abcdef0\n", "no 'Record dependencies' list found"),
        ("Record dependencies:\n\n## Next\n", "the 'Record dependencies' list at line 1 is empty"),
        (
            "Record dependencies:\n- a.py @ sha256:abc\n",
            "line 2: expected '- PATH @ sha256:HEX (owner: NAME)' with at least 7 hex digits, "
            "got '- a.py @ sha256:abc'",
        ),
        (
            "**Record dependencies**\n- a.py at abcdef0\n",
            "line 2: expected '- PATH @ sha256:HEX (owner: NAME)' with at least 7 hex digits, "
            "got '- a.py at abcdef0'",
        ),
    ],
)
def test_a_list_that_cannot_be_read_is_refused_naming_the_line(text: str, error: str) -> None:
    with pytest.raises(DependencyListError) as exc:
        parse_dependencies(text)
    assert str(exc.value) == error


@given(st.text(max_size=200))
def test_no_command_line_makes_the_heuristic_raise(command: str) -> None:
    operands = read_operands(command)
    assert all(isinstance(word, str) and word for word in operands)
    assert len(operands) == len(set(operands))


@pytest.mark.parametrize(
    ("command", "read_only"),
    [
        ("cat lib.py", True),
        ("sed -n '1,80p' lib.py", True),
        ("rg -n foo src | head -n 5", True),
        ("git show HEAD:lib.py", True),
        ("cat a.py && grep -c def b.py", True),
        ("cat a > b", False),  # a redirection writes
        ("cat a & rm b", False),  # a background job
        ("FOO=1 cat a", False),  # an assignment (LD_PRELOAD=...)
        ("./cat a", False),  # a program by path
        ("sed -i s/a/b/ f", False),
        ("sed -n '1w out' f", False),  # sed's w command writes
        ("sort -o out in", False),  # not a known reader
        ("cat $(echo a)", False),
        ("rg --pre ./x foo", False),  # runs a command on each file
        ("git show --output=x HEAD", False),
        ("pytest -q", False),
        ("", False),
    ],
)
def test_read_only_commands_are_recognised_conservatively(command: str, read_only: bool) -> None:
    assert (
        is_read_only(command, frozenset()) is read_only
    )  # a repository whose git config starts nothing
