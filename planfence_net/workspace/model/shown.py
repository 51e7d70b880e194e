"""Which files a search or a diff showed the agent (pure): the read set where agents look.

A PostToolUse payload carries the tool's output (`tool_response`). When the call searched
or diffed, the lines it printed name the files whose content the agent saw:

    search   `grep`/`egrep`/`fgrep`/`rg`/`ag`/`ack`, `git grep`, and the Grep tool in its
             content mode: a match line is `PATH:LINE:TEXT` (or `PATH:TEXT`); PATH is
             relative to the call's folder (or absolute)
    diff     `git diff`/`git log -p`/`git show`/`git stash show -p`/`git format-patch`:
             `diff --git a/PATH b/PATH`, `--- a/PATH`, `+++ b/PATH` headers, PATH relative
             to the worktree root (returned as `:PATH`, as `git show REV:PATH` names it);
             `diff -u`/`diff -r`: `--- PATH` and `+++ PATH` headers, relative to the folder

`shown_paths` returns those paths as operands (`autohook.resolve_reads` keeps the existing
files inside a served worktree). What stays invisible: lines that name files without their
content (`grep -l`, `rg --files`, `find`, `ls`, `git ls-files`, `git diff --stat` or
`--name-only`, the Grep tool's files and count modes, Glob), context lines (`grep -C`), file
names with `:` or a newline, git's quoted names (unusual characters), output a pipeline
reshaped (`grep ... | cut -d: -f2`), output the client cut short, and paths past MAX_SHOWN.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any

MAX_SHOWN = 64  # paths taken from one call's output: a broad search is not a plan's reads
SEARCHERS = frozenset(("grep", "egrep", "fgrep", "rg", "ag", "ack", "ack-grep"))
GIT_DIFFS = frozenset(("diff", "log", "show", "format-patch", "stash", "whatchanged"))
WRAPPERS = frozenset(("sudo", "env", "time", "nice", "command", "xargs", "nohup", "timeout"))
_GIT_ARG_OPTIONS = frozenset(("-C", "-c", "--git-dir", "--work-tree", "--namespace"))
_SPLIT = re.compile(r"\|\|?|&&|;|&|\n")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_GIT_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)$")
_COMBINED = re.compile(r"^diff --(?:cc|combined) (\S+)$")
_FILE_LINE = re.compile(r"^(?:---|\+\+\+) (\S[^\t]*?)(?:\t.*)?$")
SEARCH, GIT_DIFF, DIFF = "search", "git-diff", "diff"


def shown_paths(tool: str, command: str | None, response: Any) -> tuple[str, ...]:
    """The paths whose content the output `response` of a call showed: a content-mode Grep
    tool's matches, or the matches and diff headers printed by the search and diff
    commands in the shell `command`; at most MAX_SHOWN, each once, in order."""
    if tool == "Grep":
        if not isinstance(response, dict) or response.get("mode") != "content":
            return ()
        return _first(match_paths(_text(response.get("content"))))
    if command is None:
        return ()
    kinds = command_kinds(command)
    if not kinds:
        return ()
    text = _output(response)
    found: list[str] = []
    if SEARCH in kinds:
        found += match_paths(text)
    if GIT_DIFF in kinds:
        found += [":" + p for p in diff_paths(text, git=True)]
    if DIFF in kinds:
        found += diff_paths(text, git=False)
    return _first(found)


def command_kinds(command: str) -> set[str]:
    """Which kinds of output (SEARCH, GIT_DIFF, DIFF) the simple commands of the shell
    `command` print (read from each one's program name, past assignments and wrappers)."""
    kinds: set[str] = set()
    for part in _SPLIT.split(command):
        try:
            words = shlex.split(part)
        except ValueError:
            words = part.split()
        words = _program(words)
        if not words:
            continue
        name = os.path.basename(words[0])
        if name in SEARCHERS:
            kinds.add(SEARCH)
        elif name == "diff":
            kinds.add(DIFF)
        elif name == "git":
            sub = _git_subcommand(words[1:])
            if sub == "grep":
                kinds.add(SEARCH)
            elif sub in GIT_DIFFS:
                kinds.add(GIT_DIFF)
    return kinds


def match_paths(text: str) -> list[str]:
    """The PATH of each `PATH:...` match line of a search's output."""
    found = []
    for line in text.splitlines():
        path, sep, _ = line.partition(":")
        if sep and path and not path.startswith(("grep", "rg", "Binary file")):
            found.append(path)
    return found


def diff_paths(text: str, *, git: bool) -> list[str]:
    """The paths a diff's headers name: git's `a/`-`b/` headers (`git`), else the `---` and
    `+++` lines of `diff -u`; `/dev/null` left out."""
    found: list[str] = []
    for line in text.splitlines():
        if git:
            header = _GIT_HEADER.match(line) or _COMBINED.match(line)
            if header:
                found += header.groups()
            elif line.startswith(("--- a/", "+++ b/")):
                found.append(line[6:].split("\t")[0])
            continue
        if line.startswith("diff ") and not line.startswith("diff --git"):
            continue
        match = _FILE_LINE.match(line)
        if match and match.group(1) != "/dev/null":
            found.append(match.group(1))
    return found


def _program(words: list[str]) -> list[str]:
    """`words` from the program on: past `NAME=VALUE` assignments and wrappers (with their
    options, and `timeout`'s duration)."""
    i = 0
    while i < len(words):
        word = words[i]
        if _ASSIGNMENT.match(word) or word.startswith("-"):
            i += 1
        elif os.path.basename(word) in WRAPPERS:
            i += 2 if word == "timeout" and i + 1 < len(words) else 1
        else:
            return words[i:]
    return []


def _git_subcommand(words: list[str]) -> str | None:
    i = 0
    while i < len(words):
        word = words[i]
        if word in _GIT_ARG_OPTIONS:
            i += 2
        elif word.startswith("-"):
            i += 1
        else:
            return word
    return None


def _output(response: Any) -> str:
    """The text a shell call printed: Claude Code's `stdout`, Codex's output string."""
    if isinstance(response, str):
        return response
    if isinstance(response, dict):
        for name in ("stdout", "output", "aggregated_output", "formatted_output"):
            if isinstance(response.get(name), str):
                return str(response[name])
    return ""


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _first(paths: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p for p in paths if p and "\0" not in p))[:MAX_SHOWN]
