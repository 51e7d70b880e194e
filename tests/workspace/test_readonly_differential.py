"""The read-only screen, checked by running what it lets through.

Commands are generated from every accepted program's option grammar (the screen's own
tables) mixed with hostile words: files named like options (`-i`, `--output=x`), globs,
substitutions, redirections, assignments, git options that start programs. Every command
the screen calls read-only runs (`bash -c`, a timeout) in a throwaway copy of a small git
worktree, and must leave every byte of it, .git included, as it was and start no program
but bash and the programs it names (an execve trace, where strace is installed). Two
worktrees: a plain one, and a hostile one whose .git/config and .gitattributes configure a
textconv driver, an external diff, a pager, a clean filter, the fsmonitor hook, signature
checks and a post-index-change hook, each a program that records that it ran.

The default suite runs a quick corpus; CI sets PLANFENCE_READONLY_EXAMPLES=10000.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planfence_net.workspace.model.readonly import (
    _FIND_UNARY,
    _FIND_VALUED,
    GIT,
    READERS,
    NotRead,
    is_read_only,
    simple_commands,
)
from planfence_net.workspace.place.gitsetup import git_setup
from support.workspace import git

EXAMPLES = int(os.environ.get("PLANFENCE_READONLY_EXAMPLES", "300"))
STRACE = shutil.which("strace")
OLD = 1_600_000_000  # file times well before the index's: no racily clean entry
FILES = {
    "lib.py": "def f():\n    return 1\n",
    "src/a.py": "import lib\nneedle = 1\n",
    "src/b.txt": "needle\nhay\n",
    "f.json": '{"a": [1, 2], "b": "needle"}\n',
    "notes.md": "# notes\n",
    "-i": "a file named like sed's in-place option\n",
    "-n": "x\n",
    "--output=out": "x\n",
    "-delete": "x\n",
}
EVIL = '#!/bin/sh\necho "$0 $*" >> PWNED\ncat "$1" 2>/dev/null\n'  # run from the worktree
HOSTILE_CONFIG = {
    "diff.evil.textconv": "{evil}",
    "diff.evil.command": "{evil}",
    "diff.external": "{evil}",
    "core.pager": "{evil}",
    "pager.log": "{evil}",
    "filter.evil.clean": "{evil}",
    "filter.evil.smudge": "{evil}",
    "core.fsmonitor": "{evil}",
    "log.showSignature": "true",
    "gpg.program": "{evil}",
}
SETTLE = ["-c", "core.fsmonitor=false", "-c", "filter.evil.clean=cat", "-c", "core.hooksPath=/x"]


def _make_template(root: Path, hostile: bool, evil: Path) -> Path:
    repo = root / ("hostile" if hostile else "plain")
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.invalid")
    git(repo, "config", "user.name", "t")
    shutil.rmtree(repo / ".git" / "hooks")
    (repo / ".git" / "hooks").mkdir()
    for rel, text in FILES.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    if hostile:
        (repo / ".gitattributes").write_text("* diff=evil filter=evil\n")
    git(repo, *SETTLE, "add", "--", ".")
    git(repo, *SETTLE, "commit", "-q", "-m", "one")
    (repo / "lib.py").write_text("def f():\n    return 2\n")
    git(repo, *SETTLE, "commit", "-q", "-am", "two")
    (repo / "src/a.py").write_text("import lib\nneedle = 2\n")  # a change to diff
    if hostile:
        _signed_commit(repo)
        for key, value in HOSTILE_CONFIG.items():
            git(repo, "config", key, value.format(evil=evil))
        hook = repo / ".git" / "hooks" / "post-index-change"
        hook.write_text(f"#!/bin/sh\nexec {evil} hook\n")
        hook.chmod(0o755)
    for path in [repo, *repo.rglob("*")]:
        os.utime(path, (OLD, OLD), follow_symlinks=False)
    return repo


def _signed_commit(repo: Path) -> None:
    """A commit on HEAD that carries a (bogus) signature: showing it with log.showSignature
    runs gpg.program."""
    head, tree = git(repo, "rev-parse", "HEAD", "HEAD^{tree}").split()
    who = "t <t@example.invalid> 1600000000 +0000"
    body = (
        f"tree {tree}\nparent {head}\nauthor {who}\ncommitter {who}\n"
        "gpgsig -----BEGIN PGP SIGNATURE-----\n \n iQEzBAABCAAdFiEE\n -----END PGP SIGNATURE-----\n"
        "\nthree\n"
    )
    commit = subprocess.run(
        ["git", "hash-object", "-t", "commit", "-w", "--stdin"],
        cwd=repo, input=body, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    git(repo, "update-ref", "HEAD", commit)


def tree_hash(root: Path) -> str:
    """A hash of every name, mode, symlink target and file content under `root`."""
    digest = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(dirs + files):
            path = Path(folder, name)
            st_ = path.lstat()
            digest.update(f"{path.relative_to(root)}\0{st_.st_mode:o}\0".encode())
            if path.is_symlink():
                digest.update(os.readlink(path).encode())
            elif path.is_file():
                digest.update(path.read_bytes())
    return digest.hexdigest()


@dataclass
class Sandbox:
    """A throwaway copy of a template worktree, re-made after any run that changed it."""

    template: Path
    copy: Path
    facts: frozenset[str]
    baseline: str = ""

    def reset(self) -> None:
        if self.copy.exists():
            shutil.rmtree(self.copy)
        shutil.copytree(self.template, self.copy, symlinks=True)
        git(self.copy, *SETTLE, "update-index", "-q", "--refresh")
        self.baseline = tree_hash(self.copy)

    def run(self, command: str) -> str | None:
        """Run `command` in the copy; None, or what it did that a read must not."""
        trace = self.copy.parent / f"{self.copy.name}.trace"
        argv = ["bash", "-c", command]
        if STRACE:
            argv = [STRACE, "-f", "-qq", "-e", "trace=execve", "-o", str(trace), *argv]
        try:
            subprocess.run(
                argv,
                cwd=self.copy,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=20,
                env={"PATH": os.environ["PATH"], "HOME": str(self.copy.parent), "LC_ALL": "C"},
            )
        except subprocess.TimeoutExpired:
            pass  # a read that hangs is not a write; the tree is still checked
        problem = None
        if tree_hash(self.copy) != self.baseline:
            problem = "changed the worktree"
        elif STRACE:
            started = _started(trace.read_text())
            named = {"bash"} | _programs(command)
            if not started <= named:
                problem = f"started {sorted(started - named)}"
        if problem:
            self.reset()
        return problem


def _programs(command: str) -> set[str]:
    """The programs `command` names (its first word, when the screen's lexer refuses it)."""
    try:
        return {words[0].text for words in simple_commands(command)}
    except NotRead:
        return {shlex.split(command)[0]}


def _started(trace: str) -> set[str]:
    """The programs a strace execve log shows started (successful execve calls)."""
    found = set()
    for line in trace.splitlines():
        if "execve(" in line and line.rstrip().endswith("= 0"):
            path = line.split('execve("', 1)[1].split('"', 1)[0]
            found.add(path.rsplit("/", 1)[-1])
    return found


@pytest.fixture(scope="module")
def sandboxes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Sandbox]]:
    root = tmp_path_factory.mktemp("readonly")
    evil = root / "evil"
    evil.write_text(EVIL)
    evil.chmod(0o755)
    boxes = {}
    for hostile in (False, True):
        template = _make_template(root, hostile, evil)
        box = Sandbox(template, root / f"{template.name}-copy", git_setup(str(template)))
        box.reset()
        boxes[template.name] = box
    yield boxes


# -- the corpus ---------------------------------------------------------------------------------

OPERANDS = [*FILES, "src", ".", "-", "missing", "src/*.py", "*.py", "*", "?i", "s*", "-*"]
VALUES = ["1", "5", "needle", "lib.py", "%h %s", "%G?", "w out", "1e touch PWNED", "1p", "$p"]
HOSTILE = [
    "-i", "-e", "--in-place=.bak", "-f", "--output=out", "-o", "out", ">out", ">>out", "<lib.py",
    "$(touch PWNED)", "`touch PWNED`", "{-i,x}", "~", "X=1", "&", ";", "|", "||", "&&",
    "-exec", "touch", "PWNED", "{}", "\\;", "-delete", "-fprint", "--pre", "-z", "--ext-diff",
    "--textconv", "-c", "core.pager=touch PWNED", "-O", "--show-signature", "-p",
    "2>/dev/null", "2>&1", ">/dev/null", ">&3", "3>/dev/null", ">/dev/nullx", "GIT_EXTERNAL_DIFF=touch", "env", "export GIT_PAGER=x;", "tee", "out", "*", "(", ")",
]  # fmt: skip
SED_SCRIPTS = [
    "1p",
    "1,5p",
    "$p",
    "/needle/p",
    "=",
    "1p;2p",
    "w out",
    "1e touch PWNED",
    "1r lib.py",
]
SEPARATORS = [" ; ", " && ", " || ", " | ", "\n", " & "]


def _with_hostile(words: st.SearchStrategy[list[str]]) -> st.SearchStrategy[list[str]]:
    """`words`, half the time with one hostile word inserted somewhere after the program."""
    insert = st.tuples(st.sampled_from(HOSTILE), st.integers(1, 8))
    return st.tuples(words, st.one_of(st.none(), insert)).map(
        lambda t: t[0] if t[1] is None else [*t[0][: t[1][1]], t[1][0], *t[0][t[1][1] :]]
    )


def _option_words(
    flags: list[str], valued: dict[str, object], long_valued: dict[str, object]
) -> st.SearchStrategy[list[str]]:
    """One option of a row as words: a flag, `-X VALUE`, `-XVALUE`, `--long=VALUE`."""
    choices: list[st.SearchStrategy[list[str]]] = []
    if flags:
        choices.append(st.sampled_from(flags).map(lambda f: [f]))
    for options, glue in ((sorted(valued), ""), (sorted(long_valued), "=")):
        if options:
            choices.append(
                st.tuples(st.sampled_from(options), st.sampled_from(VALUES), st.booleans()).map(
                    lambda t, g=glue: [t[0] + g + t[1]] if t[2] else [t[0], t[1]]
                )
            )
    return st.one_of(*choices) if choices else st.just([])


def _reader_words(name: str) -> st.SearchStrategy[list[str]]:
    reader = READERS[name]
    flags = [f"-{c}" for c in reader.flags] + sorted(reader.long)
    if len(reader.flags) > 1:
        flags.append("-" + reader.flags[:2])
    valued = {f"-{c}": 1 for c in reader.valued}
    option = _option_words(flags, valued, dict(reader.long_valued))
    if name == "sed":
        firsts = SED_SCRIPTS
    elif reader.first:
        firsts = ["needle", ".", ".a", "needle|hay"]
    else:
        firsts = OPERANDS
    words = st.tuples(
        st.lists(option, max_size=3), st.sampled_from(firsts), st.lists(st.sampled_from(OPERANDS), max_size=3)
    ).map(lambda t: [name, *(w for o in t[0] for w in o), t[1], *t[2]])  # fmt: skip
    return _with_hostile(words)


def _find_words() -> st.SearchStrategy[list[str]]:
    test = st.one_of(
        st.sampled_from(sorted(_FIND_UNARY - {"(", ")", "!", ","})).map(lambda t: [t]),
        st.tuples(
            st.sampled_from(sorted(_FIND_VALUED)), st.sampled_from(["*.py", "f", "1", "lib.py"])
        ).map(list),
    )
    words = st.tuples(
        st.lists(st.sampled_from(OPERANDS[:12]), max_size=2), st.lists(test, max_size=4)
    ).map(lambda t: ["find", *t[0], *(w for part in t[1] for w in part)])
    return _with_hostile(words)


def _git_words() -> st.SearchStrategy[list[str]]:
    def words(sub: str) -> st.SearchStrategy[list[str]]:
        row = GIT[sub]
        option = _option_words(sorted(row.options), {}, dict(row.valued))
        operands = ["HEAD", "HEAD~1", "HEAD:lib.py", "main", "lib.py", "src", "needle"]
        lead = st.lists(st.sampled_from(["--no-pager", "-P", "--no-optional-locks"]), max_size=1)
        return st.tuples(
            lead, st.lists(option, max_size=3), st.lists(st.sampled_from(operands), max_size=2)
        ).map(lambda t: ["git", *t[0], sub, *(w for o in t[1] for w in o), *t[2]])

    return _with_hostile(st.sampled_from(sorted(GIT)).flatmap(words))


def _quote(word: str, raw: bool) -> str:
    return word if raw else shlex.quote(word)


SIMPLE = st.one_of(
    st.sampled_from(sorted(READERS)).flatmap(_reader_words), _find_words(), _git_words()
)
QUOTED_SIMPLE = st.tuples(SIMPLE, st.lists(st.integers(0, 3), min_size=12, max_size=12)).map(
    lambda t: " ".join(_quote(w, t[1][i % 12] == 0) for i, w in enumerate(t[0]))
)  # a word is left unquoted (globs, expansions, redirections stay live) one time in four
COMMANDS = st.tuples(
    st.lists(QUOTED_SIMPLE, min_size=1, max_size=3), st.lists(st.sampled_from(SEPARATORS), min_size=2, max_size=2)
).map(lambda t: "".join(c + (t[1][i] if i < len(t[0]) - 1 else "") for i, c in enumerate(t[0])))  # fmt: skip


@pytest.mark.timeout(120 + EXAMPLES // 10)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES < 1000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(command=COMMANDS, kind=st.sampled_from(["plain", "hostile"]))
def test_what_the_screen_lets_through_changes_nothing_and_starts_nothing(
    sandboxes: dict[str, Sandbox], command: str, kind: str
) -> None:
    box = sandboxes[kind]
    if is_read_only(command, box.facts):
        assert box.run(command) is None, command


def test_the_hostile_worktree_is_configured_as_intended(sandboxes: dict[str, Sandbox]) -> None:
    assert sandboxes["plain"].facts == frozenset()
    assert {"textconv", "extdiff", "pager", "filter", "fsmonitor", "signature", "hook"} <= (
        sandboxes["hostile"].facts
    )


@pytest.mark.parametrize(
    ("kind", "command"),
    [
        ("plain", "sed -n 1p -i -e '1i X' lib.py"),
        ("plain", "sed -n 1p -e 'w out' lib.py"),
        ("plain", "sed -n 1p --in-place=.bak lib.py"),
        ("plain", "sed -n 1p -e '1e touch x' lib.py"),
        ("plain", "sed -n 1p ?i lib.py"),  # H6: the glob expands into -i
        ("hostile", "git show HEAD"),
        ("hostile", "git diff"),
        ("hostile", "git status"),
        ("hostile", "git --no-pager log --oneline -n 1"),  # gpg for the signed commit
    ],
)
def test_the_check_sees_what_the_screen_refuses(
    sandboxes: dict[str, Sandbox], kind: str, command: str
) -> None:
    """Each H1/H5/H6 form, run anyway, writes or starts a program: the check can fail."""
    box = sandboxes[kind]
    assert not is_read_only(command, box.facts)
    assert box.run(command) is not None


@pytest.mark.parametrize(
    "command",
    [
        "git status",
        "git diff src/a.py",
        "git log --oneline",
        "git log -p",
        "git show HEAD",
        "git grep needle",
        "grep -rn needle .",
        "find . -name '*.py'",
        "jq . f.json",
        "ls -la && wc -l lib.py && cat lib.py | head -n 1 && tail -1 lib.py",
    ],
)
def test_the_investigation_forms_run_clean_in_the_plain_worktree(
    sandboxes: dict[str, Sandbox], command: str
) -> None:
    box = sandboxes["plain"]
    assert is_read_only(command, box.facts)
    assert box.run(command) is None


@pytest.mark.parametrize(
    "command",
    [
        "git --no-pager log --oneline --no-show-signature",
        "git --no-pager show --no-textconv --no-ext-diff --no-show-signature HEAD",
        "git --no-pager log -p --no-textconv --no-ext-diff --no-show-signature",
        "git --no-pager cat-file -p HEAD:lib.py",
        "git -P rev-parse --show-toplevel",
    ],
)
def test_forms_that_avoid_every_trigger_run_clean_in_the_hostile_worktree(
    sandboxes: dict[str, Sandbox], command: str
) -> None:
    box = sandboxes["hostile"]
    assert is_read_only(command, box.facts)
    assert box.run(command) is None


def test_the_exec_trace_sees_a_started_program(sandboxes: dict[str, Sandbox]) -> None:
    """Where strace is missing the corpus checks bytes only; this says so in one line."""
    if not STRACE:
        pytest.skip("strace is not installed: the corpus checks bytes, not started programs")
    assert sandboxes["plain"].run("cat lib.py | od -c") is None
    assert sandboxes["plain"].run("sh -c 'cat lib.py; :'") == "started ['cat']"
