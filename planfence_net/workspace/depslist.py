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
    """The list is missing or a line of it cannot be read; the message names the line."""


@dataclass(frozen=True, slots=True)
class Dependency:
    """One declared input: `path` as written, the hash `algorithm` (`sha256`, `git` or
    `any`), the lowercase hex `prefix`, and the `owner` named on the line (or None)."""

    path: str
    algorithm: str
    prefix: str
    owner: str | None
    line: int


def parse_dependencies(text: str) -> list[Dependency]:
    """Every dependency of the first "Record dependencies" list in `text`.

    Raises DependencyListError when there is no such list, it is empty, or one of its items
    does not read as `PATH @ [sha256:|git:]HEX [(owner: NAME)]` with at least 7 hex digits.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _START.match(line)), None)
    if start is None:
        raise DependencyListError("no 'Record dependencies' list found")
    found: list[Dependency] = []
    for number, line in enumerate(lines[start + 1 :], start=start + 2):
        if not line.strip():
            if found:
                break
            continue
        if _HEADING.match(line) or not _LOOSE_ITEM.match(line):
            break
        match = _ITEM.match(line)
        if match is None or len(match["hash"]) < MIN_PREFIX:
            raise DependencyListError(
                f"line {number}: expected '- PATH @ sha256:HEX (owner: NAME)' with at least "
                f"{MIN_PREFIX} hex digits, got {line.strip()!r}"
            )
        algo = {"sha256": "sha256", "git": "git", "blob": "git"}.get(match["algo"] or "", "any")
        owner = (match["owner"] or "").strip() or None
        found.append(Dependency(match["path"].strip(), algo, match["hash"].lower(), owner, number))
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
