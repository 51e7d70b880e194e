"""What a repository's git configuration can make a reading git command start: the facts the
read-only screen (`model.readonly`) needs about one worktree, read by running git (two
commands side by side, at most 5 s)."""

from __future__ import annotations

import os
import subprocess

from ..model.readonly import TRIGGERS, git_triggers


def git_setup(cwd: str) -> frozenset[str]:
    """The configuration triggers (`readonly.TRIGGERS`) of the git repository at `cwd`: what
    its configuration (`git config --list -z`, every scope, includes followed) can make a
    reading git command start, plus "hook" when a post-index-change hook exists and
    "submodule" when the worktree has a .gitmodules. Every trigger when git cannot tell
    (not a repository, git missing, an error): a git command there is checked as a write."""
    outputs = _git_outputs(
        cwd,
        ("rev-parse", "--show-toplevel", "--git-path", "hooks/post-index-change"),
        ("config", "--list", "-z"),
    )
    places, listing = outputs if outputs else (None, None)
    if places is None or listing is None or len(places.splitlines()) != 2:
        return TRIGGERS
    top, hook = places.splitlines()
    found = set(git_triggers(listing))
    if os.path.lexists(os.path.join(cwd, hook)):
        found.add("hook")
    if os.path.lexists(os.path.join(top, ".gitmodules")):
        found.add("submodule")
    return frozenset(found)


def _git_outputs(cwd: str, *commands: tuple[str, ...]) -> list[str | None] | None:
    """The stdout of each git command, run side by side in `cwd` (None for one that failed
    or took over 5 s); None when git could not be started."""
    procs: list[subprocess.Popen[str]] = []
    try:
        for args in commands:
            procs.append(
                subprocess.Popen(
                    ["git", *args],
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
            )
    except (OSError, ValueError):
        for proc in procs:
            proc.kill()
            proc.communicate()
        return None
    outputs: list[str | None] = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            out = ""
        outputs.append(out if proc.returncode == 0 else None)
    return outputs
