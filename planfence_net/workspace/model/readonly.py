"""Whether a shell command only reads, by proof (pure): the hook lets such a command through
unchecked, even from a stale plan.

A command is read-only only when every simple command in it is one of READERS' programs with
only the argument forms its row allows: each option is listed (an unknown one, `sed -i`,
`find -delete`, `rg --pre`, `git diff --output` is a write); scripts are parsed (`sed`: only
printing); nothing may be substituted or redirected. The shell's own work is refused before
any program is looked at: a redirection (but to /dev/null, or `2>&1`), `$`, a backquote, a subshell, a brace, a background
`&`, a leading `VAR=value`, a program by path, a wrapper (`env`, `time`, `sudo`). A word with
an unquoted glob character is taken only as a file operand of a program that reads files, and
only when it starts with a literal other than `-`: `src/*.py` cannot expand into an option,
`*` can (a file named `-i` turns `sed -n 1p *` into `sed -n 1p -i ...`).

git can start programs its configuration names: a pager, a textconv filter, an external diff,
a clean filter, the fsmonitor hook, gpg for signatures, a hook when the index is rewritten.
Each git subcommand's row names which of these TRIGGERS it can reach (and which options add or
remove one: `-p` adds textconv, `--no-ext-diff` removes the external diff, `--no-pager`
the pager); the caller passes the triggers the repository's configuration enables
(`git_triggers` reads `git config --list -z`; unknown keys enable "unknown", which every git
row reaches). A git form is read-only only when it reaches none of them. So `git diff FILE` passes in a
repository whose configuration starts nothing and is a write where a textconv driver is
configured; the default (no facts) assumes every trigger, so no git form that could start a
program passes. The environment (GIT_PAGER, GIT_EXTERNAL_DIFF, RIPGREP_CONFIG_PATH) is the
person's: a command cannot set it here (assignments are refused), and `export` is not a read.
git's index stat cache may be rewritten by `git status`/`git diff` (content unchanged); the
hook that rewrite can start (post-index-change) is the "hook" trigger.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

TRIGGERS = frozenset(
    {"pager", "textconv", "extdiff", "filter", "fsmonitor", "signature", "hook", "submodule"}
    | {"unknown"}
)
GitFacts = frozenset[str] | Callable[[], frozenset[str]]

# -- the shell: words, and whether a word may be expanded by a glob ------------------------------


@dataclass(frozen=True, slots=True)
class Word:
    text: str
    glob: bool = False  # holds an unquoted `*`, `?` or `[`

    def safe_glob(self) -> bool:
        """True when the word cannot expand into an option: no glob, or it starts with a
        literal character other than `-` (the lexer refuses a word whose first character
        is an unquoted glob character)."""
        return not self.glob or not self.text.startswith("-")


class NotRead(Exception):
    """The command is not proven read-only (internal to this module)."""


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


# -- one row per program ----------------------------------------------------------------------


def _any(value: str) -> bool:
    return True


def _number(value: str) -> bool:
    return value.isdigit()


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


def _lv(*names: str, check: Callable[[str], bool] = _any) -> dict[str, Callable[[str], bool]]:
    return {f"--{name}": check for name in names}


def _sed_script(script: str) -> bool:
    """Only printing: `p`, `=`, `l`, `q` after numeric, `$` or plain /regex/ addresses."""
    return all(_SED_COMMAND.fullmatch(part.strip()) for part in re.split(r"[;\n]", script))


_SED_ADDRESS = r"(?:\d+(?:~\d+)?|\$|/[^/\\\n]*/)"
_SED_COMMAND = re.compile(rf"(?:{_SED_ADDRESS}(?:,(?:{_SED_ADDRESS}|[+~]\d+))?)?\s*[p=lqQ]?")
_GREP_VALUED = {"e": _any, "f": _any, "m": _number, "A": _number, "B": _number, "C": _number}
_GREP_LONG_VALUED = {
    **_lv("regexp", "file", "include", "exclude", "exclude-dir", "label"),
    **_lv("max-count", "after-context", "before-context", "context", check=_number),
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
    "head": Reader(flags="qv", valued={"n": _any, "c": _any}, numeric=True,
                   long_valued=_lv("lines", "bytes")),
    "tail": Reader(flags="qv", valued={"n": _any, "c": _any}, numeric=True,
                   long_valued=_lv("lines", "bytes")),
    "wc": Reader(flags="lwcmL", long=_long("lines", "words", "bytes", "chars")),
    "ls": Reader(flags="laAhR1trSdFpiGgnoUXcu", long=_long("all", "almost-all", "color"),
                 long_valued=_lv("color", "sort", "time-style")),
    "nl": Reader(flags="p", valued={"b": _any, "n": _any, "w": _number, "s": _any, "v": _number}),
    "tac": _PLAIN, "stat": Reader(flags="Lt", valued={"c": _any}),
    "file": Reader(flags="bhiLN", long=_long("mime", "brief")),
    "diff": Reader(flags="uqrNwbBiytsc", valued={"U": _number, "C": _number},
                   long=_long("unified", "brief", "recursive", "new-file", "ignore-all-space",
                              "side-by-side", "report-identical-files", "color"),
                   long_valued=_lv("color")),
    "cmp": Reader(flags="bls"), "od": Reader(flags="bcdox", valued={"A": _any, "t": _any,
                                                                  "N": _number, "j": _number}),
    "xxd": Reader(flags="pu", valued={"l": _number, "s": _any, "c": _number, "g": _number},
                  max_operands=1),
    "hexdump": Reader(flags="Cbcdox", valued={"n": _number, "s": _number}),
    "strings": Reader(flags="a", valued={"n": _number}),
    "md5sum": Reader(flags="cb"), "sha256sum": Reader(flags="cb"), "sha1sum": Reader(flags="cb"),
    "cut": Reader(flags="s", valued={"d": _any, "f": _any, "c": _any, "b": _any}),
    "sort": Reader(flags="nrufhVbsM", valued={"k": _any, "t": _any}),
    "uniq": Reader(flags="cdiu", valued={"f": _number, "s": _number}, max_operands=1),
    "column": Reader(flags="t", valued={"s": _any}),
    "pwd": Reader(flags="LP", max_operands=0), "echo": Reader(flags="neE", files=False),
    "basename": Reader(files=False), "dirname": Reader(files=False),
    "realpath": Reader(flags="esq"), "true": Reader(files=False),
    "grep": _GREP,  # not egrep/fgrep: scripts that start sh and grep
    "rg": Reader(
        flags="niSswvlcFuHNxoPLU0",
        valued={**_GREP_VALUED, "g": _any, "t": _any, "T": _any, "M": _number, "d": _number},
        long=_long("hidden", "no-ignore", "files", "follow", "count", "fixed-strings",
                   "ignore-case", "smart-case", "line-number", "no-heading", "heading",
                   "files-with-matches", "vimgrep", "json", "no-config", "multiline", "trim"),
        long_valued={**_GREP_LONG_VALUED, **_lv("glob", "iglob", "type", "type-not"),
                     **_lv("max-depth", "max-columns", check=_number)},
        first="pattern", given_by=frozenset({"-e", "-f", "--regexp", "--file"}),
    ),
    "sed": Reader(
        flags="nErsuz", valued={"e": _sed_script},
        long=_long("quiet", "silent", "regexp-extended", "posix", "sandbox", "separate"),
        long_valued=_lv("expression", check=_sed_script),
        first="sed", given_by=frozenset({"-e", "--expression"}),
    ),
    "jq": Reader(
        flags="rcsneajSCMR", valued={"L": _any},
        long=_long("raw-output", "compact-output", "slurp", "null-input", "exit-status",
                   "join-output", "ascii-output", "sort-keys", "tab", "raw-input", "seq",
                   "stream", "color-output", "monochrome-output"),
        long_valued=_lv("indent", check=_number),
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


# -- git: one row per subcommand, with the configuration triggers it can reach ------------------


@dataclass(frozen=True, slots=True)
class GitCommand:
    """A git subcommand's forms. `options`: allowed options without a value; `valued`: with
    one value (`-n 5`, `-n5`, `--max-count=5`), each with a check; `triggers`: what the
    configuration can make it start; `adds`/`removes`: options that reach or avoid one;
    `first`: "pattern" when the first operand is a pattern (git grep); `numeric`: `-5`."""

    options: frozenset[str]
    valued: Mapping[str, Callable[[str], bool]]
    triggers: frozenset[str]
    adds: Mapping[str, frozenset[str]] = field(default_factory=dict)
    removes: Mapping[str, frozenset[str]] = field(default_factory=dict)
    first: str | None = None
    given_by: frozenset[str] = frozenset()
    numeric: bool = False
    operands: bool = True  # `git branch NAME` creates a branch: no operands there


def _no_gpg(value: str) -> bool:
    return "%G" not in value  # %G? and friends run gpg


_DIFF_OPTS = frozenset(
    "-p -u --patch -s --no-patch --stat --numstat --shortstat --name-only --name-status "
    "--raw --summary -w -b --ignore-all-space --ignore-space-change --color --no-color "
    "--minimal --patience --histogram -R --no-renames -M -C --find-renames --find-copies "
    "--word-diff --color-words --check --exit-code --quiet --no-textconv --no-ext-diff "
    "--full-index --binary --abbrev --no-prefix --text -a --dirstat --compact-summary".split()
)
_DIFF_VALUED = {"-U": _number, "--unified": _number, "--color": _any, "--word-diff": _any,
                "--stat": _any, "--abbrev": _number, "--diff-filter": _any, "-M": _any}  # fmt: skip
_NO_DIFF_PROGRAMS = {"--no-textconv": frozenset({"textconv"}),
                     "--no-ext-diff": frozenset({"extdiff"})}  # fmt: skip
_DIFFING = frozenset({"textconv", "extdiff"})
_LOG_OPTS = frozenset(
    "--oneline --graph --decorate --no-decorate --all --branches --tags --reverse "
    "--first-parent --no-merges --merges --abbrev-commit --follow --name-only --name-status "
    "--stat --shortstat --numstat -p -u --patch --no-patch --no-show-signature --date-order "
    "--topo-order --left-right --cherry-pick --full-history --source --no-color --color "
    "--no-textconv --no-ext-diff -w".split()
)
_LOG_VALUED = {
    "-n": _number, "--max-count": _number, "--skip": _number, "--since": _any,
    "--until": _any, "--after": _any, "--before": _any, "--author": _any,
    "--committer": _any, "--grep": _any, "--format": _no_gpg, "--pretty": _no_gpg,
    "--date": _any, "--decorate": _any, "-S": _any, "-G": _any, "-U": _number,
}  # fmt: skip
_LOG_ADDS = {o: _DIFFING for o in ("-p", "-u", "--patch", "--stat", "--numstat", "--shortstat",
                                   "-S", "-G", "--name-only", "--name-status")}  # fmt: skip
_WORKTREE = frozenset({"fsmonitor", "filter", "hook", "submodule"})
_IGNORE_SUBMODULES = {"--ignore-submodules": frozenset({"submodule"})}
GIT: dict[str, GitCommand] = {
    "status": GitCommand(
        frozenset("-s --short -b --branch --porcelain --long -v --ignored --ignore-submodules "
                  "-u --untracked-files --no-renames".split()),
        {"--porcelain": _any, "--untracked-files": _any, "--ignored": _any,
         "--ignore-submodules": lambda v: v == "all"},
        _WORKTREE, removes=_IGNORE_SUBMODULES,
    ),
    "diff": GitCommand(
        _DIFF_OPTS | {"--cached", "--staged", "--ignore-submodules"},
        {**_DIFF_VALUED, "--ignore-submodules": lambda v: v == "all"},
        _WORKTREE | _DIFFING | {"pager"}, removes={**_NO_DIFF_PROGRAMS, **_IGNORE_SUBMODULES},
    ),
    "log": GitCommand(_LOG_OPTS, _LOG_VALUED, frozenset({"pager", "signature"}),
                      adds=_LOG_ADDS, removes={**_NO_DIFF_PROGRAMS,
                                               "--no-show-signature": frozenset({"signature"})},
                      numeric=True),
    "show": GitCommand(_DIFF_OPTS | _LOG_OPTS, {**_DIFF_VALUED, **_LOG_VALUED},
                       frozenset({"pager", "signature"}) | _DIFFING,
                       removes={**_NO_DIFF_PROGRAMS,
                                "--no-show-signature": frozenset({"signature"})}),
    "grep": GitCommand(
        frozenset("-n --line-number -i --ignore-case -w -v -l -L -c -E -F -P -h -H -I -a "
                  "--cached --untracked --no-index --heading --break --full-name --count "
                  "--files-with-matches --name-only --column -o --only-matching -q".split()),
        {"-e": _any, "-f": _any, "-A": _number, "-B": _number, "-C": _number,
         "-m": _number, "--max-count": _number, "--max-depth": _number},
        frozenset({"fsmonitor"}), first="pattern", given_by=frozenset({"-e", "-f"}),
    ),
    "ls-files": GitCommand(
        frozenset("-c -d -m -o -s -z -t --cached --deleted --modified --others --stage "
                  "--exclude-standard --directory --full-name -v".split()),
        {}, frozenset({"fsmonitor"}),
    ),
    "rev-parse": GitCommand(
        frozenset("--show-toplevel --git-dir --abbrev-ref --short --verify --symbolic "
                  "--symbolic-full-name --show-prefix --show-cdup --is-inside-work-tree "
                  "-q --quiet".split()),
        {"--short": _number}, frozenset(),
    ),
    "cat-file": GitCommand(frozenset({"-p", "-t", "-s", "-e"}), {}, frozenset()),
    "branch": GitCommand(frozenset("--show-current -a -r -v -vv --no-color".split()),
                         {}, frozenset(), operands=False),
}  # fmt: skip
_GIT_GLOBAL = {"--no-pager": frozenset({"pager"}), "-P": frozenset({"pager"}),
               "--no-optional-locks": frozenset({"hook"}), "--literal-pathspecs": frozenset(),
               "--no-replace-objects": frozenset()}  # fmt: skip


def _git_ok(args: list[Word], configured: frozenset[str]) -> bool:
    """`git [--no-pager|-P|--no-optional-locks] SUBCOMMAND ARGS` with the subcommand's forms,
    reaching none of the triggers in `configured`."""
    avoided: set[str] = set()
    while args and args[0].text in _GIT_GLOBAL:
        avoided |= _GIT_GLOBAL[args[0].text]
        args = args[1:]
    if not args or args[0].text not in GIT or any(w.glob for w in args):
        return False
    row = GIT[args[0].text]
    reached = set(row.triggers) | {"unknown"}
    operands: list[str] = []
    given, ended, i = False, False, 1
    while i < len(args):
        text = args[i].text
        if ended or not text.startswith("-") or text == "-":
            operands.append(text)
        elif text == "--":
            ended = True
        elif row.numeric and text[1:].isdigit():
            pass
        else:
            name, eq, value = text.partition("=")
            if not eq and text[:2] in row.valued and len(text) > 2 and not text[1] == "-":
                name, eq, value = text[:2], "=", text[2:]  # -n5
            if eq or name not in row.options:
                if name not in row.valued:
                    return False
                if not eq:  # `--pretty --output=x`: `--pretty` takes no next word there
                    i += 1
                    if i >= len(args) or args[i].text.startswith("-"):
                        return False
                    value = args[i].text
                if not row.valued[name](value):
                    return False
            given |= name in row.given_by
            reached |= row.adds.get(name, frozenset())
            avoided |= row.removes.get(name, frozenset())
        i += 1
    if (row.first == "pattern" and not given and not operands) or (operands and not row.operands):
        return False
    return not (reached - avoided) & configured


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
    return all(_git_ok(args, configured) for args in gits)


def git_triggers(listing: str) -> frozenset[str]:
    """The triggers a configuration enables, from `git config --list -z` (entries
    `key\\nvalue\\0`): program keys map to their trigger; a key not known to be inert
    enables "unknown"."""
    found: set[str] = set()
    for entry in listing.split("\0"):
        if not entry:
            continue
        key, _, value = entry.partition("\n")
        trigger = _config_trigger(key.lower(), value.strip().lower())
        if trigger:
            found.add(trigger)
    return frozenset(found)


_FALSE = ("", "false", "no", "off", "0")
_INERT_SECTIONS = frozenset(
    "user init color advice branch remote push pull fetch merge mergetool difftool rerere "
    "rebase commit tag credential http url help column safe extensions index feature pack "
    "protocol transfer gc maintenance format am apply blame checkout clone i18n gui alias "
    "include includeif gpg lfs status grep stash worktree sparse notes mailmap receive "
    "sequence interactive log diff submodule".split()
)
_INERT_CORE = frozenset(
    "repositoryformatversion filemode bare logallrefupdates ignorecase precomposeunicode "
    "symlinks autocrlf eol safecrlf quotepath abbrev excludesfile attributesfile worktree "
    "sparsecheckout sparsecheckoutcone commentchar whitespace editor askpass sshcommand "
    "compression loosecompression bigfilethreshold preloadindex checkstat trustctime "
    "multipackindex commitgraph untrackedcache splitindex warnambiguousrefs protecthfs "
    "protectntfs sharedrepository".split()
)


def _config_trigger(key: str, value: str) -> str | None:
    parts = key.split(".")
    section, name = parts[0], parts[-1]
    if key in ("core.pager", "diff.external") or section == "pager":
        return "pager" if key != "diff.external" else "extdiff"
    if section == "diff" and len(parts) == 3 and name in ("textconv", "command"):
        return "textconv" if name == "textconv" else "extdiff"
    if section == "filter":
        return "filter"
    if key == "core.fsmonitor":
        return None if value in _FALSE else "fsmonitor"
    if key == "log.showsignature":
        return None if value in _FALSE else "signature"
    if key == "core.hookspath":
        return "hook"
    if section == "submodule":
        return "submodule"
    if section == "core":
        return None if name in _INERT_CORE else "unknown"
    return None if section in _INERT_SECTIONS else "unknown"
