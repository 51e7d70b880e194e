"""`planfence doctor`: one health check of the fence for a folder, each line a check with its
fix, from the probes `hook status` runs (status.py, gitgate.py, codextrust.py):

- owner: a workspace owner serves the folder's worktree and answers a ping (without one,
  every agent write there is blocked, and every commit refused);
- hooks: for each client with a PlanFence hook in its config (Claude Code, Codex), all of
  ours are there, fail closed, and the command starts and answers (or, in the http form, the
  owner's door does); none installed for any client is a failure: the agents' calls there
  are not checked at all;
- codex trust: Codex runs a project's hooks only once the project and each handler are
  trusted: asked of the real Codex when one is at hand, else read from its config.toml;
- git gate: our pre-commit hook is installed, starts, and its owner answers.

Healthy means every check passed: anything else would block work or let it through
unchecked.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ...core.errors import ConfigError
from ..place.config import NoCluster, find_cluster, locate, workspaces
from . import gitgate
from .clients import project_root
from .codexapp import find_codex
from .codextrust import untrusted
from .status import (
    ACTIVE,
    MISSING,
    UNVERIFIED,
    claude_files,
    claude_status,
    codex_files,
    codex_status,
    ours_by_event,
    probe,
    serving,
)


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""  # the command (or step) that makes it pass; "" when it passed

    def text(self) -> str:
        line = f"{'ok  ' if self.ok else 'FAIL'}  {self.name}: {self.detail}"
        return line + (f"\n      fix: {self.fix}" if self.fix else "")


@dataclass(frozen=True, slots=True)
class Health:
    root: Path
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def to_json(self) -> dict[str, Any]:
        return {
            "project": str(self.root),
            "ok": self.ok,
            "checks": [asdict(c) for c in self.checks],
        }


def diagnose(project: Path, codex: Path | None = None) -> Health:
    """Every check of the module doc for the worktree holding `project`, in that order.
    `codex` is the Codex executable to ask (default: `codex` on PATH, if any). Never raises
    for what it finds: a problem is a failed check."""
    root = project_root(project)
    checks = [owner_check(root), *hook_checks(root, codex), gate_check(root)]
    return Health(root, tuple(checks))


def owner_check(root: Path) -> Check:
    unserved = serving(root)
    if unserved:
        return Check("owner", False, unserved[0], unserved[1])
    try:
        cdir = find_cluster(None, root)
        found = locate(workspaces(cdir), root / "x")
    except (NoCluster, ConfigError):  # it answered a moment ago: say less, not wrong
        found, cdir = None, None
    who = f"{found[0]} of the cluster {cdir.root}" if found and cdir else "a workspace owner"
    return Check("owner", True, f"{who} serves {root} and answers")


def hook_checks(root: Path, codex: Path | None) -> list[Check]:
    """A check per client with a hook of ours (Codex: its trust too); one failed check when
    no client has one."""
    quoted = shlex.quote(str(root))
    claude = any(ours_by_event(claude_files(root)).values())
    codex_found = ours_by_event(codex_files(root))
    if not claude and not any(codex_found.values()):
        return [
            Check(
                "hooks",
                False,
                f"no PlanFence hook for Claude Code or Codex in {root}: the agents' tool calls "
                "there are not checked",
                f"planfence hook install claude --project {quoted} (or codex)",
            )
        ]
    checks = []
    if claude:
        s = claude_status(root)
        checks.append(Check("claude hooks", s.active, f"{s.state}: {s.detail}", s.step))
    if any(codex_found.values()):
        checks += codex_checks(root, codex, codex_found)
    return checks


def codex_checks(
    root: Path,
    codex: Path | None,
    found: dict[str, list[tuple[Path, int, int, dict[str, Any], str]]],
) -> list[Check]:
    """Codex's hooks (all there, the command starts) and its trust in them."""
    trust = f"planfence hook install codex --project {shlex.quote(str(root))} --trust"
    try:
        s = codex_status(root, find_codex(codex))
    except ConfigError as exc:  # the Codex at hand does not start or answer
        return [Check("codex trust", False, f"cannot ask Codex: {exc}", "pass --codex PATH")]
    if s.state == MISSING:
        return [Check("codex hooks", False, f"{s.state}: {s.detail}", s.step)]
    handler = found["PreToolUse"][0][3]
    problem = probe(handler, root)
    hooks = Check(
        "codex hooks",
        not problem,
        problem or "PreToolUse and PostToolUse are installed; the command runs",
        "" if not problem else f"planfence hook install codex --project {shlex.quote(str(root))}",
    )
    if s.state == UNVERIFIED:  # no Codex to ask: what its config.toml records
        why = untrusted(root)
        detail = why or "config.toml records the trust in the project and in each of our handlers"
        return [
            hooks,
            Check("codex trust", not why, detail + " (no codex to ask)", trust if why else ""),
        ]
    if s.state == ACTIVE:
        return [hooks, Check("codex trust", True, s.detail)]
    if s.state in ("untrusted", "disabled"):
        return [hooks, Check("codex trust", False, f"{s.state}: {s.detail}", s.step)]
    # trusted, but not usable (no owner serves the folder): the hooks' state says why
    trusted = Check("codex trust", True, "Codex lists our hooks enabled and trusted")
    return [Check("codex hooks", False, f"{s.state}: {s.detail}", s.step), trusted]


def gate_check(root: Path) -> Check:
    try:
        gate = gitgate.status(root)
    except ConfigError as exc:
        return Check("git gate", False, str(exc), "")
    detail, _, fix = gate.detail.rpartition("; ")
    if gate.active:
        return Check("git gate", True, gate.detail)
    if fix == "planfence hook install git":
        fix += f" --project {shlex.quote(str(root))}"
    return Check("git gate", False, detail or gate.detail, fix if detail else "")
