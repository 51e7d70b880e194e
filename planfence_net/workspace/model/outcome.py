"""What a file-changing call makes of its target (pure): the content a file holds after the
call, so a later change to it is taken for the call's own only if it is that content
(`place.inflight`), never merely because it came soon after the call was let through.

    Write         `content`
    Edit          `old_string` replaced by `new_string` in the content before (once, where it
                  occurs exactly once; every occurrence with `replace_all`); an empty
                  `old_string` on a missing file creates it with `new_string`
    MultiEdit     its `edits`, one after another, each as an Edit
    apply_patch   an added file: its `+` lines; a deleted file: no file (ABSENT)

Anything else (NotebookEdit, a patch's updated or moved file, an edit whose text is not where
the call says) cannot be said: None, and no change to the file is taken for the call's own.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

ABSENT = "absent"  # the digest of "no file": a deleted target
_PATCH_FILE = re.compile(r"^\*\*\* (Add File|Delete File|Update File|Move to): (.+?)\s*$")


def digest(content: bytes | None) -> str:
    """The digest a target's content is compared by (ABSENT for no file)."""
    return ABSENT if content is None else hashlib.sha256(content).hexdigest()


def made(tool: str, tool_input: Mapping[str, Any], name: str, before: bytes | None) -> str | None:
    """The digest of what the call `tool` with `tool_input` leaves in its target `name` (as
    the call names it), given the content `before` (None: no such file), or None when it
    cannot be said."""
    if tool == "Write":
        content = tool_input.get("content")
        return digest(content.encode()) if isinstance(content, str) else None
    if tool in ("Edit", "MultiEdit"):
        edits = [tool_input] if tool == "Edit" else tool_input.get("edits")
        if not isinstance(edits, list):
            return None
        try:
            text = None if before is None else before.decode()
        except UnicodeDecodeError:
            return None
        for edit in edits:
            text = _edited(text, edit)
            if text is None:
                return None
        return digest(text.encode()) if text is not None else None
    if tool == "apply_patch":
        patch = tool_input.get("command")
        return _patched(patch, name) if isinstance(patch, str) else None
    return None


def _edited(text: str | None, edit: Any) -> str | None:
    """`text` after one edit ({old_string, new_string, replace_all}), or None."""
    if not isinstance(edit, Mapping):
        return None
    old, new = edit.get("old_string"), edit.get("new_string")
    if not isinstance(old, str) or not isinstance(new, str):
        return None
    if text is None:
        return new if old == "" else None
    if old == "" or old not in text:
        return None
    if edit.get("replace_all") is True:
        return text.replace(old, new)
    return text.replace(old, new, 1) if text.count(old) == 1 else None


def _patched(patch: str, name: str) -> str | None:
    """The digest of what the patch leaves in `name`: an added file's `+` lines, no file for
    a deleted one, else None."""
    lines = patch.splitlines()
    for at, line in enumerate(lines):
        found = _PATCH_FILE.match(line)
        if found is None or found.group(2) != name:
            continue
        kind = found.group(1)
        if kind == "Delete File":
            return ABSENT
        if kind != "Add File":
            return None
        body = []
        for follow in lines[at + 1 :]:
            if not follow.startswith("+"):
                break
            body.append(follow[1:] + "\n")
        return digest("".join(body).encode())
    return None
