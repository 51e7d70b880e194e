"""Commits inside a plan (pure): whether a move of HEAD only records what a plan holds.

A commit of the session's own edits (by the person, or by the agent through its shell), or
of files at the versions the plan read, changes nothing the plan reasoned about: HEAD moves
inside the plan, as the session's own edits do. A commit that brings in other content (another
agent's change, a merge, a pull) is drift, and the paths it brings in are named.

`foreign` is the rule; `place.observe.commit_changes` feeds it the tree difference between
the HEAD the plan holds and the new one, and `plans.advance.wait_commits` moves the plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def foreign(changed: Mapping[str, str | None], held: Mapping[str, Any]) -> list[str]:
    """The paths of `changed` whose content in the new HEAD is not what the plan holds, sorted.

    `changed` maps each path whose content differs between the two commits to its hash in the
    new one (as the observer writes it, "git:<blob id>"), or None where the new commit has no
    such file; `held` maps a path to the body of the file record the plan holds for it. A
    path the plan does not hold, holds at another content, or holds as present while the
    commit deletes it (or the reverse) is foreign. An empty list: the new HEAD records only
    what the plan holds.
    """
    out = []
    for rel, new in sorted(changed.items()):
        body = held.get(rel)
        if not isinstance(body, dict):
            out.append(rel)
        elif new is None:
            if not (body.get("missing") is True and "kind" not in body):
                out.append(rel)
        elif body.get("hash") != new:
            out.append(rel)
    return out


def brings_in_line(paths: list[str], agent: str = "") -> str:
    """The drift line naming what a new HEAD brings in that the plan does not hold."""
    where = f" ({agent})" if agent else ""
    return f"- The new HEAD{where} brings in content this plan does not hold: {', '.join(paths)}"
