"""Subagents inherit (issue 28, H7): in automatic mode a subagent's plan derives from its
parent's plan at its start (the parent's plan record is a lineage parent of the child's), so
a drift of what the parent read blocks the child's writes, named as the parent's read; a
re-read by the child moves it; and the parent is told when a child's write changed a file
the parent had read. Real hook processes against a real workspace owner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from planfence_net.cluster.folder import ClusterDir
from planfence_net.core.roster import Roster
from planfence_net.net.syncclient import SyncSessions
from planfence_net.workspace.model.facts import plan_key
from planfence_net.workspace.plans.session import auto_plan, heads
from support.workspace import (
    make_repo,
    payload,
    run_cli,
    run_hook,
    run_hook_output,
    served,
    served_team,
    write,
)
from support.writers import split_writers, stamp_free, without_writers

AUTO = ("--mode", "auto")
SESSION = "9f2c6a1e-4b7d-4e0a-9c55-2f1d8e7b3a10"  # the recorded Claude Code payloads' session
PARENT = auto_plan(SESSION)
CHILD = auto_plan(SESSION, "agent-7")
FILES = {"lib.py": "def f():\n    return 1\n", "main.py": "import lib\n"}


def call(
    repo: Path, event: str, tool: str, tool_input: dict[str, Any], n: int, sub: bool = False
) -> tuple[int, str, str]:
    """A Claude Code hook call of the parent session, or (`sub`) of its subagent agent-7."""
    data = {
        **payload("claude-read", repo),
        "hook_event_name": event,
        "tool_name": tool,
        "tool_input": tool_input,
        "tool_use_id": f"toolu_{n:04}",
    }
    if sub:
        data.update(agent_id="agent-7", agent_type="general-purpose")
    return run_hook_output("claude", data, *AUTO)


def read(repo: Path, rel: str, n: int, sub: bool = False) -> tuple[int, str, str]:
    return call(repo, "PostToolUse", "Read", {"file_path": str(repo / rel)}, n, sub)


def write_call(
    repo: Path, rel: str, n: int, sub: bool = False, event: str = "PreToolUse"
) -> tuple[int, str, str]:
    return call(repo, event, "Write", {"file_path": str(repo / rel), "content": "x\n"}, n, sub)


def plan_record(repo: Path, plan: str) -> Any:
    cdir = ClusterDir(repo / ".planfence")
    roster: Roster = cdir.roster()
    owner = roster.owner_of(plan_key(plan))
    assert owner is not None
    sessions = SyncSessions(roster, cdir.identity(owner))
    try:
        return heads(sessions, roster, [plan_key(plan)], 5.0)[plan_key(plan)]
    finally:
        sessions.close()


def check(repo: Path, plan: str) -> dict[str, Any]:
    code, out, err = run_cli("workspace", "check", plan, "--json", cwd=repo)
    report: dict[str, Any] = json.loads(out)
    assert code == report["exit_code"], err
    return report


def test_a_subagent_is_blocked_by_a_drift_of_what_its_parent_read(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert read(repo, "lib.py", 1) == (0, "", "")  # the parent reads lib.py
        write(repo, {"lib.py": "def f():\n    return 2\n"})  # another process
        code, _, reason = write_call(repo, "main.py", 2)
        assert code == 2 and "- 1 previously inspected file changed: lib.py" in reason
        # The parent hands the write to a subagent (the Agent tool: no hook call of ours).
        code, out, reason = write_call(repo, "main.py", 3, sub=True)
        assert (code, out) == (2, "")
        assert without_writers(reason).splitlines() == [
            f"PlanFence blocked Write of {repo / 'main.py'} (subagent agent-7, general-purpose): "
            f"plan '{CHILD}' (what this subagent read and wrote) is stale (relevant drift).",
            "Workspace drift detected since the previous trusted state:",
            "- 1 file the parent agent read changed: lib.py",
            "Re-read lib.py (with Read, or cat in the shell), then retry the same call: the "
            "re-read records what the files hold now. If one changes again, stop and report.",
        ]
        child, parent = plan_record(repo, CHILD), plan_record(repo, PARENT)
        assert child.parents[0] == parent.id  # the parent's plan record is a lineage parent
        assert set(child.parents) > set(parent.parents)  # ... and its facts are the child's
        assert (child.body["parent_plan"], child.body["inherited"]) == (
            PARENT,
            sorted(parent.body["declaration"]),
        )
        assert check(repo, CHILD)["trust"] == 1
        # The subagent re-reads lib.py: its plan moves it (and no longer links the parent's
        # record, which still holds the old version); the same write goes through.
        assert read(repo, "lib.py", 4, sub=True) == (0, "", "")
        child = plan_record(repo, CHILD)
        assert parent.id not in child.parents and "ws:file/lib.py" not in child.body["inherited"]
        assert check(repo, CHILD)["trust"] == 2  # the subagent's one replan
        assert write_call(repo, "main.py", 3, sub=True) == (0, "", "")
        assert check(repo, PARENT)["exit_code"] == 2  # the parent's own plan is still stale


def test_the_parent_is_told_what_its_subagent_changed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert read(repo, "lib.py", 1) == (0, "", "")
        assert read(repo, "main.py", 2) == (0, "", "")
        assert read(repo, "lib.py", 3, sub=True) == (0, "", "")  # the subagent starts
        assert write_call(repo, "lib.py", 4, sub=True) == (0, "", "")
        write(repo, {"lib.py": "def f():\n    return 5\n"})  # the subagent's Write lands
        assert write_call(repo, "lib.py", 4, sub=True, event="PostToolUse") == (0, "", "")
        told = (
            "PlanFence: subagent agent-7 (general-purpose) changed lib.py, which this session "
            "had read; re-read it before relying on what you read."
        )
        # The parent's next call is told (once); both claims hold: it had read lib.py and
        # its write is blocked until it re-reads it.
        code, out, err = read(repo, "main.py", 5)
        assert (code, err) == (0, "")
        assert json.loads(out) == {
            "hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": told}
        }
        assert read(repo, "main.py", 6) == (0, "", "")  # said once
        code, out, reason = write_call(repo, "main.py", 7)
        assert code == 2 and "- 1 previously inspected file changed: lib.py" in reason
        assert read(repo, "lib.py", 8) == (0, "", "")
        assert write_call(repo, "main.py", 7) == (0, "", "")
        # A subagent's write of a file the parent never read tells it nothing.
        write(repo, {"new.py": "x\n"})
        assert write_call(repo, "new.py", 9, sub=True) == (0, "", "")
        assert write_call(repo, "new.py", 9, sub=True, event="PostToolUse") == (0, "", "")
        assert read(repo, "main.py", 10) == (0, "", "")


def test_a_told_parent_that_is_blocked_reads_it_after_the_reason(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert read(repo, "lib.py", 1) == (0, "", "")
        assert write_call(repo, "lib.py", 2, sub=True) == (0, "", "")
        write(repo, {"lib.py": "x\n"})  # what the subagent's Write makes
        assert write_call(repo, "lib.py", 2, sub=True, event="PostToolUse") == (0, "", "")
        failed = {"command": "false", "description": "fail"}
        # A failed call's answer does not reach the model: the note waits.
        assert call(repo, "PostToolUseFailure", "Bash", failed, 3) == (0, "", "")
        code, out, reason = write_call(repo, "main.py", 3)
        assert (code, out) == (2, "")
        reason, writers = split_writers(reason)
        assert stamp_free(writers[0]) == (  # the subagent's recorded write, named as such
            f"- lib.py: written by session {SESSION} (subagent agent-7, general-purpose) of "
            f"claude in {repo}, T; diff since the version the plan read:"
        )
        assert reason.splitlines()[2:] == [
            "- 1 previously inspected file changed: lib.py",
            "Re-read lib.py (with Read, or cat in the shell), then retry the same call: the "
            "re-read records what the files hold now. If one changes again, stop and report.",
            "PlanFence: subagent agent-7 (general-purpose) changed lib.py, which this session "
            "had read; re-read it before relying on what you read.",
        ]


def test_in_a_team_the_plans_owner_is_not_the_files_owner(tmp_path: Path) -> None:
    """The planner owns the plans, `api` the files: the subagent's check fetches the link
    (the parent's plan record) from the planner."""
    with served_team(tmp_path, FILES, {"page.tsx": "<Login />\n"}) as (handle, api, _):
        hook = ("--cluster", str(handle.path), *AUTO)

        def run(rel: str, tool: str, event: str, n: int, sub: bool) -> tuple[int, str]:
            data = {
                **payload("claude-read", api),
                "hook_event_name": event,
                "tool_name": tool,
                "tool_input": {"file_path": str(api / rel), "content": "x\n"},
                "tool_use_id": f"toolu_{n:04}",
            }
            if sub:
                data.update(agent_id="agent-7", agent_type="general-purpose")
            return run_hook("claude", data, *hook)

        assert run("lib.py", "Read", "PostToolUse", 1, False) == (0, "")
        write(api, {"lib.py": "changed\n"})
        code, reason = run("main.py", "Write", "PreToolUse", 2, True)
        assert code == 2
        assert reason.splitlines()[2] == "- 1 file the parent agent read changed: lib.py", reason
        assert run("lib.py", "Read", "PostToolUse", 3, True) == (0, "")
        assert run("main.py", "Write", "PreToolUse", 2, True) == (0, "")
