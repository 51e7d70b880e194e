"""The words of a shell command line, as far as a screen can prove them (pure).

`simple_commands` splits a line at `;`, `&&`, `||`, `|` and newlines into simple commands of
`Word`s, quoted as POSIX sh quotes, and raises NotRead on anything the shell would expand,
redirect (but to /dev/null, or `2>&1`) or run in the background: `$`, backquotes, `(`, `)`,
braces, a leading `~`, `&`, control characters, an open quote. A word remembers whether it
holds an unquoted glob character; a word that starts with one is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Word:
    """One word of a simple command, its quotes removed."""

    text: str
    glob: bool = False  # holds an unquoted `*`, `?` or `[`

    def safe_glob(self) -> bool:
        """True when the word cannot expand into an option: no glob, or it starts with a
        literal character other than `-` (the lexer refuses a word whose first character
        is an unquoted glob character)."""
        return not self.glob or not self.text.startswith("-")


class NotRead(Exception):
    """The command line holds shell work a screen cannot prove harmless."""


_REFUSED = set("<>()`${}")


def simple_commands(command: str) -> list[list[Word]]:
    """The simple commands of `command` (split at `;`, `&&`, `||`, `|`, newlines) as words.
    Raises NotRead on anything but plain words: expansions, redirections, subshells,
    background jobs, open quotes, control characters."""
    out: list[list[Word]] = []
    words: list[Word] = []
    text: list[str] = []
    started = glob = False
    i, n = 0, len(command)

    def end() -> None:
        nonlocal started, glob
        if started:
            words.append(Word("".join(text), glob))
        text.clear()
        started = glob = False

    def split() -> None:
        end()
        if words:
            out.append(list(words))
        words.clear()

    while i < n:
        c = command[i]
        if c in " \t":
            end()
        elif c in ";\n":
            split()
        elif c in "&|":
            if command[i + 1 : i + 2] == c:
                i += 1
            elif c == "&" or command[i + 1 : i + 2] == "&":
                raise NotRead("background job")
            split()
        elif c == ">" and (not started or "".join(text) in _FDS):
            text.clear()
            started = False
            i = _harmless_redirection(command, i)
        elif c in _REFUSED or (c == "~" and not started) or (ord(c) < 32 and c != "\t"):
            raise NotRead(f"shell syntax {c!r}")
        elif c == "#" and not started:
            while i < n and command[i] != "\n":
                i += 1
            continue
        elif c == "'":
            close = command.find("'", i + 1)
            if close < 0:
                raise NotRead("open quote")
            text.append(command[i + 1 : close])
            started, i = True, close
        elif c == '"':
            i = _double_quoted(command, i + 1, text)
            started = True
        elif c == "\\":
            if i + 1 >= n:
                raise NotRead("trailing backslash")
            if command[i + 1] != "\n":
                text.append(command[i + 1])
                started = True
            i += 1
        else:
            if c in "*?[":
                if not started:
                    raise NotRead("a word that starts with a glob")
                glob = True
            text.append(c)
            started = True
        i += 1
    split()
    return out


_FDS = ("", "1", "2")
_HARMLESS = re.compile(r">>?[ \t]*/dev/null|>&[12]")
_WORD_END = frozenset(" \t\n;&|")


def _harmless_redirection(command: str, i: int) -> int:
    """The index of the last character of a redirection at `i` that writes nothing:
    `>/dev/null`, `2>/dev/null`, `>>/dev/null`, `2>&1`. Raises NotRead on any other."""
    match = _HARMLESS.match(command, i)
    if match is None or (match.end() < len(command) and command[match.end()] not in _WORD_END):
        raise NotRead("a redirection")
    return match.end() - 1


def _double_quoted(command: str, i: int, text: list[str]) -> int:
    """Append the inside of a double-quoted string starting at `i`; the index of its close."""
    while i < len(command):
        c = command[i]
        if c == '"':
            return i
        if c in "$`" or (ord(c) < 32 and c not in "\t\n"):
            raise NotRead("expansion inside double quotes")
        if c == "\\" and command[i + 1 : i + 2] in ('"', "\\", "$", "`", "\n"):
            i += 1
            if command[i] != "\n":
                text.append(command[i])
        else:
            text.append(c)
        i += 1
    raise NotRead("open quote")
