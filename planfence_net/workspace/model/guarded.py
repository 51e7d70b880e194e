"""The fence guards itself (pure): which writes touch a person-only path.

The fence's own files are the person's to change, never an agent's: the cluster folder
(`cluster.toml`, `workspace.json`, the owners' keys, the run folder), the clients' hook
settings (`.claude/settings*.json`, `.codex/`), and the git gate (`.git/hooks/`, `.git/config`
and a worktree's `config.worktree`, a configured `core.hooksPath`). A file tool's write
(Write, Edit, MultiEdit, NotebookEdit, apply_patch) to one of them, or a shell command that is
not proven read-only and names one of them, is blocked whether the plan is fresh or not.

For a shell command the rule is conservative by design: it does not parse what the command
does, it looks for a person-only path anywhere in its text (quotes and backslashes removed, so
`.g''it/config` is `.git/config`), as an operand, an option's value, a redirection target, a
`cd`/`-C` folder, or inside a nested `sh -c '...'` (but not where it only leaves a folder
out, `EXCLUDED`); and it refuses the git subcommands that
write `.git/config` without naming it (`git config`, `git remote add`, ...). A command that
passes the read-only screen (`reads.is_read_only`) is never asked: looking is always allowed.

`Guarded` holds the absolute person-only paths the caller found on disk (`place.guarded`),
each in its written and its real form; the names below are refused wherever they appear.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass

from .payload import SHELLS, ToolCall

_QUOTING = str.maketrans("", "", "'\"\\")
_END = r"(?![\w.-])"  # where a name ends in shell text
_LEAF = r"(?![\w.-]|/[\w.-])"  # ... and nothing inside it follows
_PART = r"[^\s;&|()<>`]"  # a character of a path in shell text
# Person-only paths by name, wherever they are (relative, under $HOME, in another repository).
NAMED = (
    (re.compile(r"(?<![\w.-])\.planfence" + _END), "the cluster folder .planfence"),
    (
        re.compile(
            r"(?<![\w.-])\.claude(?:/(?:settings" + _PART + r"*|[*?\[]" + _PART + r"*)?)?" + _LEAF
        ),
        "the Claude Code settings in .claude",
    ),
    (re.compile(r"(?<![\w.-])\.codex" + _END), "the Codex settings in .codex"),
    (
        re.compile(
            r"(?<![\w.-])\.git(?:/(?:(?:" + _PART + r"*/)?(?:hooks(?:/" + _PART + r"*)?"
            r"|config(?:\.worktree)?)|" + _PART + r"*[*?\[]" + _PART + r"*)?)?" + _LEAF
        ),
        "the git gate in .git (hooks, config)",
    ),
)
# Where a name only leaves a folder out (`grep -r --exclude-dir=.git`, `find . -not -path
# './.git/*'`, `find . -path ./.git -prune`): such a mention is not a target.
EXCLUDED = re.compile(
    r"--(?:exclude-dir|exclude|ignore-dir)=\S+"
    r"|(?:-not|!)\s+-(?:i?path|i?name)\s+\S+"
    r"|-(?:i?path|i?name)\s+\S+\s+-prune(?![\w-])"
)
# git subcommands that write the repository's config (a hooks path, a driver) unnamed.
GIT_CONFIG_WRITERS = {
    "config": None,  # any form the read-only screen did not accept
    "remote": ("add", "set-url", "rename", "remove", "rm", "set-head", "set-branches"),
    "submodule": ("add", "init", "sync", "deinit", "--init"),
    "init": ("--template", "--separate-git-dir"),
}
_GIT_GLOBAL_WITH_VALUE = ("-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path")
_SEPARATORS = frozenset((";", "&&", "||", "|", "&", "(", ")", "\n", "|&", ";;"))


@dataclass(frozen=True, slots=True)
class Guarded:
    """The person-only paths found on disk: absolute, normalized, in written and real form.
    A path at or under one of them is person-only."""

    paths: tuple[str, ...]

    def holding(self, path: str) -> str | None:
        """The guarded path `path` (absolute, normalized) is or lies under, else None."""
        for guarded in self.paths:
            if path == guarded or path.startswith(guarded.rstrip(os.sep) + os.sep):
                return guarded
        return None


def person_only_path(call: ToolCall, guarded: Guarded, real: dict[str, str]) -> str | None:
    """What person-only path the PreToolUse `call` would write (a description naming it), or
    None. `real` maps each of the call's files (as written) to its real absolute path (the
    caller resolves symlinks). A shell command the read-only screen passed (`call.gated`
    False) or a call after the fact is never refused here."""
    if call.event != "PreToolUse" or not call.gated:
        return None
    for name in call.files:
        written = os.path.normpath(os.path.join(call.cwd, name))
        for path in (written, real.get(name, written)):
            found = guarded.holding(path) or _named(path)
            if found:
                return f"{name} ({found})"
    if call.command is not None and call.tool in SHELLS:
        return shell_touches(call.command, call.cwd, guarded)
    return None


def shell_touches(command: str, cwd: str, guarded: Guarded) -> str | None:
    """The person-only path (or the git command writing one) the shell `command`, run in
    `cwd`, may write, or None; conservative (see the module doc)."""
    text = EXCLUDED.sub(" ", command.translate(_QUOTING))
    found = _named(text)
    if found:
        return found
    for path in guarded.paths:
        forms = {path, os.path.relpath(path, cwd)}
        for form in forms:
            if form not in (".", "..") and re.search(
                r"(?<![\w.-])" + re.escape(form) + r"(?![\w.-])", text
            ):
                return f"{form} ({path})"
    if cwd_inside := guarded.holding(os.path.normpath(cwd)):
        return f"the working folder {cwd} ({cwd_inside})"
    return _git_config_writer(text)


def _named(text: str) -> str | None:
    for pattern, what in NAMED:
        hit = pattern.search(text)
        if hit:
            return f"{hit.group(0)} ({what})"
    return None


def _git_config_writer(text: str) -> str | None:
    """`git SUBCOMMAND` when `text` runs one that writes the repository's config."""
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        words = text.split()
    simple: list[str] = []
    for word in [*words, ";"]:
        if word not in _SEPARATORS:
            simple.append(word)
            continue
        found = _git_writes_config(simple)
        if found:
            return found
        simple = []
    return None


def _git_writes_config(words: list[str]) -> str | None:
    at = 0
    while at < len(words) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[at]):
        at += 1  # VAR=value before the program
    if at >= len(words) or os.path.basename(words[at]) != "git":
        return None
    at += 1
    while at < len(words) and words[at].startswith("-"):
        at += 2 if words[at] in _GIT_GLOBAL_WITH_VALUE else 1
    if at >= len(words) or words[at] not in GIT_CONFIG_WRITERS:
        return None
    sub, rest = words[at], words[at + 1 :]
    forms = GIT_CONFIG_WRITERS[sub]
    if forms is None or any(w.split("=", 1)[0] in forms for w in rest):
        return f"`git {sub}` (it writes the repository's git config, part of the git gate)"
    return None
