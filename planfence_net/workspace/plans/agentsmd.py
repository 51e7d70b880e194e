"""`planfence workspace trust PLAN --from AGENTS.md`: a plan's inputs from the "Record
dependencies" list people already keep in AGENTS.md or CLAUDE.md.

A file may hold several plan sections, each with its own list:
    ## Plan: add-audit-column
    ### Record dependencies
    - schema.sql @ sha256:a3f9c1d (owner: db-migration-agent)

A list's section is the nearest heading above it (above its own heading, when the list
starts with one); its name is that heading's text without a leading "Plan" and
punctuation, compared as a slug (lowercase, runs of other characters as `-`). Which list is
read: the section named by `--section`, else the one named like PLAN, else the only list in
the file. Paths are relative to the folder of the file (or `NAME:PATH`, as for `--read`).

`declared_reads` reads and checks everything before anything is written: a listed file that
is missing, outside every served worktree, listed twice with different hashes, or whose
content no longer has the listed hash prefix is a `ListProblems` error, one line per file.
For the files that match, it returns the hashes the workspace owner must observe
(`expect`): a file changed between this comparison and the trust is refused by the trust.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.errors import ConfigError
from ..model.depslist import (
    Dependency,
    DependencyListError,
    content_matches,
    git_blob_id,
    list_starts,
    parse_dependencies,
)
from ..model.facts import file_of
from ..place.config import file_key_for
from ..place.observe import MAX_FILE_BYTES

_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_PLAN_WORD = re.compile(r"^plan\b\s*[:\-\u2013\u2014]?\s*", re.IGNORECASE)
DIGITS = {"sha256": 64, "git": 40, "any": 64}  # hex digits of a full hash of that kind


class ListProblems(ConfigError):
    """What is wrong with a dependency list: one line per file or line (`problems`)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(problems[0] if len(problems) == 1 else f"{len(problems)} problems")
        self.problems = problems


@dataclass(frozen=True, slots=True)
class Section:
    """A "Record dependencies" list: the 0-based index of its first line and the name of
    its plan section ("" when no heading is above it)."""

    start: int
    name: str

    @property
    def shown(self) -> str:
        return f"line {self.start + 1} ({self.name or 'no section heading'})"


@dataclass(frozen=True, slots=True)
class FromList:
    """The checked list: the file keys to declare as reads (in list order), the hashes the
    owner must observe for each, the section read and who the list names as owners."""

    source: Path
    section: str
    keys: tuple[str, ...]
    expect: dict[str, tuple[str, ...]]
    owners: dict[str, str]

    def names(self) -> list[str]:
        """The listed files as `NAME:PATH`, the way `--read` names a file of a worktree."""
        return [f"{key.partition(':')[0]}:{file_of(key)}" for key in self.keys]

    def record(self) -> dict[str, Any]:
        """What the plan record keeps of it (`from`): the file, the section, the owners."""
        return {"file": str(self.source), "section": self.section, "owners": self.owners}


def slug(text: str) -> str:
    """`text` lowercased, with every run of characters other than letters and digits as one
    `-` and none at either end: "Plan: Add the `audit` column" -> "plan-add-the-audit-column"."""
    return re.sub(r"[^0-9a-z]+", "-", text.lower()).strip("-")


def sections(text: str) -> list[Section]:
    """Every "Record dependencies" list of `text`, in order, with its section's name."""
    lines = text.splitlines()
    found = []
    for start in list_starts(text):
        own = _HEADING.match(lines[start])
        level = len(own.group(1)) if own else 7
        name = ""
        for line in reversed(lines[:start]):
            heading = _HEADING.match(line)
            if heading and len(heading.group(1)) < level:
                name = _PLAN_WORD.sub("", heading.group(2).replace("`", "").replace("*", ""))
                break
        found.append(Section(start, name.strip()))
    return found


def choose(source: str, found: list[Section], plan: str, wanted: str | None) -> Section:
    """The list to read (see module doc); raises ConfigError saying how to pick one."""
    if not found:
        raise ConfigError(f"{source}: no 'Record dependencies' list found")
    if wanted is not None:
        named = [s for s in found if slug(s.name) == slug(wanted)]
        if not named:
            raise ConfigError(
                f"{source}: no 'Record dependencies' list in a section named {wanted!r}; "
                f"lists: {', '.join(s.shown for s in found)}"
            )
    else:
        named = [s for s in found if s.name and slug(s.name) == slug(plan)]
        if not named and len(found) == 1:
            return found[0]
        if not named:
            raise ConfigError(
                f"{source} has {len(found)} 'Record dependencies' lists: "
                f"{', '.join(s.shown for s in found)}; none is in a section named {plan!r}: "
                f"pick one with --section NAME"
            )
    if len(named) > 1:
        raise ConfigError(
            f"{source}: {len(named)} lists are in sections named {named[0].name!r} "
            f"({', '.join(s.shown for s in named)}); rename one"
        )
    return named[0]


def declared_reads(
    path: Path,
    plan: str,
    section: str | None,
    spaces: dict[str, Path],
    cwd: Path,
) -> FromList:
    """Read and check the list of `plan` in the file at `path` (relative to `cwd`).

    Raises ConfigError when the file cannot be read or no list can be chosen, and
    ListProblems (one line each) for malformed lines and for files that are missing,
    outside every served worktree in `spaces`, listed twice with different hashes, or that
    no longer have the listed hash prefix.
    """
    source = path if path.is_absolute() else cwd / path
    shown = str(path)
    text = _read_text(source, shown)
    chosen = choose(shown, sections(text), plan, section)
    try:
        listed = parse_dependencies(text, chosen.start)
    except DependencyListError as exc:
        raise ListProblems([f"{shown}: {e}" for e in exc.errors]) from None
    problems: list[str] = []
    keys: dict[str, Dependency] = {}
    expect: dict[str, tuple[str, ...]] = {}
    for dep in listed:
        where = f"{shown}: line {dep.line}: {dep.path}"
        if len(dep.prefix) > DIGITS[dep.algorithm]:
            kind = "sha256 or git blob id" if dep.algorithm == "any" else dep.algorithm
            problems.append(
                f"{where}: {len(dep.prefix)} hex digits, more than a {kind} has "
                f"({DIGITS[dep.algorithm]})"
            )
            continue
        try:
            key = file_key_for(spaces, dep.path, source.parent)
        except ConfigError as exc:
            problems.append(f"{where}: {exc}")
            continue
        if key in keys:
            if keys[key].prefix != dep.prefix or keys[key].algorithm != dep.algorithm:
                problems.append(f"{where}: listed again with another hash (line {keys[key].line})")
            continue
        keys[key] = dep
        agent, _, fact = key.partition(":")
        checked = _checked_content(dep, spaces[agent] / fact.removeprefix("file/"))
        if isinstance(checked, str):
            problems.append(f"{where}: {checked}")
        else:
            expect[key] = checked
    if problems:
        raise ListProblems(problems)
    owners = {k: d.owner for k, d in keys.items() if d.owner}
    return FromList(source, chosen.name, tuple(keys), expect, owners)


def _read_text(source: Path, shown: str) -> str:
    """The text of the file a list is read from; raises ConfigError when it cannot be read."""
    try:
        return source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"cannot read {shown}: {reason}") from None


def _checked_content(dep: Dependency, path: Path) -> str | tuple[str, ...]:
    """The file's content hashes to expect (git blob id, blake2b) when it still matches the
    listed hash prefix, else the problem with it (missing, unreadable, changed)."""
    content, why = _content(path)
    if content is None:
        return why
    if not content_matches(dep, content):
        return (
            f"no longer matches {_written(dep)} (now sha256:"
            f"{hashlib.sha256(content).hexdigest()[:12]}, git:{git_blob_id(content)[:12]})"
        )
    return (
        f"git:{git_blob_id(content)}",
        f"blake2b:{hashlib.blake2b(content, digest_size=32).hexdigest()}",
    )


def _content(path: Path) -> tuple[bytes | None, str]:
    """The file's bytes, or None and why it cannot be compared."""
    if os.path.islink(path) or not path.exists():
        return None, "does not exist" if not os.path.lexists(path) else "is a symlink"
    if not path.is_file():
        return None, "is not a regular file"
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:  # the owner would refuse it too: never read it whole
            return None, f"{size} bytes, over the cap of {MAX_FILE_BYTES}"
        return path.read_bytes(), ""
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc})"


def _written(dep: Dependency) -> str:
    """The hash as the list wrote it (kind and prefix)."""
    return dep.prefix if dep.algorithm == "any" else f"{dep.algorithm}:{dep.prefix}"
