"""The hook's records of the agent's own writes: after a file-changing call (PostToolUse,
`PlanWrites.edit`), and, when a check blocks while the plan's other calls are in flight,
their targets before it looks again (`PlanWrites.in_flight`; see `inflight`). A trusted plan
moves its declared targets (`advance.wait_advance`); a session's automatic plan takes every
written file as a target (`autohook.record_writes`). Each write is also noted as this
session's (`note_writes`, `place.history`) while the file holds what the call made: the
block of another plan it stales names it. Imports are deferred (each hook call is a fresh
process; measured in `run`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from .run import ALLOW, BLOCK

if TYPE_CHECKING:
    from ...core.identity import Identity
    from ...core.roster import Roster
    from ..model.payload import ToolCall


def owner(call: ToolCall) -> str:
    """Whose call this is: the session, and the subagent within it."""
    return f"{call.session}/{call.agent_id or ''}"


def expected(call: ToolCall, data: bytes) -> dict[str, str | None]:
    """What the file-changing `call` (its payload `data`) makes of each of its files, as
    `model.outcome.made` says from the files' content now (None: cannot be said)."""
    import json
    import os

    from ..model.outcome import made

    tool_input = json.loads(data).get("tool_input")
    out: dict[str, str | None] = {}
    for name in call.files:
        before: bytes | None = None
        if call.tool in ("Edit", "MultiEdit"):
            try:
                with open(os.path.join(call.cwd, name), "rb") as file:
                    before = file.read()
            except FileNotFoundError:
                before = None
            except OSError:
                out[name] = None
                continue
        out[name] = made(call.tool, tool_input, name, before)
    return out


def file_keys(root: Path, cwd: str, files: list[str] | tuple[str, ...]) -> list[str]:
    """The file keys of `files` (relative to `cwd`) inside the cluster's worktrees."""
    return [key for key, _ in keyed_files(root, cwd, files)]


def keyed_files(root: Path, cwd: str, files: list[str] | tuple[str, ...]) -> list[tuple[str, Path]]:
    """(file key, path) of `files` (relative to `cwd`) inside the cluster's worktrees."""
    from ...cluster.folder import ClusterDir
    from ..model.facts import file_key
    from ..place.config import locate, workspaces

    spaces = workspaces(ClusterDir(root))
    return [
        (file_key(*found), Path(cwd) / f)
        for f in files
        if (found := locate(spaces, Path(cwd) / f)) is not None
    ]


def note_writes(root: Path, call: ToolCall, written: list[tuple[str, Path]]) -> None:
    """Record the call's writes of `written` ((file key, path) pairs) as this session's
    (`place.history.note_write`): what a block says when they stale another plan."""
    from ..model.writers import Write
    from ..place import history
    from ..place.paths import worktree_root

    where = worktree_root(Path(call.cwd)) or Path(call.cwd)
    who = Write(
        (), call.session, call.agent_id, call.agent_type, call.agent, str(where), history.now()
    )
    for key, path in written:
        history.note_write(root, key, path, who)


@dataclasses.dataclass(frozen=True)
class PlanWrites:
    """Where the hook records the agent's own writes: plan `plan` of the cluster at `root`,
    as `identity`, within `step` seconds per round; `auto`: the session's automatic plan."""

    root: Path
    plan: str
    roster: Roster
    identity: Identity
    step: float
    auto: bool = False

    def in_flight(self, call: ToolCall) -> bool:
        """Record the targets of the plan's other calls in flight (see `inflight`); returns
        whether there were any (and they were recorded)."""
        from ...core.errors import PlanfenceError
        from ..place import inflight

        pending = inflight.others(self.root, self.plan, call.tool_use_id)
        keys = [k for cwd, files in pending for k in file_keys(self.root, cwd, files)]
        if not keys:
            return False
        try:
            return self.advance(keys)
        except (PlanfenceError, ValueError):
            return False

    def advance(self, keys: list[str], landed: bool = False) -> bool:
        """Record the agent's own writes of `keys`: a trusted plan moves its declared targets
        (`advance`); a session's automatic plan takes every written file as a target
        (`session`). Returns whether the plan record was written."""
        if self.auto:
            from .auto import record_writes

            return record_writes(self.root, self.plan, self.roster, keys, self.step, landed)
        from ..plans.advance import wait_advance

        return bool(
            wait_advance(self.roster, self.identity, self.plan, keys, step_timeout=self.step)
        )

    def edit(self, call: ToolCall) -> tuple[int, str]:
        """PostToolUse: move the plan's trusted versions of the touched targets to what the
        agent just wrote (see `advance`). Exit 2 only shows the reason: the call already
        ran."""
        from ...core.errors import PlanfenceError
        from ..place import inflight, stops

        root, plan = self.root, self.plan
        note = (
            inflight.mine(root, plan, call.tool_use_id, owner(call)) if call.tool_use_id else None
        )
        if note is None:
            return BLOCK, (
                f"PlanFence did not record {call.describe()}{call.subagent()} in plan {plan!r}: "
                f"no PreToolUse of this session let this call "
                f"({call.tool_use_id or 'no tool_use_id'}) through; the next call will see "
                f"these files as changed."
            )
        cwd, files = note
        mine = [f for f in files if f in call.files]
        expect = inflight.made(root, plan, call.tool_use_id) if call.tool_use_id else {}
        # Who wrote them, for the blocks of other plans: never a file that no longer holds
        # what the call made (another process wrote it since).
        held = {
            Path(cwd) / f
            for f in mine
            if expect.get(f) is None or inflight.landed(cwd, f, expect[f])
        }
        keyed = keyed_files(root, cwd, mine)
        note_writes(root, call, [(key, path) for key, path in keyed if path in held])
        keys = [key for key, _ in keyed]
        try:
            # A stopped plan's count stays: only a person's re-base lifts the stop (`stops`).
            self.advance(keys, landed=not stops.stopped(root, plan))
        except (PlanfenceError, ValueError) as exc:
            return BLOCK, (
                f"PlanFence could not record {call.describe()}{call.subagent()} in plan "
                f"{plan!r} ({exc}); the next call will see these files as changed."
            )
        if call.tool_use_id:  # always set here: a Post without one was refused above
            inflight.remove(root, plan, call.tool_use_id)
        return ALLOW, ""
