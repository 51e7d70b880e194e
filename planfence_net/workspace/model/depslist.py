"""Dependency lists that people already write in AGENTS.md or CLAUDE.md (pure).

Teams that fence plans by hand keep a "Record dependencies" list in a plan section, one
line per input:

    ## Record dependencies
    - schema.sql @ sha256:a3f9c1d (owner: db-migration-agent)
    - src/api/types.ts @ git:5b1e0c2
    - package-lock.json @ 9f2c44e1

The list starts after a heading or a line that says "Record dependencies" and runs until the
next heading or the first line that is neither a list item nor blank. A hash is a hex prefix
(at least 7 digits) of the file's SHA-256 (`sha256:`), of its git blob id (`git:` or
`blob:`), or, with no prefix, of either. `planfence workspace trust --from FILE` reads it
with `parse_dependencies` and compares each file's content with `content_matches`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

MIN_PREFIX = 7
_START = re.compile(r"^\s*(?:#{1,6}\s*)?\**\s*record dependencies\s*\**\s*:?\s*$", re.IGNORECASE)
_HEADING = re.compile(r"^\s*#{1,6}\s")
_ITEM = re.compile(
    r"^\s*[-*+]\s+`?(?P<path>[^`@]+?)`?\s*@\s*`?(?:(?P<algo>sha256|git|blob):)?"
    r"(?P<hash>[0-9a-fA-F]+)`?\s*(?:\((?:owner:\s*)?(?P<owner>[^)]*)\))?\s*$"
)
_LOOSE_ITEM = re.compile(r"^\s*[-*+]\s+")


class DependencyListError(ValueError):
    """The list is missing or lines of it cannot be read; `errors` holds one message per
    unreadable line (each naming its line), the message joins them."""

    def __init__(self, *errors: str) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


@dataclass(frozen=True, slots=True)
class Dependency:
    """One declared input: `path` as written, the hash `algorithm` (`sha256`, `git` or
    `any`), the lowercase hex `prefix`, and the `owner` named on the line (or None)."""

    path: str
    algorithm: str
    prefix: str
    owner: str | None
    line: int


def list_starts(text: str) -> list[int]:
    """The 0-based indexes of the lines that start a "Record dependencies" list."""
    return [i for i, line in enumerate(text.splitlines()) if _START.match(line)]


def parse_dependencies(text: str, start: int | None = None) -> list[Dependency]:
    """Every dependency of the "Record dependencies" list starting at line index `start`
    (default: the first list in `text`); line numbers count from 1 in `text`.

    Raises DependencyListError when there is no such list, it is empty, or items of it do
    not read as `PATH @ [sha256:|git:]HEX [(owner: NAME)]` with at least 7 hex digits (one
    error per such line).
    """
    lines = text.splitlines()
    if start is None:
        start = next(iter(list_starts(text)), None)
    if start is None or not 0 <= start < len(lines) or not _START.match(lines[start]):
        raise DependencyListError("no 'Record dependencies' list found")
    found: list[Dependency] = []
    bad: list[str] = []
    for number, line in enumerate(lines[start + 1 :], start=start + 2):
        if not line.strip():
            if found or bad:
                break
            continue
        if _HEADING.match(line) or not _LOOSE_ITEM.match(line):
            break
        match = _ITEM.match(line)
        if match is None or len(match["hash"]) < MIN_PREFIX:
            bad.append(
                f"line {number}: expected '- PATH @ sha256:HEX (owner: NAME)' with at least "
                f"{MIN_PREFIX} hex digits, got {line.strip()!r}"
            )
            continue
        algo = {"sha256": "sha256", "git": "git", "blob": "git"}.get(match["algo"] or "", "any")
        owner = (match["owner"] or "").strip() or None
        found.append(Dependency(match["path"].strip(), algo, match["hash"].lower(), owner, number))
    if bad:
        raise DependencyListError(*bad)
    if not found:
        raise DependencyListError(f"the 'Record dependencies' list at line {start + 1} is empty")
    return found


def git_blob_id(content: bytes) -> str:
    """The id git gives `content` as a blob (SHA-1 of `blob LEN\\0` + content), in hex."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content, usedforsecurity=False).hexdigest()


def content_matches(dependency: Dependency, content: bytes) -> bool:
    """True when `content` has the hash prefix the dependency was written with."""
    digests = {"sha256": [hashlib.sha256(content).hexdigest()], "git": [git_blob_id(content)]}
    candidates = digests.get(dependency.algorithm, digests["sha256"] + digests["git"])
    return any(digest.startswith(dependency.prefix) for digest in candidates)
