"""The "Who changed what" part of a block message (`model.writers.block_lines`), for tests
that check the rest of the message exactly.

stamp_free       a text with its UTC time stamps (a write's, a file's) replaced by T
split_writers    (the message without that part, that part's lines without its heading)
without_writers  the message without that part
no_writers       a hook answer (exit code, stderr) without that part
"""

from __future__ import annotations

import re

HEADING = "Who changed what:"
_STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


def stamp_free(text: str) -> str:
    return _STAMP.sub("T", text)


def split_writers(reason: str) -> tuple[str, list[str]]:
    """The block message `reason` without its writer lines, and those lines (each "- ..."
    writer and its indented diff); ([], reason) when it has none."""
    lines = reason.split("\n")
    if HEADING not in lines:
        return reason, []
    at = lines.index(HEADING)
    end = at + 1
    while end < len(lines) and lines[end].startswith(("- ", "    ")):
        end += 1
    return "\n".join(lines[:at] + lines[end:]), lines[at + 1 : end]


def without_writers(reason: str) -> str:
    return split_writers(reason)[0]


def no_writers(answer: tuple[int, str]) -> tuple[int, str]:
    """A hook's (exit code, stderr) with the writer lines taken out of stderr."""
    return answer[0], without_writers(answer[1])
