"""Where the fence's own files are on this machine (`model.guarded` says which writes touch
them): the cluster folder, the user's state directory (hook sockets, served folders), each
served worktree's client settings and git gate (its git dirs' `hooks/` and `config`, a
`core.hooksPath` configured in them or in the user's git config), and the user's own client
settings (`~/.claude/settings*.json`, $CODEX_HOME, and the other clients' hook files)."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

from ..model.guarded import Guarded
from .paths import git_dirs, state_dir

# The other clients' hook settings (`installers.hookfiles`, `installers.opencodeplugin`),
# and Gemini CLI's folder trust, which decides whether it runs any hook: an agent that
# changes them switches its own fence off (a `hooksConfig.disabled`, a deleted plugin).
PROJECT_CLIENT_FILES = (
    ".gemini/settings.json",
    ".opencode/plugins",
    ".opencode/plugin",
    ".github/hooks",
    ".cursor/hooks.json",
    ".windsurf/hooks.json",
)
USER_CLIENT_FILES = (
    ".gemini/settings.json",
    ".gemini/trustedFolders.json",
    ".cursor/hooks.json",
    ".codeium/windsurf/hooks.json",
)
_SECTION = re.compile(r"^\s*\[\s*([A-Za-z0-9.-]+)(?:\s+\"[^\"]*\")?\s*\]")
_HOOKS_PATH = re.compile(r"^\s*hookspath\s*=\s*(.*?)\s*$", re.IGNORECASE)


def guarded_paths(cluster: Path, worktrees: Iterable[Path]) -> Guarded:
    """The person-only paths of the cluster folder `cluster` and its served `worktrees`,
    each in its written and real form, with the anchors the folders holding them hang from
    (likewise: $HOME, each worktree's root and the folder holding its repository's git dir;
    `model.guarded` derives those folders)."""
    home = Path.home()
    anchors = [home]
    found: list[Path] = [
        cluster,
        state_dir(),
        home / ".claude" / "settings.json",
        home / ".claude" / "settings.local.json",
        Path(os.environ.get("CODEX_HOME") or home / ".codex"),
        *(home / rel for rel in USER_CLIENT_FILES),
        _xdg_config() / "opencode" / "plugins",
    ]
    user_configs = [home / ".gitconfig", _xdg_config() / "git" / "config"]
    for root in worktrees:
        anchors.append(root)
        found += [
            root / ".claude" / "settings.json",
            root / ".claude" / "settings.local.json",
            root / ".codex",
            *(root / rel for rel in PROJECT_CLIENT_FILES),
        ]
        dirs = git_dirs(root)
        configs = list(user_configs)
        if dirs is not None:
            own, common = dirs
            anchors.append(common.parent)  # a linked worktree's repository: a worktree too
            found += [common / "hooks", common / "config", own / "config.worktree"]
            configs += [common / "config", own / "config.worktree"]
        found += [root / hooks for hooks in _hooks_paths(configs)]
    homes = _both_forms([home])
    return Guarded(_both_forms(found), _both_forms(anchors), homes)


def untracked(guarded: Guarded, worktrees: Iterable[Path]) -> Guarded:
    """`guarded` knowing which of its paths a plain `git clean` can remove
    (`Guarded.untracked`): those in `worktrees` that git neither tracks nor ignores, or
    holding such files, outside wholly untracked folders (a plain clean leaves those).
    Asked of git once per worktree, for a `git clean` only; where git cannot say, `guarded`
    is returned as it was (not known: `model.gitwrites` then refuses any the clean reaches)."""
    found: list[str] = []
    for root in worktrees:
        for form in dict.fromkeys(
            (os.path.normpath(os.path.abspath(root)), os.path.realpath(root))
        ):
            inside = [
                p
                for p in guarded.paths
                if p.startswith(form + os.sep) and ".git" not in p[len(form) :].split(os.sep)
            ]
            if not inside:
                continue
            specs = [os.path.relpath(p, form) for p in inside]
            others = "ls-files", "-z", "--others", "--exclude-standard", "--directory"
            try:
                listed = subprocess.run(
                    ["git", "-C", form, *others, "--", *specs],
                    capture_output=True,
                    timeout=10,
                    check=True,
                    stdin=subprocess.DEVNULL,
                ).stdout.decode("utf-8", "surrogateescape")
            except (OSError, subprocess.SubprocessError):
                return guarded
            files = [os.path.join(form, e) for e in listed.split("\0") if e and e[-1] != "/"]
            found += [p for p in inside if any(f == p or f.startswith(p + os.sep) for f in files)]
    return dataclasses.replace(guarded, untracked=tuple(dict.fromkeys(found)))


def _both_forms(found: Iterable[Path]) -> tuple[str, ...]:
    """Each of `found`, absolute and normalized, as written and real, without repeats."""
    paths: dict[str, None] = {}
    for path in found:
        written = os.path.normpath(os.path.abspath(os.path.expanduser(path)))
        paths[written] = None
        paths[os.path.realpath(written)] = None
    return tuple(paths)


def real_paths(cwd: str, files: Iterable[str]) -> dict[str, str]:
    """Each of `files` (relative to `cwd`) with its real absolute path (symlinks resolved)."""
    return {name: os.path.realpath(os.path.join(cwd, name)) for name in files}


def _hooks_paths(configs: Iterable[Path]) -> list[str]:
    """The `core.hooksPath` values set in the git config files `configs` (unreadable ones are
    passed over); a relative value is relative to the worktree, as git reads it."""
    values = []
    for config in configs:
        try:
            text = config.read_text(errors="replace")
        except OSError:
            continue
        section = ""
        for line in text.splitlines():
            head = _SECTION.match(line)
            if head:
                section = head.group(1).lower()
                continue
            value = _HOOKS_PATH.match(line)
            if section == "core" and value and value.group(1):
                values.append(os.path.expanduser(value.group(1).strip('"')))
    return values


def _xdg_config() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
