"""Whether a shell command only reads, by proof (pure): the hook lets such a command through
unchecked, even from a stale plan.

A command is read-only only when every simple command in it is one of READERS' programs (or
`find`, or a git form of `gitreads.GIT`) with only the argument forms its row allows: each
option is listed (an unknown one, `sed -i`, `find -delete`, `rg --pre`, `git diff --output`
is a write); scripts are parsed (`sed`: only printing). The shell's own work is refused
first (`shellwords`): a redirection but to /dev/null, `$`, a backquote, a subshell, a brace,
a background `&`; then a leading `VAR=value`, a program by path, a wrapper (`env`, `time`).
A word with an unquoted glob character is taken only as a file operand that starts with a
literal other than `-`: `src/*.py` cannot expand into an option, `*` can (a file named `-i`
turns `sed -n 1p *` into `sed -n 1p -i ...`).

git can start programs its configuration names (a pager, a textconv filter, an external
diff, a clean filter, the fsmonitor hook, gpg, the post-index-change hook): a git form is
read-only only when it reaches none of the TRIGGERS the caller says the repository's
configuration enables (`gitreads.git_triggers`; by default all of them). So `git diff FILE`
passes in a repository whose configuration starts nothing, and is a write where a textconv
driver is configured. The environment (GIT_PAGER, GIT_EXTERNAL_DIFF, RIPGREP_CONFIG_PATH),
PATH and the client's shell functions are the person's: a command cannot set them here
(assignments are refused), and `export` is not a read. `git status` may rewrite the index's
stat cache (its content unchanged); the hook that rewrite can start is the "hook" trigger.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .gitreads import GIT, TRIGGERS, anything, digits, git_form_ok, git_triggers
from .shellwords import NotRead, Word, simple_commands

__all__ = [
    "GIT",
    "TRIGGERS",
    "NotRead",
    "READERS",
    "git_triggers",
    "is_read_only",
    "simple_commands",
]

GitFacts = frozenset[str] | Callable[[], frozenset[str]]


# -- one row per program ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reader:
    """The argument forms of one reading program.

    flags: single-letter options without a value (combinable: `-rn`); valued: single-letter
    options with one value (`-n 5`, `-n5`); long: long options without a value; long_valued:
    long options with one value (`--max-count 5`, `--max-count=5`), each with a check of the
    value. first: the kind of the first operand when no option gave it (None: every operand
    is a file; "pattern": any text; "sed": a printing sed script); given_by: the options that
    give it instead (`grep -e`). numeric: `head -5`. max_operands: `uniq IN OUT` writes OUT.
    """

    flags: str = ""
    valued: Mapping[str, Callable[[str], bool]] = field(default_factory=dict)
    long: frozenset[str] = frozenset()
    long_valued: Mapping[str, Callable[[str], bool]] = field(default_factory=dict)
    first: str | None = None
    given_by: frozenset[str] = frozenset()
    numeric: bool = False
    max_operands: int | None = None
    files: bool = True  # operands are files (a safe glob may stand for some)


def _long(*names: str) -> frozenset[str]:
    return frozenset(f"--{name}" for name in names)


def _lv(*names: str, check: Callable[[str], bool] = anything) -> dict[str, Callable[[str], bool]]:
    return {f"--{name}": check for name in names}


def _sed_script(script: str) -> bool:
    """Only printing: `p`, `=`, `l`, `q` after numeric, `$` or plain /regex/ addresses."""
    return all(_SED_COMMAND.fullmatch(part.strip()) for part in re.split(r"[;\n]", script))


_SED_ADDRESS = r"(?:\d+(?:~\d+)?|\$|/[^/\\\n]*/)"
_SED_COMMAND = re.compile(rf"(?:{_SED_ADDRESS}(?:,(?:{_SED_ADDRESS}|[+~]\d+))?)?\s*[p=lqQ]?")
_GREP_VALUED = {"e": anything, "f": anything, "m": digits, "A": digits, "B": digits, "C": digits}
_GREP_LONG_VALUED = {
    **_lv("regexp", "file", "include", "exclude", "exclude-dir", "label"),
    **_lv("max-count", "after-context", "before-context", "context", check=digits),
    **_lv("color", "colour", "binary-files"),
}
_GREP = Reader(
    flags="rRnivwxclLHhosqEFGPIaTZUz",
    valued=_GREP_VALUED,
    long=_long(
        "recursive",
        "line-number",
        "ignore-case",
        "invert-match",
        "word-regexp",
        "count",
        "files-with-matches",
        "files-without-match",
        "with-filename",
        "no-filename",
        "only-matching",
        "no-messages",
        "quiet",
        "extended-regexp",
        "fixed-strings",
        "perl-regexp",
        "text",
        "null",
        "null-data",
        "dereference-recursive",
        "no-ignore-case",
        "color",
        "colour",
    ),  # fmt: skip
    long_valued=_GREP_LONG_VALUED,
    first="pattern",
    given_by=frozenset({"-e", "-f", "--regexp", "--file"}),
)
_PLAIN = Reader()
READERS: dict[str, Reader] = {
    "cat": Reader(flags="nbAEeTtsuv", long=_long("number", "number-nonblank", "show-all")),
    "head": Reader(flags="qv", valued={"n": anything, "c": anything}, numeric=True,
                   long_valued=_lv("lines", "bytes")),
    "tail": Reader(flags="qv", valued={"n": anything, "c": anything}, numeric=True,
                   long_valued=_lv("lines", "bytes")),
    "wc": Reader(flags="lwcmL", long=_long("lines", "words", "bytes", "chars")),
    "ls": Reader(flags="laAhR1trSdFpiGgnoUXcu", long=_long("all", "almost-all", "color"),
                 long_valued=_lv("color", "sort", "time-style")),
    "nl": Reader(flags="p", valued={"b": anything, "n": anything, "w": digits, "s": anything, "v": digits}),
    "tac": _PLAIN, "stat": Reader(flags="Lt", valued={"c": anything}),
    "file": Reader(flags="bhiLN", long=_long("mime", "brief")),
    "diff": Reader(flags="uqrNwbBiytsc", valued={"U": digits, "C": digits},
                   long=_long("unified", "brief", "recursive", "new-file", "ignore-all-space",
                              "side-by-side", "report-identical-files", "color"),
                   long_valued=_lv("color")),
    "cmp": Reader(flags="bls"), "od": Reader(flags="bcdox", valued={"A": anything, "t": anything,
                                                                  "N": digits, "j": digits}),
    "xxd": Reader(flags="pu", valued={"l": digits, "s": anything, "c": digits, "g": digits},
                  max_operands=1),
    "hexdump": Reader(flags="Cbcdox", valued={"n": digits, "s": digits}),
    "strings": Reader(flags="a", valued={"n": digits}),
    "md5sum": Reader(flags="cb"), "sha256sum": Reader(flags="cb"), "sha1sum": Reader(flags="cb"),
    "cut": Reader(flags="s", valued={"d": anything, "f": anything, "c": anything, "b": anything}),
    "sort": Reader(flags="nrufhVbsM", valued={"k": anything, "t": anything}),
    "uniq": Reader(flags="cdiu", valued={"f": digits, "s": digits}, max_operands=1),
    "column": Reader(flags="t", valued={"s": anything}),
    "pwd": Reader(flags="LP", max_operands=0), "echo": Reader(flags="neE", files=False),
    "basename": Reader(files=False), "dirname": Reader(files=False),
    "realpath": Reader(flags="esq"), "true": Reader(files=False),
    "grep": _GREP,  # not egrep/fgrep: scripts that start sh and grep
    "rg": Reader(
        flags="niSswvlcFuHNxoPLU0",
        valued={**_GREP_VALUED, "g": anything, "t": anything, "T": anything, "M": digits, "d": digits},
        long=_long("hidden", "no-ignore", "files", "follow", "count", "fixed-strings",
                   "ignore-case", "smart-case", "line-number", "no-heading", "heading",
                   "files-with-matches", "vimgrep", "json", "no-config", "multiline", "trim"),
        long_valued={**_GREP_LONG_VALUED, **_lv("glob", "iglob", "type", "type-not"),
                     **_lv("max-depth", "max-columns", check=digits)},
        first="pattern", given_by=frozenset({"-e", "-f", "--regexp", "--file"}),
    ),
    "sed": Reader(
        flags="nErsuz", valued={"e": _sed_script},
        long=_long("quiet", "silent", "regexp-extended", "posix", "sandbox", "separate"),
        long_valued=_lv("expression", check=_sed_script),
        first="sed", given_by=frozenset({"-e", "--expression"}),
    ),
    "jq": Reader(
        flags="rcsneajSCMR", valued={"L": anything},
        long=_long("raw-output", "compact-output", "slurp", "null-input", "exit-status",
                   "join-output", "ascii-output", "sort-keys", "tab", "raw-input", "seq",
                   "stream", "color-output", "monochrome-output"),
        long_valued=_lv("indent", check=digits),
        first="pattern",
    ),
}  # fmt: skip


# -- checking one simple command ----------------------------------------------------------------


def _reader_ok(reader: Reader, args: list[Word]) -> bool:
    """True when `args` use only the forms of `reader`."""
    operands: list[Word] = []
    given = False
    i, ended = 0, False
    while i < len(args):
        word, text = args[i], args[i].text
        if ended or text == "-" or not text.startswith("-"):
            operands.append(word)
        elif word.glob:
            return False
        elif text == "--":
            ended = True
        elif text.startswith("--"):
            name, eq, value = text.partition("=")
            if name in reader.long and not eq:
                pass
            elif name in reader.long_valued:
                if not eq:  # `--color -i`: a word like an option is never taken as a value
                    i += 1
                    if i >= len(args) or args[i].glob or args[i].text.startswith("-"):
                        return False
                    value = args[i].text
                if not reader.long_valued[name](value):
                    return False
                given |= name in reader.given_by
            else:
                return False
        elif reader.numeric and text[1:].isdigit():
            pass
        else:
            j = 1
            while j < len(text):
                letter = text[j]
                if letter in reader.flags:
                    j += 1
                    continue
                if letter not in reader.valued:
                    return False
                value = text[j + 1 :]
                if not value:
                    i += 1
                    if i >= len(args) or args[i].glob:
                        return False
                    value = args[i].text
                if not reader.valued[letter](value):
                    return False
                given |= f"-{letter}" in reader.given_by
                break
        i += 1
    return _operands_ok(reader, operands, given)


def _operands_ok(reader: Reader, operands: list[Word], given: bool) -> bool:
    if reader.first is not None and not given:
        if not operands or operands[0].glob:
            return False
        if reader.first == "sed" and not _sed_script(operands[0].text):
            return False
        operands = operands[1:]
    if reader.max_operands is not None and len(operands) > reader.max_operands:
        return False
    return all(w.safe_glob() if reader.files else not w.glob for w in operands)


# -- find: paths, then an expression of tests (no actions) --------------------------------------

_FIND_OPTIONS = frozenset({"-H", "-L", "-P"})
_FIND_UNARY = frozenset(
    "-print -print0 -prune -not -a -o -and -or ! ( ) , -depth -xdev -mount -empty -readable "
    "-writable -executable -true -false -follow -nouser -nogroup -ls -quit -daystart".split()
)
_FIND_VALUED = frozenset(
    "-name -iname -path -ipath -wholename -iwholename -regex -iregex -type -xtype -maxdepth "
    "-mindepth -mtime -mmin -atime -amin -ctime -cmin -newer -size -perm -user -group -uid "
    "-gid -links -inum -samefile -lname -ilname -regextype -printf -used".split()
)


def _find_ok(args: list[Word]) -> bool:
    """`find [-H|-L|-P] PATH... EXPRESSION` with only tests and printing (no -exec, -ok,
    -delete, -fprint, -fls)."""
    i = 0
    while i < len(args) and args[i].text in _FIND_OPTIONS:
        i += 1
    while i < len(args) and not args[i].text.startswith(("-", "(", "!", ")", ",")):
        if not args[i].safe_glob():
            return False
        i += 1
    while i < len(args):
        word = args[i]
        if word.glob:
            return False
        if word.text in _FIND_VALUED:
            i += 1
            if i >= len(args) or args[i].glob:
                return False
        elif word.text not in _FIND_UNARY:
            return False
        i += 1
    return True


# -- the screen ---------------------------------------------------------------------------------


def is_read_only(command: str, git: GitFacts = TRIGGERS) -> bool:
    """True when every simple command of `command` is proven read-only (module docstring).

    `git`: the configuration triggers of the repository the command runs in (TRIGGERS, the
    default, assumes all of them), or a function returning them, called only when a git
    command is the one thing left to decide."""
    try:
        commands = simple_commands(command)
    except NotRead:
        return False
    if not commands:
        return False
    gits: list[list[Word]] = []
    for words in commands:
        program, args = words[0], words[1:]
        if program.glob or "/" in program.text or "=" in program.text:
            return False
        if program.text == "git":
            gits.append(args)
        elif program.text == "find":
            if not _find_ok(args):
                return False
        elif program.text not in READERS or not _reader_ok(READERS[program.text], args):
            return False
    if not gits:
        return True
    configured = git if isinstance(git, frozenset) else git()
    return all(git_form_ok(args, configured) for args in gits)
