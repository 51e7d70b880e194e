"""The recovery policy: what a model does when PlanFence blocks a write, written into the
project's instructions (`planfence hook install AGENT --recovery-policy`).

Claude Code reads CLAUDE.md, Codex reads AGENTS.md, at the project root. `add_policy`
appends our block (between two HTML comment markers) to the end of that file, creating it
when missing; it never writes twice (the start marker, or a heading of the team's own
"Recovery policy", means one is there already) and never changes a byte of what the file
holds: the block is appended through the file itself (a CLAUDE.md that is a symlink to
AGENTS.md stays one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ...core.errors import ConfigError

START = "<!-- planfence:recovery-policy -->"
END = "<!-- /planfence:recovery-policy -->"
POLICY = f"""{START}
## Recovery policy (PlanFence)

PlanFence checks every file change against the state your plan was built from. When it
blocks a change because that state drifted:

1. Do not retry the blocked action, and do not try another tool for the same change.
2. Re-read the declared inputs the block message names.
3. Replan once, and record the new state with the `planfence workspace trust` command the
   message gives.
4. If the next block says it changed again, halt: do not replan again; report the drift to
   the user.
{END}
"""
FILES = {"claude": "CLAUDE.md", "codex": "AGENTS.md"}
_THEIRS = re.compile(r"^ {0,3}#{1,6}\s+.*\brecovery policy\b", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """The file the policy is in and what happened: "added", "present" (ours, from an
    earlier install) or "theirs" (the file has a recovery policy heading of its own, at
    `line`)."""

    path: Path
    status: str
    line: int = 0

    def text(self) -> str:
        if self.status == "added":
            return f"added the recovery policy to {self.path}"
        if self.status == "present":
            return f"{self.path} already holds the recovery policy; left as it is"
        return f"{self.path} has a recovery policy of its own (line {self.line}); left as it is"


def policy_file(agent: str, root: Path) -> Path:
    """The instructions file `agent` reads at the project root `root`."""
    try:
        return root / FILES[agent]
    except KeyError:
        raise ConfigError(f"no instructions file for {agent!r} (claude, codex)") from None


def add_policy(agent: str, root: Path) -> PolicyResult:
    """Append the recovery policy to `agent`'s instructions file at `root` unless one is
    there (see module doc). Raises ConfigError when the file cannot be read or written."""
    path = policy_file(agent, root)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}; not touching it") from None
    if START in text:
        return PolicyResult(path, "present")
    theirs = _THEIRS.search(text)
    if theirs is not None:
        return PolicyResult(path, "theirs", text.count("\n", 0, theirs.start()) + 1)
    gap = "" if not text else "\n" if text.endswith("\n") else "\n\n"
    try:
        with open(path, "a", encoding="utf-8") as f:  # appends through a symlink, keeps mode
            f.write(gap + POLICY)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    return PolicyResult(path, "added")
