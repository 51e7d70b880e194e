"""The git commands that write the fence's own files without naming them (pure):
`git config`, `git remote add`, ... write the repository's config (a hooks path, a driver),
and a `git clean` that is no dry run can remove a client's hook settings, the cluster folder
or a hooks path where git does not track them: one with `-d`, `-x` or `-X` is refused where
one lies under what it cleans, a plain one where an untracked one does (the caller asks git
which, `place.guarded.untracked`; when it did not, as with `-d`). `model.guarded` asks it for a shell command the read-only screen did not pass.
A simple command's git is found wherever its word `git` is (after `VAR=value`, `env`,
`xargs`, `sh -c`: conservative); redirections are not its arguments.
"""

from __future__ import annotations

import os
import re
import shlex
from fnmatch import fnmatchcase

# git subcommands that write the repository's config (a hooks path, a driver) unnamed.
GIT_CONFIG_WRITERS = {
    "config": None,  # any form the read-only screen did not accept
    "remote": ("add", "set-url", "rename", "remove", "rm", "set-head", "set-branches"),
    "submodule": ("add", "init", "sync", "deinit", "--init"),
    "init": ("--template", "--separate-git-dir"),
}
_GIT_GLOBAL_WITH_VALUE = ("-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path")
_REDIRECTION = re.compile(r"&?[<>]+[&|]?")
_SEPARATORS = frozenset((";", "&&", "||", "|", "&", "(", ")", "\n", "|&", ";;"))


def git_writer(
    text: str, cwd: str, guarded: tuple[str, ...], untracked: tuple[str, ...] | None = None
) -> str | None:
    """`git SUBCOMMAND` when shell `text` (quotes removed), run in `cwd`, runs one that
    writes the repository's config, or a `git clean` that can remove one of the `guarded`
    paths (absolute, normalized), described; else None. `untracked`: the guarded paths git
    does not track (nor ignore), when the caller asked git; None when not known."""
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        words = text.split()
    simple: list[str] = []
    redirected = False
    for word in [*words, ";"]:
        if redirected and word not in _SEPARATORS:
            redirected = False  # a redirection's target: not an argument
            continue
        if _REDIRECTION.fullmatch(word):
            redirected = True
            if simple and simple[-1].isdigit():
                simple.pop()  # its file descriptor (`2>`)
            continue
        if word not in _SEPARATORS:
            simple.append(word)
            continue
        git = _git_command(simple)
        simple = []
        if git is None:
            continue
        sub, rest, folder = git
        found = _git_writes_config(sub, rest) or (
            _git_clean_removes(rest, os.path.join(cwd, folder), guarded, untracked)
            if sub == "clean"
            else None
        )
        if found:
            return found
    return None


def _git_command(words: list[str]) -> tuple[str, list[str], str] | None:
    """(subcommand, its words, the folder `-C` leads to, relative) of the git command in
    simple command `words`: from its first word `git`, wherever it is (after `VAR=value`,
    `env`, `xargs`, `sh -c`, ...; conservative)."""
    at = next((n for n, word in enumerate(words) if os.path.basename(word) == "git"), None)
    if at is None:
        return None
    at += 1
    folder = ""
    while at < len(words) and words[at].startswith("-"):
        if words[at] == "-C" and at + 1 < len(words):
            folder = os.path.join(folder, words[at + 1])
        at += 2 if words[at] in _GIT_GLOBAL_WITH_VALUE else 1
    if at >= len(words):
        return None
    return words[at], words[at + 1 :], folder


def _git_writes_config(sub: str, rest: list[str]) -> str | None:
    if sub not in GIT_CONFIG_WRITERS:
        return None
    forms = GIT_CONFIG_WRITERS[sub]
    if forms is None or any(w.split("=", 1)[0] in forms for w in rest):
        return f"`git {sub}` (it writes the repository's git config, part of the git gate)"
    return None


def _git_clean_removes(
    rest: list[str], base: str, guarded: tuple[str, ...], untracked: tuple[str, ...] | None
) -> str | None:
    """A `git clean` with arguments `rest`, run in `base`: the guarded path it can remove,
    described, else None. A dry run (`-n`, `--dry-run`) removes nothing. One that removes
    untracked folders or ignored files (`-d`, `-x`, `-X`) can remove any guarded path it
    reaches; a plain one (`-f`) the untracked files among them: those of `untracked` when
    git was asked, any of them when not (conservative). A git dir is never cleaned."""
    dry = removes = False
    specs: list[str] = []
    words = iter(rest)
    for word in words:
        if word == "--":
            specs += words
        elif word.startswith("--"):
            name = word.split("=", 1)[0]
            dry = dry or (len(name) > 2 and "--dry-run".startswith(name))
            if name == "--exclude" and "=" not in word:
                next(words, None)
        elif word.startswith("-") and word != "-":
            flags = word[1:].split("e", 1)
            dry = dry or "n" in flags[0]
            removes = removes or bool(set(flags[0]) & set("dxX"))
            if len(flags) > 1 and not flags[1]:
                next(words, None)  # `-e PATTERN`
        else:
            specs.append(word)
    if dry:
        return None
    base = os.path.normpath(base)
    if not removes and untracked is not None:
        guarded = untracked  # a plain clean removes untracked files, and nothing else
    for path in guarded:
        if ".git" not in path.split(os.sep) and any(
            _spec_covers(spec, path, base) for spec in specs or ["."]
        ):
            return f"`git clean` (it can remove {path} where git does not track it)"
    return None


def _spec_covers(spec: str, path: str, base: str) -> bool:
    """Whether git pathspec `spec` (relative to `base`) reaches `path` or a folder holding
    it (a glob's `*` crosses `/`, as in git)."""
    if not any(c in spec for c in "*?["):
        root = os.path.normpath(os.path.join(base, spec))
        return path == root or path.startswith(root.rstrip(os.sep) + os.sep)
    rel = os.path.relpath(path, base)
    parts = rel.split("/")
    return parts[0] != ".." and any(
        fnmatchcase("/".join(parts[:n]), spec) for n in range(1, len(parts) + 1)
    )
