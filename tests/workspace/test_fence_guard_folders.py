"""The fence guards the folders that hold its files: a shell command that deletes or moves a
folder holding a client's hook settings (`rm -rf .gemini`, `mv .cursor x`, `rm -rf
~/.config/opencode`) switches that client's hooks off as surely as editing them, so it is
refused like a write to the file itself, naming it; so is a glob that could match such a
folder, and a `git clean` that could remove an untracked one. Writing beside the fence's files
(`.github/workflows/ci.yml` beside `.github/hooks`), formatting, staging and testing the
worktree stay allowed. The pure rule (`model.guarded`), fed the paths found on disk
(`place.guarded`), and the real hook process in a served worktree."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from planfence_net.workspace.model.guarded import Guarded, person_only_path, shell_touches
from planfence_net.workspace.model.payload import ToolCall
from planfence_net.workspace.place.guarded import (
    PROJECT_CLIENT_FILES,
    USER_CLIENT_FILES,
    guarded_paths,
)
from support.workspace import make_repo, payload, run_cli, run_hook, served

AUTO = ("--mode", "auto")
PERSON = (
    "one of the fence's own files, which only a person may change (whatever the plan). Do "
    "not try another way; ask the user to make this change.\n"
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh $HOME (XDG_CONFIG_HOME and CODEX_HOME unset): the user's files are under it."""
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("CODEX_HOME", raising=False)
    return folder


@pytest.fixture
def repo(tmp_path: Path, home: Path) -> Path:
    """A served worktree's folder (its `.git` a folder): no file exists but `.git`, the
    fence guards the paths whether they exist or not."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "src").mkdir()
    return root


def guarded(repo: Path) -> Guarded:
    return guarded_paths(repo / ".planfence", [repo])


# (command, the guarded path the refusal names, relative to the worktree or ~ for $HOME)
REFUSED = [
    ("rm -rf .gemini", ".gemini/settings.json"),
    ("mv .gemini old", ".gemini/settings.json"),
    ("rm -r .github", ".github/hooks"),
    ("rm -rf .opencode", ".opencode/plugins"),
    ("mv .cursor x", ".cursor/hooks.json"),
    ("rm -rf .windsurf/", ".windsurf/hooks.json"),
    ("rm -rf ~/.gemini", "~/.gemini/settings.json"),
    ("rm -rf ~/.config/opencode", "~/.config/opencode/plugins"),
    ("rm -rf ~/.config", "~/.config/opencode/plugins"),
    ("rm -rf ~/.codeium", "~/.codeium/windsurf/hooks.json"),
    ("mv $HOME/.cursor /tmp/c", "~/.cursor/hooks.json"),
    ("rm -rf ${HOME}/.codeium/windsurf", "~/.codeium/windsurf/hooks.json"),
    ("rm -rf ./.gemini/", ".gemini/settings.json"),
    ("rm -rf ./.gemini/*", ".gemini/settings.json"),
    ("rm -rf .gem*", ".gemini/settings.json"),
    ("rm -rf .[g]emini", ".gemini/settings.json"),
    ("rm -rf .g?thub", ".github/hooks"),
    ("mv .github/h* x", ".github/hooks"),
    ("rm -rf ~/.codei*", "~/.codeium/windsurf/hooks.json"),
    ("rm -rf ~/.co*", "~/.codex"),
    ("python3 -c \"import shutil; shutil.rmtree('.open''code')\"", ".opencode/plugins"),
    ("find . -name x -delete; rm -rf .cursor", ".cursor/hooks.json"),
    # the text is read, not what the command does (docs/HOOKS.md section 6)
    ("git add .github", ".github/hooks"),
    ("cp -r ~/.config/opencode /tmp/keep", "~/.config/opencode/plugins"),
    ("rm -rf vendor/.github", ".github/hooks"),
]


def absolute(repo: Path, home: Path, rel: str) -> str:
    return str(home / rel[2:]) if rel.startswith("~/") else str(repo / rel)


@pytest.mark.parametrize(("command", "holding"), REFUSED)
def test_a_command_on_a_folder_holding_the_fences_files_is_refused(
    repo: Path, home: Path, command: str, holding: str
) -> None:
    found = shell_touches(command, str(repo), guarded(repo))
    assert found is not None and absolute(repo, home, holding) in found, found


def test_every_form_of_the_folder_is_refused(
    repo: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written, relative to the working folder, absolute, and through a symlinked home."""
    fence = guarded(repo)
    src = str(repo / "src")
    for command, cwd in (
        ("rm -rf ../.github", src),
        (f"rm -rf {repo}/.github", src),
        (f"mv {repo / '.github'} /tmp/x", "/"),
        ("rm -rf ../.config", str(home / "work")),
        ("rm -rf ../../.codeium/windsurf", str(home / "work" / "x")),
        (f"rm -rf {home}/.gemini", "/"),
        (f"rm -rf {str(home)[1:]}/.gemini", "/"),
        ("rm -rf ../opencode", str(home / ".config" / "x")),
    ):
        assert shell_touches(command, cwd, fence) is not None, (command, cwd)
    alias = home.parent / "alias"
    alias.symlink_to(home)
    monkeypatch.setenv("HOME", str(alias))
    via_alias = guarded(repo)
    for command in ("rm -rf ~/.gemini", f"rm -rf {alias}/.gemini", f"rm -rf {home}/.gemini"):
        found = shell_touches(command, "/", via_alias)
        assert found is not None and ".gemini/settings.json" in found, command


@pytest.mark.parametrize(
    ("command", "cwd", "path"),
    [  # each was let through: the user's files were matched only absolute or relative
        ("echo '{}' > ~/.gemini/trustedFolders.json", "", "~/.gemini/trustedFolders.json"),
        ("echo x > ~/.codeium/windsurf/hooks.json", "", "~/.codeium/windsurf/hooks.json"),
        ("rm -rf $HOME/.config/opencode/plugins", "", "~/.config/opencode/plugins"),
        ("cp x ${HOME}/.cursor/hooks.json", "", "~/.cursor/hooks.json"),
        ("cd .. && echo x > .gemini/settings.json", "src", ".gemini/settings.json"),
    ],
)
def test_the_fences_files_are_refused_from_home_and_from_the_root(
    repo: Path, home: Path, command: str, cwd: str, path: str
) -> None:
    found = shell_touches(command, str(repo / cwd), guarded(repo))
    assert found is not None and found.endswith(f" ({absolute(repo, home, path)})"), found


def test_a_linked_worktrees_repository_is_a_root_not_a_folder(home: Path) -> None:
    """The folders above a linked worktree's repository (`~/src` holding `~/src/main/.git`)
    are not the fence's: that repository hangs from its own root, as a worktree does."""
    main, tree = home / "src" / "main", home / "tree"
    (main / ".git" / "worktrees" / "tree").mkdir(parents=True)
    (main / ".git" / "worktrees" / "tree" / "commondir").write_text("../..\n")
    tree.mkdir()
    (tree / ".git").write_text(f"gitdir: {main}/.git/worktrees/tree\n")
    fence = guarded_paths(tree / ".planfence", [tree])
    assert str(main / ".git" / "hooks") in fence.paths
    for command in ("cd ~/src && make", "cd ~/src/main && git pull", "rm -rf ../src/old"):
        assert shell_touches(command, str(tree), fence) is None, command
    found = shell_touches("rm -rf ~/src/main/.git/worktrees", str(tree), fence)
    assert found == (
        f".git/worktrees (the folder holding {main}/.git/worktrees/tree/config.worktree)"
    )


ALLOWED = [
    "ruff format .",
    "git add .",
    "mkdir -p .github/workflows && echo x > .github/workflows/ci.yml",
    "mv .github/workflows/a.yml .github/workflows/b.yml",
    "rm -rf .github/workflows/old.yml .gemini-old src/.geminirc",
    "echo x > ~/.config/other/file",
    "cp notes.md ~/.config/other/",
    "pytest tests/",
    "rm -rf build dist node_modules ~/.cache",
    "rm -f build/*.o src/*.pyc .github/workflows/*.yml .github/*.md",
    "rm -rf *",  # the shell's * does not match a dotted name
    "rm -rf .",  # the whole worktree: a known limit (docs/HOOKS.md section 6)
    "rm -rf ..",
    "git clean -n",
    "git clean -ndx",
    "git clean --dry-run -fdx",
    "git clean -fdx build/",
    "grep -rl old --exclude-dir=.github . | xargs sed -i s/old/new/",  # leaves it out
    "find . -path ./.gemini -prune -o -name '*.orig' -delete",
    "ls ~/.gemini ~/.config/opencode",  # looking: `~` is the shell's work, yet only a look
    "cat ~/.gemini/settings.json $HOME/.cursor/hooks.json",
    "ls -la ${HOME}/.codeium/windsurf/",
]


@pytest.mark.parametrize("command", ALLOWED)
def test_work_beside_the_fences_folders_is_allowed(repo: Path, command: str) -> None:
    assert shell_touches(command, str(repo), guarded(repo)) is None


@pytest.mark.parametrize(
    "command",
    [
        "git clean -fdx",
        "git clean -xf",
        "git clean -fd",
        "git clean -fX",
        "git clean --force -d",
        "git -C src/.. clean -ffdx",
        "git clean -fdx -- src/.. -e '*.log'",
        "cd src && git clean -fdx",  # where `cd` leads is not followed: refused as if here
        "sh -c 'git clean -fdx'",
        "env GIT_TRACE=1 xargs git clean -fdx < /dev/null 2>&1",
        "git clean -fdx > /tmp/log 2> /dev/null",
    ],
)
def test_a_git_clean_that_can_remove_the_fences_files_is_refused(repo: Path, command: str) -> None:
    found = shell_touches(command, str(repo), guarded(repo))
    assert found is not None and found.startswith("`git clean` (it can remove "), found
    assert f"{repo}/" in found, found


def test_a_git_clean_elsewhere_in_the_worktree_is_allowed(repo: Path) -> None:
    fence = guarded(repo)
    assert shell_touches("git clean -fdx", str(repo / "src"), fence) is None
    assert shell_touches("git clean -fdx src", str(repo), fence) is None
    assert shell_touches("git -C src clean -fdx", str(repo), fence) is None


def test_a_plain_git_clean_is_refused_where_it_removes_an_untracked_one(repo: Path) -> None:
    """A plain `git clean -f` removes untracked files outside wholly untracked folders: a
    client's hook file beside tracked ones (`.cursor/hooks.json` next to a committed
    `.cursor/rules`). Found by review: it was let through. Refused where git says such a
    file is there (`Guarded.untracked`), and where git was not asked."""
    fence = guarded(repo)
    hooks = str(repo / ".cursor" / "hooks.json")
    found = shell_touches("git clean -f", str(repo), fence)  # not known: conservative
    assert found is not None and found.startswith("`git clean` (it can remove "), found
    known = dataclasses.replace(fence, untracked=(hooks,))
    for command in ("git clean -f", "git clean --force", "sh -c 'git clean -f'"):
        found = shell_touches(command, str(repo), known)
        assert found == f"`git clean` (it can remove {hooks} where git does not track it)"
    none = dataclasses.replace(fence, untracked=())
    assert shell_touches("git clean -f", str(repo), none) is None
    assert shell_touches("git clean -f src", str(repo), known) is None  # not where it is
    assert shell_touches("git clean -n", str(repo), known) is None
    found = shell_touches("git clean -fdx", str(repo), none)  # -d, -x: any it reaches
    assert found is not None and found.startswith("`git clean` (it can remove "), found


def test_the_hook_asks_git_which_of_the_fences_files_a_plain_git_clean_removes(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", {"lib.py": "x = 1\n", ".cursor/rules/style.md": "x\n"})
    with served(repo):
        run_cli("hook", "install", "cursor", "--project", str(repo), cwd=repo)
        assert (repo / ".cursor" / "hooks.json").exists()

        def clean(n: int) -> tuple[int, str]:
            data = {**payload("claude-read", repo), "tool_name": "Bash"}
            data.update(tool_input={"command": "git clean -f"}, tool_use_id=f"toolu_c{n}")
            return run_hook("claude", data, *AUTO)

        code, reason = clean(1)
        assert code == 2 and f"{repo / '.cursor' / 'hooks.json'} where git does not" in reason
        git(repo, "add", ".cursor/hooks.json")
        git(repo, "commit", "-qm", "the cursor hook")
        assert clean(2) == (0, "")  # tracked now: a plain clean leaves it


def test_a_file_tool_write_on_such_a_folder_is_refused(repo: Path, home: Path) -> None:
    fence = guarded(repo)
    for path, holding in (
        (repo / ".gemini", repo / ".gemini" / "settings.json"),
        (home / ".config" / "opencode", home / ".config" / "opencode" / "plugins"),
    ):
        call = ToolCall("claude", "PreToolUse", "s", str(repo), "Write", (str(path),), None, True)
        found = person_only_path(call, fence, {})
        assert found is not None and str(holding) in found, found
    beside = ToolCall(
        "claude", "PreToolUse", "s", str(repo), "Write", (".github/ci.yml",), None, True
    )
    assert person_only_path(beside, fence, {}) is None


# The real hook in a served worktree: each of these switched a client's hooks off unrefused.
FOUND = [
    "rm -rf .gemini",
    "mv .gemini old",
    "rm -r .github",
    "rm -rf .opencode",
    "mv .cursor x",
    "rm -rf ~/.gemini",
    "rm -rf ~/.config/opencode",
    "rm -rf ~/.codeium",
    "git clean -fdx",
]


def test_the_hook_refuses_them_and_lets_the_work_beside_them_through(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"lib.py": "x = 1\n", "tests/test_x.py": "\n"})
    with served(repo):
        read = payload("claude-read", repo)  # a fresh plan: only the fence's rule can block
        read = {**read, "hook_event_name": "PostToolUse"}
        read["tool_input"] = {"file_path": str(repo / "lib.py")}
        assert run_hook("claude", read, *AUTO) == (0, "")
        for n, command in enumerate(FOUND):
            data = {**payload("claude-read", repo), "tool_name": "Bash"}
            data.update(tool_input={"command": command}, tool_use_id=f"toolu_{n:04}")
            code, reason = run_hook("claude", data, *AUTO)
            assert code == 2 and reason.endswith(PERSON), (command, reason)
            assert "it would change " in reason, reason
        for n, command in enumerate(
            ("git add .", "pytest tests/", "mkdir -p .github/workflows", "ruff format ."),
            start=50,
        ):
            data = {**payload("claude-read", repo), "tool_name": "Bash"}
            data.update(tool_input={"command": command}, tool_use_id=f"toolu_{n:04}")
            assert run_hook("claude", data, *AUTO) == (0, ""), command


# -- a generated layout -------------------------------------------------------------------------

NAME = st.from_regex(r"\.?[a-z][a-z0-9_-]{0,6}", fullmatch=True).filter(
    lambda n: (
        not n.startswith((".git", ".claude", ".codex", ".planfence"))
        and n not in ("rm", "rf", "mv", "echo")
    )  # the commands' own words
)
CLIENTS = [rel.split("/") for rel in (*PROJECT_CLIENT_FILES, *USER_CLIENT_FILES)]
LAYOUT = st.builds(  # some of the clients' own files, and files of clients yet to come
    lambda known, new: known + new,
    st.lists(st.sampled_from(CLIENTS), max_size=3, unique_by=tuple),
    st.lists(st.lists(NAME, min_size=2, max_size=4), max_size=3),
).filter(
    lambda files: files and not any(a != b and a == b[: len(a)] for a in files for b in files)
)  # no guarded path under another: what is under one is refused as under it
ROOT, HOME = "/w/repo", "/u/home"


def layout_guarded(files: list[list[str]], home: bool) -> Guarded:
    anchor = HOME if home else ROOT
    paths = tuple("/".join([anchor, *parts]) for parts in files)
    return Guarded(paths, anchors=(ROOT, HOME), homes=(HOME,))


def forms(anchor: str, rel: str, home: bool) -> list[tuple[str, str]]:
    """(a written form of ANCHOR/REL, the working folder it is written from)."""
    found = [(rel, anchor), (f"./{rel}/", anchor), (f"{anchor}/{rel}", "/tmp")]
    found.append((f"../{rel}", f"{anchor}/elsewhere"))
    if home:
        found += [(f"~/{rel}", "/tmp"), (f"$HOME/{rel}", ROOT)]
    return found


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=LAYOUT, home=st.booleans(), data=st.data())
def test_generated_folders_are_refused_and_their_siblings_are_not(
    files: list[list[str]], home: bool, data: st.DataObject
) -> None:
    fence = layout_guarded(files, home)
    anchor = HOME if home else ROOT
    folders = {"/".join(parts[:depth]) for parts in files for depth in range(1, len(parts))}
    rel = data.draw(st.sampled_from(sorted(folders)), label="folder")
    for form, cwd in forms(anchor, rel, home):
        for command in (f"rm -rf {form}", f"mv {form} old.bak"):
            found = shell_touches(command, cwd, fence)
            assert found is not None, (command, cwd)
            assert f"{anchor}/{rel}/" in found or f"{anchor}/{rel})" in found, found
    glob = f"{rel[:-1]}?"  # it can match the folder (and maybe another)
    found = shell_touches(f"rm -rf {glob}", anchor, fence)
    assert found is not None and found.startswith(f"{glob} (it can match {anchor}/"), found
    used = {name for parts in files for name in parts}
    sibling = data.draw(NAME.filter(lambda n: n not in used), label="sibling")
    parent = data.draw(st.sampled_from(sorted({"", *folders})), label="parent")
    beside = f"{parent}/{sibling}".lstrip("/")
    tails = ["/".join(beside.split("/")[at:]) for at in range(1, beside.count("/") + 1)]
    guarded_rel = ["/".join(parts) for parts in files]
    assume(  # a relative mention is read from each of its folders (`cd` is not followed)
        not any(
            t in folders or any(f"{t}/".startswith(f"{g}/") for g in guarded_rel) for t in tails
        )
    )
    for form, cwd in forms(anchor, beside, home):
        for command in (f"rm -rf {form}", f"mv {form} old.bak", f"echo 1 > {form}/1.txt"):
            assert shell_touches(command, cwd, fence) is None, (command, cwd)


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, timeout=30)
