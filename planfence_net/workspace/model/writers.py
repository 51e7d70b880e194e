"""Who changed what (pure): the writer of each drifted file a block names, and a bounded
diff since the version the plan read.

    Drifted       one drifted key of a blocking check: the body the plan read, the body now
    Write         a recorded write of a fenced session (the hook's PostToolUse): the content
                  hashes it left, the session, its subagent, client and worktree, and when
    Commit        a commit, for a HEAD change: its id, author, time and subject
    Writer        what a block says about one drifted file or HEAD (`to_json`: the `writers`
                  rows of the owners' logs, `plans.checklog`)

A session is named only when its recorded write left exactly the content the file holds
now (`file_writer` compares content hashes); anything else was written "outside any fenced
session" (a person, a formatter, a build, a shell command): the records never guess a cause.
A diff is at most DIFF_LINES lines; content is kept only for files of at most CONTENT_CAP
bytes (`place.history`), else the block says the diff was not kept, and why.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CONTENT_CAP = 64 * 1024  # bytes: content is kept (and diffed) for files up to this size
DIFF_LINES = 20  # lines of a diff a block shows, at most
MISSING = "missing"  # the hash a recorded deletion leaves
OUTSIDE = "outside any fenced session"
NOT_KEPT = "diff not kept"


@dataclass(frozen=True, slots=True)
class Drifted:
    """One drifted key a blocking check names: its body as the plan read it, and now."""

    key: str
    old: Any
    new: Any


@dataclass(frozen=True, slots=True)
class Write:
    """A recorded write: the hashes of the content it left (both of the owner's forms, or
    MISSING), who made it (session, subagent and its type, client, worktree), and when."""

    hashes: tuple[str, ...]
    session: str
    agent: str | None
    agent_type: str | None
    client: str
    worktree: str
    at: float


@dataclass(frozen=True, slots=True)
class Commit:
    """A commit that HEAD moved to: its id, author (name <email>), commit time, subject."""

    sha: str
    author: str
    at: float
    subject: str


@dataclass(frozen=True, slots=True)
class Writer:
    """What a block says about one drifted file (or HEAD): `writer` is the sentence; the
    session, agent, client and worktree of a recorded write, or the commit of a HEAD change
    (else None); `at` when; `diff` a bounded diff, or None with `note` saying why."""

    path: str
    writer: str
    session: str | None = None
    agent: str | None = None
    agent_type: str | None = None
    client: str | None = None
    worktree: str | None = None
    commit: str | None = None
    at: float | None = None
    diff: str | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        """The row of the owners' logs and `--json` (names documented in `plans.checklog`)."""
        return {
            "path": self.path,
            "writer": self.writer,
            "session": self.session,
            "agent": self.agent,
            "agent_type": self.agent_type,
            "client": self.client,
            "worktree": self.worktree,
            "commit": self.commit,
            "at": self.at,
            "diff": self.diff,
            "note": self.note,
        }

    def lines(self) -> list[str]:
        """The lines a block shows: the writer, then the diff indented (or why none)."""
        when = f", {stamp(self.at)}" if self.at is not None else ""
        head = f"- {self.path}: {self.writer}{when}"
        if self.diff is None:
            return [f"{head}; {self.note or NOT_KEPT}"]
        if not self.diff:
            return [f"{head}; {self.note or 'no line changed'}"]
        since = (
            "files changed since the plan's HEAD"
            if self.commit
            else "diff since the version the plan read"
        )
        return [f"{head}; {since}:"] + [f"    {line}" for line in self.diff.splitlines()]


def stamp(at: float) -> str:
    """`at` (seconds since the epoch) as people read it, in UTC."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def hash_of(body: Any) -> str | None:
    """The content hash a file body names (MISSING for no file), or None (refused)."""
    if not isinstance(body, Mapping):
        return None
    if body.get("missing"):
        return MISSING
    found = body.get("hash")
    return found if isinstance(found, str) else None


def size_of(body: Any) -> int:
    """The size a file body names (0 for no file or none said)."""
    size = body.get("size") if isinstance(body, Mapping) else None
    return size if isinstance(size, int) and not isinstance(size, bool) else 0


def writer_of(current: Any, writes: Iterable[Write]) -> Write | None:
    """The latest of `writes` that left exactly the content `current` (a file body) names,
    else None: only a recorded write that produced this very version is ever named."""
    now = hash_of(current)
    if now is None:
        return None
    found = [w for w in writes if now in w.hashes]
    return max(found, key=lambda w: w.at) if found else None


def file_writer(
    path: str,
    drifted: Drifted,
    writes: Iterable[Write],
    modified: float | None,
    contents: tuple[bytes | None, bytes | None] | None,
) -> Writer:
    """What a block says about the drifted file `path`: the session whose recorded write
    (among `writes`) left its current content, else OUTSIDE with the file's modification
    time (`modified`); and the diff of `contents` (the content the plan read, the content
    now, None for no file), or None when either was not kept (`diff_note` says why)."""
    diff, note = (None, diff_note(drifted)) if contents is None else bounded_diff(*contents)
    write = writer_of(drifted.new, writes)
    if write is None:
        return Writer(path, OUTSIDE, at=modified, diff=diff, note=note)
    who = f"session {write.session}"
    if write.agent:
        who += f" (subagent {write.agent}" + (f", {write.agent_type})" if write.agent_type else ")")
    return Writer(
        path,
        f"written by {who} of {write.client} in {write.worktree}",
        session=write.session,
        agent=write.agent,
        agent_type=write.agent_type,
        client=write.client,
        worktree=write.worktree,
        at=write.at,
        diff=diff,
        note=note,
    )


def head_writer(commit: Commit | None, changed: Sequence[str], head: str) -> Writer:
    """What a block says about a HEAD change to `head`: the commit and its author (None:
    git could not say), and the paths it changed (`changed`, `git diff --name-status`
    lines), at most DIFF_LINES of them."""
    shown = _bounded(list(changed))
    if commit is None:
        return Writer("HEAD", f"now at {head[:7]}", commit=head or None, note="git cannot say more")
    return Writer(
        "HEAD",
        f"commit {commit.sha[:7]} by {commit.author} ({commit.subject!r})",
        commit=commit.sha,
        at=commit.at,
        diff="\n".join(shown),
        note="" if shown else "no file changed",
    )


def diff_note(drifted: Drifted) -> str:
    """Why no diff is shown for `drifted` (one of its versions not kept)."""
    for body, which in ((drifted.old, "read"), (drifted.new, "current")):
        if size_of(body) > CONTENT_CAP:
            return (
                f"{NOT_KEPT} (the {which} version is {size_of(body)} bytes; content is kept "
                f"for files of at most {CONTENT_CAP // 1024} KiB)"
            )
    return f"{NOT_KEPT} (the content the plan read was not kept)"


def bounded_diff(old: bytes | None, new: bytes | None) -> tuple[str | None, str]:
    """A unified diff of `old` to `new` (None: no file), one line of context, without file
    headers, at most DIFF_LINES lines (a last line says how many were left out); and a note
    ("" or why there is no diff: binary content)."""
    import difflib  # deferred: only a block shows a diff

    try:
        before = (old or b"").decode().splitlines(keepends=True)
        after = (new or b"").decode().splitlines(keepends=True)
    except UnicodeDecodeError:
        return None, "binary content: no diff shown"
    if b"\0" in (old or b"") + (new or b""):
        return None, "binary content: no diff shown"
    diff = difflib.unified_diff(before, after, n=1, lineterm="")
    lines = [line.rstrip("\r\n") for line in list(diff)[2:]]  # a final newline counts too
    return "\n".join(_bounded(lines)), ""


def _bounded(lines: list[str]) -> list[str]:
    if len(lines) <= DIFF_LINES:
        return lines
    left = len(lines) - (DIFF_LINES - 1)
    return lines[: DIFF_LINES - 1] + [f"... {left} more lines"]


def block_lines(writers: Sequence[Writer], more: int = 0) -> list[str]:
    """The part of a block message that says who changed what, or [] for no writers;
    `more`: how many other drifted files it does not name."""
    if not writers:
        return []
    rest = [f"- and {more} more changed file{'s' if more > 1 else ''}"] if more > 0 else []
    return ["Who changed what:"] + [line for w in writers for line in w.lines()] + rest
