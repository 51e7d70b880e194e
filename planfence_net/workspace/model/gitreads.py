"""git's reading subcommands, and what git's configuration can make each start (pure).

One row per subcommand (`GIT`): the options it may take and the TRIGGERS it can reach (a
pager, a textconv filter, an external diff, a clean filter, the fsmonitor hook, gpg for
signatures, the post-index-change hook, submodules); options that add one (`git log -p`
shows diffs) or avoid one (`--no-textconv`, `--no-pager`). `git_form_ok` accepts a form when
it reaches none of the triggers the configuration enables; `git_triggers` reads those from
`git config --list -z`, treating every key not known to be inert as "unknown", which every row
reaches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .shellwords import Word

TRIGGERS = frozenset(
    {"pager", "textconv", "extdiff", "filter", "fsmonitor", "signature", "hook", "submodule"}
    | {"unknown"}
)


def anything(value: str) -> bool:
    """An option value that may be any text."""
    return True


def digits(value: str) -> bool:
    """An option value that must be a count."""
    return value.isdigit()


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
_DIFF_VALUED = {"-U": digits, "--unified": digits, "--color": anything, "--word-diff": anything,
                "--stat": anything, "--abbrev": digits, "--diff-filter": anything, "-M": anything}  # fmt: skip
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
    "-n": digits, "--max-count": digits, "--skip": digits, "--since": anything,
    "--until": anything, "--after": anything, "--before": anything, "--author": anything,
    "--committer": anything, "--grep": anything, "--format": _no_gpg, "--pretty": _no_gpg,
    "--date": anything, "--decorate": anything, "-S": anything, "-G": anything, "-U": digits,
}  # fmt: skip
_LOG_ADDS = {o: _DIFFING for o in ("-p", "-u", "--patch", "--stat", "--numstat", "--shortstat",
                                   "-S", "-G", "--name-only", "--name-status")}  # fmt: skip
_WORKTREE = frozenset({"fsmonitor", "filter", "hook", "submodule"})
_IGNORE_SUBMODULES = {"--ignore-submodules": frozenset({"submodule"})}
GIT: dict[str, GitCommand] = {
    "status": GitCommand(
        frozenset("-s --short -b --branch --porcelain --long -v --ignored --ignore-submodules "
                  "-u --untracked-files --no-renames".split()),
        {"--porcelain": anything, "--untracked-files": anything, "--ignored": anything,
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
        {"-e": anything, "-f": anything, "-A": digits, "-B": digits, "-C": digits,
         "-m": digits, "--max-count": digits, "--max-depth": digits},
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
        {"--short": digits}, frozenset(),
    ),
    "cat-file": GitCommand(frozenset({"-p", "-t", "-s", "-e"}), {}, frozenset()),
    "branch": GitCommand(frozenset("--show-current -a -r -v -vv --no-color".split()),
                         {}, frozenset(), operands=False),
    "blame": GitCommand(
        frozenset("-w -M -C -e -s -l -p -n -c --porcelain --line-porcelain --root "
                  "--show-email --no-textconv".split()),
        {"-L": anything, "--date": anything}, frozenset({"textconv", "filter"}) | _WORKTREE,
        removes={"--no-textconv": frozenset({"textconv"})},
    ),
    "describe": GitCommand(frozenset("--tags --all --always --long --exact-match".split()),
                           {"--abbrev": digits, "--match": anything}, frozenset()),
    "remote": GitCommand(frozenset({"-v", "--verbose"}), {}, frozenset(), operands=False),
}  # fmt: skip

# What every git command can reach: a key not known to be inert, and a pager
# (`pager.<command> = true` pages any command).
EVERY_ROW = frozenset({"unknown", "pager"})
_GIT_GLOBAL = {"--no-pager": frozenset({"pager"}), "-P": frozenset({"pager"}),
               "--no-optional-locks": frozenset({"hook"}), "--literal-pathspecs": frozenset(),
               "--no-replace-objects": frozenset()}  # fmt: skip


def git_form_ok(args: list[Word], configured: frozenset[str]) -> bool:
    """`git [--no-pager|-P|--no-optional-locks] SUBCOMMAND ARGS` with the subcommand's forms,
    reaching none of the triggers in `configured`."""
    avoided: set[str] = set()
    while args and args[0].text in _GIT_GLOBAL:
        avoided |= _GIT_GLOBAL[args[0].text]
        args = args[1:]
    if not args or args[0].text not in GIT or any(w.glob for w in args):
        return False
    row = GIT[args[0].text]
    reached = set(row.triggers) | EVERY_ROW
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
