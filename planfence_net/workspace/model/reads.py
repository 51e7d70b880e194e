"""Which files a shell command reads, and whether it runs the project's tests (pure).

A heuristic, not a shell: the command line is split into simple commands at `;`, `&&`, `||`,
`|` and newlines, each is tokenized as POSIX sh would (`shlex`), leading `VAR=value`
assignments and wrappers (`env`, `command`, `time`, `nice`, `sudo`) are skipped, and the
operands of known reading programs are kept: `cat`, `head`, `tail`, `sed -n`, `nl`, `less`,
`more`, `wc`, `sort`, `uniq`, `diff`, `cmp`, `file`, `stat`, `bat`, `jq`, `grep`/`rg`/`ag`
(after the pattern) and `git show REV:PATH` / `git cat-file -p REV:PATH`. What it cannot see
(a script that opens files, `$(...)`, globs, redirections `< file`, aliases) it does not
guess: the caller keeps only operands that name existing files inside the worktree, so a
wrong guess costs a fact the plan did not need, never a missed write. Whether a command
only reads (so the hook may let it through unchecked) is proven elsewhere, strictly:
`readonly.is_read_only`, re-exported here.
"""

from __future__ import annotations

import fnmatch
import re
import shlex

from .readonly import is_read_only

__all__ = ["is_read_only", "is_test_command", "read_operands", "simple_commands"]

WRAPPERS = frozenset({"env", "command", "time", "nice", "sudo", "nohup", "builtin"})
PLAIN_READERS = frozenset(
    {
        "cat",
        "head",
        "tail",
        "nl",
        "less",
        "more",
        "wc",
        "sort",
        "uniq",
        "diff",
        "cmp",
        "file",
        "stat",
        "bat",
        "tac",
        "od",
        "xxd",
        "hexdump",
        "strings",
        "md5sum",
        "sha256sum",
        "cut",
        "column",
    }
)
PLAIN_VALUED = {
    "head": frozenset({"-n", "-c"}),
    "tail": frozenset({"-n", "-c"}),
    "cut": frozenset({"-d", "-f", "-c", "-b"}),
    "sort": frozenset({"-k", "-t", "-o"}),
    "diff": frozenset({"-U", "-C"}),
    "nl": frozenset({"-s", "-w", "-b"}),
}
PATTERN_FIRST = frozenset({"grep", "egrep", "fgrep", "rg", "ag", "ack", "jq", "awk", "sed"})
# Options of the pattern-first readers that take a value (so the value is not the pattern),
# with how many words they take.
_GREP_VALUED = {
    "-e": 1,
    "-f": 1,
    "-m": 1,
    "-A": 1,
    "-B": 1,
    "-C": 1,
    "--regexp": 1,
    "--file": 1,
    "--max-count": 1,
}
VALUED: dict[str, dict[str, int]] = {
    "grep": _GREP_VALUED,
    "egrep": _GREP_VALUED,
    "fgrep": _GREP_VALUED,
    "rg": {**_GREP_VALUED, "-g": 1, "--glob": 1, "-t": 1, "--type": 1, "-M": 1, "-T": 1},
    "ag": {**_GREP_VALUED, "-G": 1},
    "ack": _GREP_VALUED,
    "jq": {"--arg": 2, "--argjson": 2, "--slurpfile": 2, "--rawfile": 2, "-f": 1},
    "awk": {"-F": 1, "-v": 1, "-f": 1},
    "sed": {"-e": 1, "-f": 1},
}
_PATTERN_OPTIONS = frozenset({"-e", "-f", "--regexp", "--file"})
DEFAULT_TEST_COMMANDS = (
    "pytest*",
    "python -m pytest*",
    "python3 -m pytest*",
    "py.test*",
    "tox*",
    "nox*",
    "npm test*",
    "npm run test*",
    "yarn test*",
    "pnpm test*",
    "npx jest*",
    "npx vitest*",
    "jest*",
    "vitest*",
    "cargo test*",
    "cargo nextest*",
    "go test*",
    "make test*",
    "make check*",
    "mvn test*",
    "gradle test*",
    "./gradlew test*",
    "ctest*",
    "dotnet test*",
    "bundle exec rspec*",
    "rspec*",
    "mix test*",
    "scripts/test*",
)
_SEPARATORS = re.compile(r"\|\||&&|[;|\n]")


def simple_commands(command: str) -> list[list[str]]:
    """The simple commands of `command` as token lists (empty list: nothing parseable).

    Splitting at separators first keeps a quoted `;` inside one word only when shlex can
    tokenize the whole part; a part it cannot tokenize (an open quote) is dropped.
    """
    commands = []
    for part in _SEPARATORS.split(command):
        try:
            words = shlex.split(part, comments=True)
        except ValueError:
            continue
        while words and (
            "=" in words[0]
            and not words[0].startswith("=")
            and words[0].split("=", 1)[0].isidentifier()
        ):
            words = words[1:]
        while words and words[0] in WRAPPERS:
            words = words[1:]
            while words and words[0].startswith("-"):  # `env -i`, `nice -n 5` (value kept)
                words = words[1:]
        if words:
            commands.append(words)
    return commands


def read_operands(command: str) -> list[str]:
    """The words of `command` that its reading programs take as files, in order, each once.

    Operands are returned as written (relative to the command's cwd, or absolute); the
    caller resolves them and keeps those that are files inside the worktree.
    """
    found: list[str] = []
    for words in simple_commands(command):
        for operand in _operands(words):
            if operand not in found:
                found.append(operand)
    return found


_REDIRECT = re.compile(r"^(\d*|&)(>>?|<<?<?|>&|<&)(.*)$")


def _operands(words: list[str]) -> list[str]:
    program = words[0].rsplit("/", 1)[-1]
    args, inputs = _without_redirections(words[1:])
    return _program_operands(program, args) + inputs


def _without_redirections(words: list[str]) -> tuple[list[str], list[str]]:
    """(the words less every redirection, the files redirected in with `<`). A here-doc
    (`<<`) and every output redirection are dropped with their target."""
    kept: list[str] = []
    inputs: list[str] = []
    i = 0
    while i < len(words):
        match = _REDIRECT.match(words[i])
        if match is None:
            kept.append(words[i])
        else:
            target = match.group(3)
            if not target and i + 1 < len(words):
                i += 1
                target = words[i]
            if match.group(2) == "<" and target and not target.startswith("&"):
                inputs.append(target)
        i += 1
    return kept, inputs


def _program_operands(program: str, args: list[str]) -> list[str]:
    if program == "git":
        return _git_paths(args)
    if program in PLAIN_READERS:
        return _after_options(args, PLAIN_VALUED.get(program, frozenset()))
    if program in PATTERN_FIRST:
        if program == "sed" and (
            not any(a.startswith("-n") for a in args)
            or any(a.startswith(("-i", "--in-place")) for a in args)
        ):
            return []  # a sed that may edit in place (-i) is a write, checked as one
        return _after_pattern(args, VALUED[program])
    return []


def _after_options(args: list[str], valued: frozenset[str]) -> list[str]:
    """Operands after options; an option in `valued` takes the next word (`head -n 20 f`)."""
    out, i, ended = [], 0, False
    while i < len(args):
        word = args[i]
        if not ended and word == "--":
            ended = True
        elif not ended and word.startswith("-") and word != "-":
            if word in valued:
                i += 1
        elif word != "-":
            out.append(word)
        i += 1
    return out


def _after_pattern(args: list[str], valued: dict[str, int]) -> list[str]:
    """Operands of grep-like programs: the first non-option word is the pattern unless one
    was given with -e/-f; the rest are files."""
    out, i, pattern_given, ended = [], 0, False, False
    while i < len(args):
        word = args[i]
        if not ended and word == "--":
            ended = True
        elif not ended and word.startswith("-") and word != "-":
            if word in valued:
                pattern_given |= word in _PATTERN_OPTIONS
                i += valued[word]
            elif word.startswith(("--regexp=", "--file=")) or (
                len(word) > 2 and word[:2] in _PATTERN_OPTIONS and word[1] != "-"
            ):
                pattern_given = True
        elif not pattern_given:
            pattern_given = True  # this word is the pattern (or the sed script)
        elif word != "-":
            out.append(word)
        i += 1
    return out


def _git_paths(args: list[str]) -> list[str]:
    """`git show REV:PATH` and `git cat-file -p REV:PATH`: the PATHs (relative to the
    repository root, marked with a leading `:` so the caller resolves them from there)."""
    if not args or args[0] not in {"show", "cat-file"}:
        return []
    return [
        ":" + word.split(":", 1)[1]
        for word in args[1:]
        if ":" in word and not word.startswith("-") and word.split(":", 1)[1]
    ]


def is_test_command(command: str, patterns: tuple[str, ...] = DEFAULT_TEST_COMMANDS) -> str | None:
    """The first simple command of `command` that matches a test-command pattern (shell
    glob over the words joined by single spaces), or None. A command matches as written or
    as `runner_words` reduces it (`.venv/bin/python -m pytest -q` as `pytest -q`, `uv run
    pytest` as `pytest`, `npx jest` as `jest`)."""
    for words in simple_commands(command):
        text = " ".join(words)
        reduced = " ".join(runner_words(words))
        if any(fnmatch.fnmatchcase(t, p) for t in (text, reduced) for p in patterns):
            return text
    return None


# Runners that start the program named after them: (words, options that take a value).
_RUNNERS: dict[tuple[str, ...], frozenset[str]] = {
    ("uv", "run"): frozenset({"--with", "--python", "-p", "--extra", "--group", "--env-file"}),
    ("poetry", "run"): frozenset(),
    ("pipenv", "run"): frozenset(),
    ("pdm", "run"): frozenset(),
    ("hatch", "run"): frozenset(),
    ("rye", "run"): frozenset(),
    ("uvx",): frozenset({"--with", "--from", "--python"}),
    ("pipx", "run"): frozenset(),
    ("npx",): frozenset({"-p", "--package"}),
    ("pnpx",): frozenset(),
    ("bunx",): frozenset(),
    ("pnpm", "exec"): frozenset(),
    ("npm", "exec"): frozenset(),
    ("yarn", "exec"): frozenset(),
    ("timeout",): frozenset({"-s", "--signal", "-k", "--kill-after"}),
}
_PYTHON = re.compile(r"^python[0-9.]*$")


def runner_words(words: list[str]) -> list[str]:
    """`words` less what stands between the agent and the test runner: a path before the
    program (`.venv/bin/pytest`), a runner (`uv run`, `poetry run`, `npx`, `timeout 600`)
    and `python -m`, with `python3.11` read as `python`."""
    words = list(words)
    while words:
        words[0] = words[0].rsplit("/", 1)[-1]
        if _PYTHON.match(words[0]):
            words[0] = "python"
            if words[1:2] == ["-m"] and len(words) > 2:
                words = words[2:]
                continue
            return words
        runner = next((r for r in _RUNNERS if tuple(words[: len(r)]) == r), None)
        if runner is None:
            return words
        words = words[len(runner) :]
        while words and words[0].startswith("-"):
            words = words[2 if words[0] in _RUNNERS[runner] else 1 :]
        if runner == ("timeout",) and words:
            words = words[1:]  # the duration
    return words
