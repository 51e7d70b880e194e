"""The commit gate: `planfence hook install|uninstall|status git` and the check it runs.

`hook install git` writes git's `pre-commit` hook (in `git rev-parse --git-path hooks`: the
common git dir's hooks, shared by every worktree, or `core.hooksPath`). An existing
pre-commit hook of someone else's is kept: it is moved to `pre-commit.planfence-chained`,
and ours runs it after its own check, with the same arguments; installing twice changes
nothing, and uninstalling puts it back. Ours is recognised by its marker line.

Before each commit the hook runs `planfence hook git` in the worktree being committed. It
refuses (exit 1, the reason on stderr) a commit that stages:

- a target of a live plan of this worktree (a plan with a live intent on the file here)
  whose check does not pass: the same drift summary the agents' hook prints, and the step that
  fixes it (re-read, re-trust; for a HEAD or branch that moved past the plan, the person's
  `workspace refresh`). Commits that record only what the plan holds moved HEAD inside it
  (`advance.check_commits`): they never refuse the next commit;
- a file of this repository that a plan of another worktree holds exclusively.

It fails closed: an owner that cannot be asked, a plan that cannot be checked, or a worktree
of a repository that uses PlanFence that no owner serves refuses the commit with the reason.
`git commit --no-verify` skips every pre-commit hook: a person's conscious decision, and the
message says so. A repository that does not use PlanFence is let through (`hook install git`
marks the repository as one that does, as the agents' project installs do).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ...cluster.command import executable
from ...cluster.processes import link_addresses
from ...core.errors import ConfigError, PlanfenceError
from ...net.syncclient import SyncSessions
from ..model.facts import plan_key
from ..place.config import NoCluster, find_cluster, locate, workspaces
from ..place.paths import marker, worktree_root
from ..plans.advance import check_commits
from ..plans.intentclient import collect
from ..plans.session import PREFIX
from .clients import project_root
from .status import serving

if TYPE_CHECKING:
    from ...cluster.folder import ClusterDir
    from ...core.roster import Roster
    from ..model.machine import Verdict
    from ..plans.intentclient import Collected

MARK = "# PlanFence pre-commit hook (planfence hook install|uninstall git)"
HOOK = "pre-commit"
CHAINED = "pre-commit.planfence-chained"
BYPASS = "To commit anyway, `git commit --no-verify` skips this check: that is your decision."
CHECK_TIMEOUT = 10.0


def hooks_dir(root: Path) -> Path:
    """Where git runs hooks for the worktree at `root`. Raises ConfigError outside git."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--git-path", "hooks"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ConfigError(f"{root} is not inside a git repository ({exc})") from None
    path = Path(out)
    return path if path.is_absolute() else (root / path).resolve()


def script(cluster: Path | None = None) -> str:
    """Our pre-commit hook: the check by this installation's `planfence` (absolute path),
    then the hook it replaced, if any. A `planfence` that cannot start exits non-zero, so
    the commit is refused."""
    words = [executable(), "hook", "git"]
    if cluster is not None:
        words += ["--cluster", str(cluster.resolve())]
    return (
        f"#!/bin/sh\n{MARK}\n"
        f"# Refuses a commit staging a target of a stale plan, or a file another plan holds\n"
        f"# exclusively. `git commit --no-verify` skips it: your decision.\n"
        f"{shlex.join(words)} || exit $?\n"
        f'chained="$(dirname "$0")/{CHAINED}"\n'
        f'if [ -x "$chained" ]; then exec "$chained" "$@"; fi\n'
    )


def is_ours(path: Path) -> bool:
    try:
        return MARK in path.read_text(errors="replace")
    except OSError:
        return False


def install(project: Path, cluster: Path | None = None) -> tuple[Path, Path | None]:
    """Install the gate for the repository of `project`; returns our hook's path and the
    chained hook's (None when there was none). Raises ConfigError."""
    hooks = hooks_dir(project_root(project))
    path, chained = hooks / HOOK, hooks / CHAINED
    hooks.mkdir(parents=True, exist_ok=True)
    if path.exists() and not is_ours(path):
        if chained.exists():
            raise ConfigError(
                f"{path} is not ours and {chained} exists already; move one of them first"
            )
        path.rename(chained)  # keeps its content and mode
    tmp = path.with_name(HOOK + ".planfence-tmp")
    tmp.write_text(script(cluster))
    tmp.chmod(0o755)
    tmp.replace(path)
    return path, chained if chained.exists() else None


def uninstall(project: Path) -> tuple[Path, bool]:
    """Remove our pre-commit hook (putting back the one it chained); returns the path and
    whether ours was there."""
    hooks = hooks_dir(project_root(project))
    path, chained = hooks / HOOK, hooks / CHAINED
    if not is_ours(path):
        return path, False
    path.unlink()
    if chained.exists():
        chained.rename(path)
    return path, True


@dataclass(frozen=True, slots=True)
class GateStatus:
    path: Path
    active: bool
    detail: str

    def text(self) -> str:
        return f"git: {'active' if self.active else 'not active'}: {self.detail}"

    def to_json(self) -> dict[str, object]:
        return {
            "agent": "git",
            "path": str(self.path),
            "active": self.active,
            "detail": self.detail,
        }


def status(project: Path) -> GateStatus:
    """Whether our pre-commit hook is installed, executable, names a `planfence` that
    exists, and a workspace owner serves the repository's worktree (`status.serving`:
    without one, every commit of a repository that uses PlanFence is refused)."""
    hooks = hooks_dir(project_root(project))
    path = hooks / HOOK
    if not is_ours(path):
        return GateStatus(path, False, f"no PlanFence hook in {path}; planfence hook install git")
    if not os.access(path, os.X_OK):
        return GateStatus(path, False, f"{path} is not executable; planfence hook install git")
    line = next(ln for ln in path.read_text().splitlines() if " hook git" in ln)
    exe = shlex.split(line.removesuffix(" || exit $?"))[0]
    if not os.access(exe, os.X_OK):
        return GateStatus(path, False, f"{exe} cannot start; planfence hook install git")

    words = shlex.split(line.removesuffix(" || exit $?"))
    given = Path(words[words.index("--cluster") + 1]) if "--cluster" in words[:-1] else None
    unserved = serving(project_root(project), given, "every commit there will be refused")
    if unserved:
        return GateStatus(path, False, f"{unserved[0]}; {unserved[1]}")
    chained = hooks / CHAINED
    tail = f", then {chained}" if chained.exists() else ""
    return GateStatus(path, True, f"{path} runs {exe}{tail}")


def staged(root: Path) -> list[str]:
    """The paths the commit stages (added, changed, renamed, deleted), relative to `root`."""
    out = subprocess.run(
        ["git", "diff", "--cached", "--name-only", "-z"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    return [p.decode(errors="surrogateescape") for p in out.split(b"\0") if p]


def check(cwd: Path, cluster: Path | None = None) -> tuple[int, str]:
    """The gate for a commit in the worktree holding `cwd`: (0, "") to let it through, or
    (1, the reason). Never raises."""
    try:
        return _check(cwd, cluster)
    except (PlanfenceError, OSError, ValueError, subprocess.CalledProcessError) as exc:
        return 1, f"PlanFence refused the commit: cannot check it ({exc}). {BYPASS}"


def _check(cwd: Path, cluster: Path | None) -> tuple[int, str]:
    root = worktree_root(cwd.resolve())
    if root is None:
        return 0, ""
    served = _served(root, cluster)
    if isinstance(served, tuple):
        return served
    cdir, spaces, here = served.cdir, served.spaces, served.here
    found = [locate(spaces, root / p) for p in staged(root)]
    rels = sorted({f[1] for f in found if f is not None and f[0] == here})
    if not rels:
        return 0, ""
    roster = cdir.roster()
    me = roster.owner_of(plan_key("x")) or roster.agents[0].name
    addresses = link_addresses(cdir)
    sessions = SyncSessions(roster, cdir.identity(me), addresses)
    try:
        got = collect(sessions, roster, list(spaces), rels, time.monotonic() + CHECK_TIMEOUT)
    finally:
        sessions.close()
    if got.unreachable:
        why = "; ".join(f"{o}: {w}" for o, w in sorted(got.unreachable.items()))
        return 1, (
            f"PlanFence refused the commit: cannot ask every owner of the team for intents on "
            f"the staged files ({why}); it fails closed. {BYPASS}"
        )
    staged_here = set(rels)
    lines = _held_lines(got, here, staged_here)
    lines += _drifted_lines(got, here, staged_here, cdir, roster, me, addresses)
    return (1, refusal(lines)) if lines else (0, "")


@dataclass(frozen=True)
class _Served:
    """The cluster that serves a worktree, its worktrees, and the worktree's name there."""

    cdir: ClusterDir
    spaces: dict[str, Path]
    here: str


def _served(root: Path, cluster: Path | None) -> _Served | tuple[int, str]:
    """The cluster serving the worktree `root`, or the gate's answer when none does: let
    the commit through outside a repository that uses PlanFence, else refuse it."""
    try:
        cdir = find_cluster(cluster, root)
    except NoCluster:
        if marker(root) is None:
            return 0, ""  # not a repository that uses PlanFence
        return 1, (
            f"PlanFence refused the commit: {root} is a worktree of a repository that uses "
            f"PlanFence, but no workspace owner serves it (planfence workspace join {root}). "
            f"{BYPASS}"
        )
    spaces = workspaces(cdir)
    here = next((n for n, p in spaces.items() if p.resolve() == root.resolve()), None)
    if here is None:
        if marker(root) is None:
            return 0, ""
        return 1, (
            f"PlanFence refused the commit: {root} is a worktree of a repository that uses "
            f"PlanFence, but the cluster {cdir.root} does not serve it (planfence workspace "
            f"join {root}). {BYPASS}"
        )
    return _Served(cdir, spaces, here)


def _held_lines(got: Collected, here: str, staged_here: set[str]) -> list[str]:
    """A line per staged file another worktree's plan holds exclusively."""
    repo = got.repos.get(here, "")
    lines = []
    for held in got.intents:
        if held.exclusive and held.owner != here and held.repo == repo:
            if held.file in staged_here:
                lines.append(
                    f"{held.file} is held exclusively by {held.who()} until {held.until()}: "
                    f"wait until that plan ends or its lease runs out."
                )
    return lines


def _drifted_lines(
    got: Collected,
    here: str,
    staged_here: set[str],
    cdir: ClusterDir,
    roster: Roster,
    me: str,
    addresses: dict[str, tuple[str, int]],
) -> list[str]:
    """The lines for each plan with intents on staged files whose drift check does not pass."""
    lines = []
    plans = sorted({i.plan for i in got.intents if i.owner == here and i.file in staged_here})
    for plan in plans:
        targets = sorted({i.file for i in got.intents if i.plan == plan and i.owner == here})
        owner = roster.owner_of(plan_key(plan)) or me
        verdict = check_commits(
            cdir.root,
            roster,
            cdir.identity(owner),
            plan,
            addresses=addresses,
            timeout=CHECK_TIMEOUT,
        )
        if verdict.exit_code == 0:
            continue
        shown = ", ".join(t for t in targets if t in staged_here)
        lines.extend(stale_lines(plan, shown, verdict))
    return lines


def stale_lines(plan: str, shown: str, verdict: Verdict) -> list[str]:
    """Why the staged files `shown`, targets of `plan`, cannot be committed: the drift
    summary the agents' hook prints, who changed each drifted file (the writer and the
    diff, `Verdict.writer_lines`), and what fixes it. A trusted plan: the re-read of the
    files it names, then its re-trust (which also re-bases it on the current branch and
    HEAD). A session's automatic plan: the re-read in the agent's session, and for a
    repository, branch or HEAD that moved past what the plan holds (commits that bring in
    other content, a switch) the person's `workspace refresh`, which no re-read replaces."""
    if verdict.level == "undecided":
        return [f"{shown}: cannot validate plan {plan!r}: {verdict.detail}."]

    reread = ", ".join(verdict.reread)
    if not plan.startswith(PREFIX):
        then = [
            (f"Re-read {reread}, then" if reread else "Re-check the workspace, then")
            + f" re-trust the plan (planfence workspace trust {plan} ...) and commit again."
        ]
    else:  # a session's automatic plan: its re-read records the files
        then = moved_lines(plan, verdict)
        if reread:
            then.insert(
                0,
                f"Re-read {reread} in the agent's session (with Read, or cat in the shell)"
                + (", then commit again." if not then else "."),
            )
        if not then:
            then.append("Re-check the workspace in the agent's session, then commit again.")
    return [
        f"{shown} is a target of plan {plan!r}, which is stale ({verdict.level} drift).",
        *verdict.lines,
        *verdict.writer_lines(),  # who changed what, and how, as the agents' hook says it
        *then,
    ]


def moved_lines(plan: str, verdict: Verdict) -> list[str]:
    """The step for a repository, branch or HEAD that moved past what automatic plan `plan`
    holds (no line when none did): only the person's `workspace refresh` re-bases it."""
    lines = [ln for ln in verdict.lines if ln.startswith(MOVED)]
    if not lines:
        return []
    what = "HEAD" if all(ln.startswith(MOVED[-1]) for ln in lines) else "The branch"
    return [
        f"{what} moved past what the plan holds: re-reading cannot fix that. Check the "
        f"commits, then re-base the plan with `planfence workspace refresh {plan}` and commit "
        f"again."
    ]


MOVED = ("- Repository changed", "- Branch changed", "- HEAD changed")


def refusal(lines: list[str]) -> str:
    """The whole message a refused commit prints."""
    return "\n".join(["PlanFence refused the commit:", *lines, BYPASS])
