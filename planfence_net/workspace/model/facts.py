"""The keys of a workspace owner and the roles a plan gives them (pure, no I/O).

A workspace agent NAME owns every key `NAME:*`:

    NAME:repo             repository identity (git common dir, or the folder without git)
    NAME:branch           the checked-out branch (None when detached or without git)
    NAME:head             the HEAD commit (None without git)
    NAME:status           tracked files git reports as changed, with size and mtime: the cheap
                          signal that something unrelated changed (never a full hash)
    NAME:file/REL         one file: content hash (git blob id, or BLAKE2b-256 without git),
                          size and mode, or {"missing": true}
    NAME:evidence/DIGEST  a command, its exit code and, as parents, the file records it ran on

The first five are observed by the owner, never written by clients. A trusted state is a plan
record (`plan/PLAN`) whose parents are the current records of its declared keys and whose body
maps each key to its roles.
"""

from __future__ import annotations

import hashlib
import re

REPO, BRANCH, HEAD, STATUS = "repo", "branch", "head", "status"
OBSERVED = (REPO, BRANCH, HEAD, STATUS)
FILE_PREFIX, EVIDENCE_PREFIX = "file/", "evidence/"

# Roles, by the drift class a change of a key with that role implies.
CRITICAL_ROLES = ("repo", "branch", "head", "target")
RELEVANT_ROLES = ("read", "lockfile", "evidence", "input")
INFORMATIONAL_ROLES = ("status",)
ROLES = CRITICAL_ROLES + RELEVANT_ROLES + INFORMATIONAL_ROLES

LOCKFILES = (
    "package-lock.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "npm-shrinkwrap.json",
    "poetry.lock",
    "Pipfile.lock",
    "uv.lock",
    "requirements.txt",
    "Cargo.lock",
    "go.sum",
    "Gemfile.lock",
    "composer.lock",
    "pyproject.toml",
    "package.json",
    "Cargo.toml",
    "go.mod",
)


# `workspace trust` options that lower a plan's fence: declaring less than the trusted state
# replaced (--narrow), starting the replan count over (--fresh), switching the plan that
# sessions without their own plan are checked against (--make-current). They are a person's
# decision: the hook blocks every shell command that carries one (`person_flag`).
PERSON_FLAGS = ("--narrow", "--fresh", "--make-current")
_SHELL_QUOTING = str.maketrans("", "", "\"'\\")


def person_flag(command: str) -> str | None:
    """The first of PERSON_FLAGS that the shell command `command` carries, else None.

    Quotes and backslashes are ignored (`--fr""esh` is `--fresh` to a shell), and a flag
    counts anywhere in the text, also as `--fresh=yes`: an agent has no reason to write one.
    """
    text = command.translate(_SHELL_QUOTING)
    for flag in PERSON_FLAGS:
        if re.search(re.escape(flag) + r"(?![A-Za-z0-9_-])", text):
            return flag
    return None


# `planfence workspace refresh` re-bases a plan on the current branch and HEAD: a person's
# decision after a switch, never the agent's (the hook blocks every shell command naming it).
_PERSON_COMMAND = re.compile(r"\bworkspace\s+(refresh|release)\b")


# `planfence hook claude|codex|git` is what the agent's client (or git) runs with the
# client's own payload; `hook install|uninstall` changes which hooks run. From the agent's
# shell the first forges payloads (a Read it did not make, another session's SessionEnd that
# ends that session's intents) and the second lowers the fence: both are blocked.
_HOOK_COMMAND = re.compile(
    r"\bplanfence(?:_net)?\s+hook\s+(claude|codex|git|install|uninstall)(?![A-Za-z0-9_-])"
)


def person_command(command: str) -> str | None:
    """`workspace refresh|release` or `hook claude|codex|git|install|uninstall` when the shell
    command `command` runs it through `planfence` (or `python -m planfence_net`; quotes and
    backslashes ignored, as in `person_flag`), else None."""
    text = command.translate(_SHELL_QUOTING)
    person = _PERSON_COMMAND.search(text)
    if person is not None:
        return f"workspace {person.group(1)}"
    hook = _HOOK_COMMAND.search(text)
    if hook is not None:
        return f"hook {hook.group(1)}"
    return None


def plan_key(plan: str) -> str:
    """The key of a trusted-state plan record."""
    return f"plan/{plan}"


def fact_key(agent: str, fact: str) -> str:
    """`agent:fact`, e.g. `ws:branch`, `ws:file/src/auth.ts`."""
    return f"{agent}:{fact}"


def file_key(agent: str, rel: str) -> str:
    return fact_key(agent, FILE_PREFIX + rel)


def evidence_key(agent: str, command: str) -> str:
    """One key per command text: re-running the same command writes a new version."""
    digest = hashlib.blake2b(command.encode(), digest_size=6).hexdigest()
    return fact_key(agent, EVIDENCE_PREFIX + digest)


def split_key(key: str) -> tuple[str, str] | None:
    """(agent, fact) of a workspace key, or None for a key that is not one."""
    agent, sep, fact = key.partition(":")
    if not sep or not agent or not fact:
        return None
    return agent, fact


def file_of(key: str) -> str | None:
    """The relative path of a `NAME:file/REL` key, else None."""
    parts = split_key(key)
    if parts is None or not parts[1].startswith(FILE_PREFIX):
        return None
    return parts[1][len(FILE_PREFIX) :]


def is_observed(fact: str) -> bool:
    """True for facts only the owner writes (by observing the worktree)."""
    return fact in OBSERVED or fact.startswith(FILE_PREFIX)


def is_lockfile(rel: str) -> bool:
    return rel.rsplit("/", 1)[-1] in LOCKFILES
