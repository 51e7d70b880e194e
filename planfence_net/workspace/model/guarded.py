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
out, `EXCLUDED`); and it refuses the git commands that write one without naming it
(`gitwrites`: `git config`, `git remote add`, a `git clean -fdx`, ...). A command that
passes the read-only screen (`reads.is_read_only`) is never asked: looking is always allowed.

A folder that holds a person-only path is the fence's too (`rm -rf .gemini`, `mv ~/.cursor x`
switch a client's hooks off as surely as an edit): each folder between a guarded path and the
anchor it hangs from (the served worktree's root, or $HOME for the user's files; never the
anchor itself) is refused where a command names it as a leaf (`.github`, `./.github/`,
`.github/*`, but not `.github/workflows/ci.yml`), written relative to its anchor (anywhere
in the text, as the paths above), absolute, from $HOME (`~/`, `$HOME/`) or relative to the
working folder; so is a glob word that could match one of them or a guarded path, component
by component, with the shell's rule that only a written dot matches a leading dot (`.gem*`,
`.[g]emini`, `.github/h*`, but not `*`). `.` and `..` (the working folder and its parent)
are never taken for such a folder.

`Guarded` holds the absolute person-only paths the caller found on disk (`place.guarded`),
each in its written and its real form, and the anchors (likewise); the folders and their
forms are derived once, when it is made. The names below are refused wherever they appear.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from .gitwrites import git_writer
from .payload import SHELLS, ToolCall

_QUOTING = str.maketrans("", "", "'\"\\")
_END = r"(?![\w.-])"  # where a name ends in shell text
_LEAF = r"(?![\w.-]|/[\w.-])"  # ... and nothing inside it follows
_PART = r"[^\s;&|()<>`]"  # a character of a path in shell text
_GLOB = re.compile(r"[*?\[]")
_GLOB_WORD = re.compile(_PART + r"*[*?\[]" + _PART + "*")
_HOME_FORMS = ("~/", "$HOME/", "${HOME}/")
_NAME = re.compile(r"[\w.-]")  # a character of a name
_AFTER_PATH = re.compile(_END)
# a leaf: nothing inside follows, nor a glob character (a glob word is matched as a glob)
_AFTER_FOLDER = re.compile("/(?!" + _PART + r")|(?![\w.*?\[-]|/)")
_HOME_WORD = re.compile(r"(?<![^\s=:])~(?=/|\s|$)|\$HOME(?!\w)|\$\{HOME\}")
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


@dataclass(frozen=True, slots=True)
class Folder:
    """A folder holding the guarded path `holds`, strictly below its `anchor`."""

    path: str
    anchor: str
    holds: str


# (a form in shell text, the guarded path it names, the folder holding it it names or None)
Mention = tuple[str, str, Folder | None]


@dataclass(frozen=True, slots=True)
class Guarded:
    """The person-only paths found on disk: absolute, normalized, in written and real form.
    A path at or under one of them is person-only, and so is each folder between one of them
    and its anchor (the deepest of `anchors` holding it; those in `homes` are $HOME). Their
    forms in shell text are derived once, here: absolute, relative to a worktree's root
    (anywhere in the text) or from $HOME (`~/`, `$HOME/`); `relative` holds those a working
    folder's relative form is needed for (under $HOME or under no anchor)."""

    paths: tuple[str, ...]
    anchors: tuple[str, ...] = ()
    homes: tuple[str, ...] = ()
    # those of `paths` git neither tracks nor ignores (or holding such files), when the
    # caller asked git (`place.guarded.untracked`, for a `git clean`); None: not known
    untracked: tuple[str, ...] | None = None
    folders: Mapping[str, Folder] = field(init=False, repr=False, compare=False)
    forms: tuple[Mention, ...] = field(init=False, repr=False, compare=False)
    relative: tuple[tuple[str, Folder | None], ...] = field(init=False, repr=False, compare=False)
    _targets: tuple[tuple[list[str], str, Folder | None], ...] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        folders = holding_folders(self.paths, self.anchors)
        forms: dict[str, tuple[str, Folder | None]] = {}
        relative: list[tuple[str, Folder | None]] = []
        for path, folder in [(p, None) for p in self.paths] + [
            (f.path, f) for f in folders.values()
        ]:
            anchor = folder.anchor if folder is not None else _anchor(path, self.anchors)
            written = [path]
            if anchor is not None and anchor in self.homes:
                written += [home + os.path.relpath(path, anchor) for home in _HOME_FORMS]
            elif anchor is not None:
                written.append(os.path.relpath(path, anchor))
            if anchor is None or anchor in self.homes:
                relative.append((path, folder))
            for form in written:
                forms.setdefault(form, (path, folder))  # a guarded path's own form first
        object.__setattr__(self, "folders", folders)
        object.__setattr__(self, "forms", _longest_first((f, *m) for f, m in forms.items()))
        object.__setattr__(self, "relative", tuple(relative))
        targets: list[tuple[list[str], str, Folder | None]]
        targets = [(p.split(os.sep), p, None) for p in self.paths]
        targets += [(f.path.split(os.sep), f.path, f) for f in folders.values()]
        object.__setattr__(self, "_targets", tuple(targets))

    def holding(self, path: str) -> str | None:
        """The guarded path `path` (absolute, normalized) is or lies under, else None."""
        for guarded in self.paths:
            if path == guarded or path.startswith(guarded.rstrip(os.sep) + os.sep):
                return guarded
        return None

    def named(self, text: str, cwd: str) -> str | None:
        """The guarded path (at or under it) or the folder holding one (as a leaf) that
        shell `text`, run in `cwd`, names, described, else None: the forms derived once
        first, then those relative to `cwd`, each longest first."""
        found = _mentioned(text, self.forms)
        if found or not self.relative:
            return found
        here = os.path.normpath(cwd).rstrip(os.sep).split(os.sep)
        relative = []
        for path, folder in self.relative:
            parts = path.split(os.sep)
            same = 0
            while same < min(len(parts), len(here)) and parts[same] == here[same]:
                same += 1
            if same < len(parts):  # not `.` or `..` only (the working folder, a parent)
                form = os.sep.join([os.pardir] * (len(here) - same) + parts[same:])
                relative.append((form, path, folder))
        return _mentioned(text, _longest_first(relative))

    def glob_target(self, pattern: str, written: str) -> str | None:
        """What the absolute, normalized glob `pattern` (`written` so) could match,
        described: a guarded path or a path under one, or a folder holding one; else None."""
        parts = pattern.split(os.sep)
        glob = next((n for n, part in enumerate(parts) if _GLOB.search(part)), len(parts))
        literal = os.sep.join(parts[:glob]) + os.sep  # what a match starts with
        for names, path, folder in self._targets:
            if len(parts) < len(names) or (folder is not None and len(parts) != len(names)):
                continue
            if not (path + os.sep).startswith(literal) and not literal.startswith(path + os.sep):
                continue
            if all(_matches(name, part) for name, part in zip(names, parts, strict=False)):
                held = f", the folder holding {folder.holds}" if folder else ""
                return f"{written} (it can match {path}{held})"
        return None


def _anchor(path: str, anchors: tuple[str, ...]) -> str | None:
    """The deepest of `anchors` holding `path` (strictly), else None."""
    return max((a for a in anchors if _under(path, a)), key=len, default=None)


def _said(written: str, path: str, folder: Folder | None) -> str:
    """How a mention (`written`) of guarded `path`, or of `folder` holding one, is said."""
    return f"{written} (the folder holding {folder.holds})" if folder else f"{written} ({path})"


def _longest_first(forms: Iterable[Mention]) -> tuple[Mention, ...]:
    return tuple(sorted(forms, key=lambda mention: len(mention[0]), reverse=True))


def _mentioned(text: str, forms: tuple[Mention, ...]) -> str | None:
    """The first of `forms` that `text` names (as a name: a guarded path with anything
    under it, a folder as a leaf), described as written, else None."""
    for form, path, folder in forms:
        at = text.find(form)
        while at >= 0:
            after = _AFTER_PATH if folder is None else _AFTER_FOLDER
            if (at == 0 or not _NAME.match(text, at - 1)) and (
                tail := after.match(text, at + len(form))
            ):
                return _said(text[at : tail.end()], path, folder)
            at = text.find(form, at + 1)
    return None


def _matches(name: str, pattern: str) -> bool:
    """Whether a shell glob component matches `name` (only a written dot a leading one)."""
    if name == pattern:
        return True
    if name.startswith(".") and not pattern.startswith("."):
        return False
    return ("*" in pattern or "?" in pattern or "[" in pattern) and fnmatchcase(name, pattern)


def holding_folders(paths: tuple[str, ...], anchors: tuple[str, ...]) -> dict[str, Folder]:
    """Each folder strictly between one of `paths` and the deepest of `anchors` holding it
    (a path under no anchor has none), by its path; an anchor is never one."""
    found: dict[str, Folder] = {}
    for path in paths:
        anchor = _anchor(path, anchors)
        if anchor is None:
            continue
        folder = os.path.dirname(path)
        while folder != anchor and _under(folder, anchor):
            found.setdefault(folder, Folder(folder, anchor, path))
            folder = os.path.dirname(folder)
    return found


def _under(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip(os.sep) + os.sep)


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
            if folder := guarded.folders.get(path):
                return _said(name, path, folder)
    if call.command is not None and call.tool in SHELLS:
        return shell_touches(call.command, call.cwd, guarded)
    return None


def shell_touches(command: str, cwd: str, guarded: Guarded) -> str | None:
    """The person-only path (or the git command writing one) the shell `command`, run in
    `cwd`, may write, or None; conservative (see the module doc). A command the read-only
    screen passes once $HOME is written out (`ls ~/.gemini`: `~` is the shell's work, which
    the screen refuses) only looks: never refused."""
    found = _touches(command, cwd, guarded)
    if found and guarded.homes and _HOME_WORD.search(command):
        from .readonly import is_read_only

        home = shlex.quote(guarded.homes[0])
        if is_read_only(_HOME_WORD.sub(lambda _: home, command)):
            return None
    return found


def _touches(command: str, cwd: str, guarded: Guarded) -> str | None:
    text = EXCLUDED.sub(" ", command.translate(_QUOTING))
    found = _named(text)
    if found:
        return found
    found = guarded.named(text, cwd)
    if found:
        return found
    if "*" in text or "?" in text or "[" in text:
        found = _glob_touches(text, cwd, guarded)
        if found:
            return found
    if cwd_inside := guarded.holding(os.path.normpath(cwd)):
        return f"the working folder {cwd} ({cwd_inside})"
    return git_writer(text, cwd, guarded.paths, guarded.untracked)


def _named(text: str) -> str | None:
    for pattern, what in NAMED:
        hit = pattern.search(text)
        if hit:
            return f"{hit.group(0)} ({what})"
    return None


def _glob_touches(text: str, cwd: str, guarded: Guarded) -> str | None:
    """What a glob word of `text` (run in `cwd`) could match, described: a guarded path, a
    path under one, or a folder holding one; else None. A relative word is read from `cwd`
    and, as the folders' own forms, from each worktree anchor at each of its folders."""
    for hit in _GLOB_WORD.finditer(text):
        word = hit.group(0).rsplit("=", 1)[-1]
        for candidate in _glob_paths(word, cwd, guarded):
            found = guarded.glob_target(candidate, hit.group(0))
            if found:
                return found
    return None


def _glob_paths(word: str, cwd: str, guarded: Guarded) -> list[str]:
    for home_form in _HOME_FORMS:
        if word.startswith(home_form):
            rest = word[len(home_form) :]
            return [os.path.normpath(os.path.join(home, rest)) for home in guarded.homes]
    if word.startswith("/"):
        return [os.path.normpath(word)]
    found = [os.path.normpath(os.path.join(cwd, word))]
    parts = [p for p in word.split("/") if p not in ("", ".")]
    for anchor in guarded.anchors:
        if anchor not in guarded.homes:
            found += [
                os.path.normpath(os.path.join(anchor, *parts[at:]))
                for at in range(len(parts))
                if parts[at] != ".."
            ]
    return found
