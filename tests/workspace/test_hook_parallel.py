"""Parallel calls of one plan, as real processes: 20 PreToolUse and PostToolUse hooks at
once on distinct targets give no false block and lose no advance (the plan record is
written with a compare-and-set on its head); worktrees and subagents find their own plan."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from planfence_net.workspace.place.paths import MARKER
from support.cluster import PLANFENCE
from support.workspace import git, make_repo, payload, run_cli, run_hook, served, write

CALLS = 20
# A generous deadline: the machine may be busy, and what is tested is drift, not speed.
SLOW = ("--timeout", "60")


def start_hook(data: dict[str, object]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [str(PLANFENCE), "hook", "claude", *SLOW],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(data).encode())
    proc.stdin.close()
    return proc


def finish(procs: list[subprocess.Popen[bytes]]) -> list[tuple[int, str]]:
    out = []
    for proc in procs:
        assert proc.stderr is not None and proc.stdout is not None
        err = proc.stderr.read().decode()
        out.append((proc.wait(timeout=60), err))
        proc.stderr.close()
        proc.stdout.close()
    return out


def test_twenty_parallel_calls_of_one_plan_neither_block_nor_lose_an_advance(
    tmp_path: Path,
) -> None:
    names = [f"t{i:02}.txt" for i in range(CALLS)]
    repo = make_repo(tmp_path / "repo", {n: "old\n" for n in names})
    with served(repo):
        targets = [a for n in names for a in ("--target", n)]
        code, out, err = run_cli("workspace", "trust", "par", *targets, cwd=repo)
        assert code == 0, out + err

        def call(i: int, event: str) -> dict[str, object]:
            # the content the test then writes as the tool: only what a call makes is its own
            data = payload(
                "claude-write", repo, file_path=str(repo / names[i]), content=f"new {i}\n"
            )
            return {**data, "hook_event_name": event, "tool_use_id": f"toolu_{i:02}"}

        # Edit i lands between its PreToolUse and PostToolUse; the odd calls' Pre hooks run
        # while the even calls' edits have landed and their Post hooks run, all at once.
        even, odd = range(0, CALLS, 2), range(1, CALLS, 2)
        assert finish([start_hook(call(i, "PreToolUse")) for i in even]) == [(0, "")] * len(even)
        write(repo, {names[i]: f"new {i}\n" for i in even})
        procs = [start_hook(call(i, "PostToolUse")) for i in even]
        procs += [start_hook(call(i, "PreToolUse")) for i in odd]
        assert finish(procs) == [(0, "")] * CALLS
        write(repo, {names[i]: f"new {i}\n" for i in odd})
        assert finish([start_hook(call(i, "PostToolUse")) for i in odd]) == [(0, "")] * len(odd)

        code, out, _ = run_cli("workspace", "check", "par", "--json", cwd=repo)
        report = json.loads(out)
        assert (code, report["class"], report["trust"]) == (0, "none", 1)
        write(repo, {names[0]: "someone else\n"})  # nothing in flight now: this blocks
        code, reason = run_hook("claude", call(0, "PreToolUse"), *SLOW)
        assert code == 2 and f"- 1 file the plan will modify changed: {names[0]}\n" in reason


def test_a_subagent_is_checked_against_its_own_plan(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n", "b.txt": "b\n"})
    with served(repo):
        session = payload("claude-write", repo)["session_id"]
        assert run_cli("workspace", "trust", "parent", "--read", "a.txt", cwd=repo)[0] == 0
        code, out, err = run_cli(
            "workspace",
            "trust",
            "child",
            "--read",
            "b.txt",
            "--session",
            str(session),
            "--agent",
            "agent-7",
            cwd=repo,
        )
        assert code == 0, out + err
        sub = {**payload("claude-write", repo), "agent_id": "agent-7", "agent_type": "Explore"}
        assert run_hook("claude", sub) == (0, "")
        write(repo, {"a.txt": "changed\n"})  # the parent's read: the subagent's plan is fine
        assert run_hook("claude", sub) == (0, "")
        code, reason = run_hook("claude", payload("claude-write", repo))
        assert code == 2 and "plan 'parent' is stale" in reason
        write(repo, {"b.txt": "changed\n"})
        code, reason = run_hook("claude", sub)
        assert code == 2
        assert reason.startswith(
            f"PlanFence blocked Write of {repo}/session.ts (subagent agent-7, Explore): "
            "plan 'child' is stale (relevant drift)."
        )
        assert f"`{PLANFENCE} workspace trust child --session {session} --agent agent-7 ...`" in (
            reason
        )


def test_a_worktree_is_guarded_once_it_joins(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    other = tmp_path / "other"
    nested = repo / ".claude" / "worktrees" / "x"
    git(repo, "worktree", "add", "-q", "-b", "other", str(other))
    git(repo, "worktree", "add", "-q", "-b", "x", str(nested))
    outside = make_repo(tmp_path / "outside", {"a.txt": "a\n"})
    with served(repo):
        assert json.loads((repo / ".git" / MARKER).read_text()) == {
            "clusters": [str(repo / ".planfence")]
        }
        assert run_cli("workspace", "trust", "p", "--read", "a.txt", cwd=repo)[0] == 0
        for tree in (other, nested):  # the parent's cluster is not theirs
            code, reason = run_hook("claude", payload("claude-write", tree), "--scope", "user")
            assert (code, reason) == (
                2,
                f"PlanFence blocked Write of {tree}/session.ts: {tree} is a worktree of a "
                f"repository that uses PlanFence, but no workspace owner serves it; join it "
                f"to the team's cluster first: {PLANFENCE} workspace join {tree}\n",
            )
        # A repository that does not use PlanFence: a user-scope hook lets it through.
        assert run_hook("claude", payload("claude-write", outside), "--scope", "user") == (0, "")
        assert run_hook("claude", payload("claude-write", outside))[0] == 2
        try:
            code, out, err = run_cli("workspace", "join", other)
            assert (code, err) == (0, ""), out + err
            assert out.startswith(f"joined {other} to the cluster {repo / '.planfence'} as other")
            code, out, err = run_cli(
                "workspace", "trust", "q", "--read", "a.txt", "--session", "s-other", cwd=other
            )
            assert code == 0 and "1 read" in out, out + err
            call = {**payload("claude-write", other), "session_id": "s-other"}
            assert run_hook("claude", call, "--scope", "user") == (0, "")
            write(other, {"a.txt": "changed in the worktree\n"})
            code, reason = run_hook("claude", call, "--scope", "user")
            assert code == 2 and "- 1 previously inspected file changed: a.txt\n" in reason
        finally:
            run_cli("cluster", "down", repo / ".planfence")


def test_session_start_joins_a_worktree_the_agent_made(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    tree = repo / ".claude" / "worktrees" / "agent-1"
    git(repo, "worktree", "add", "-q", "-b", "agent-1", str(tree))
    start = {
        "session_id": "s1",
        "transcript_path": None,
        "cwd": str(tree),
        "hook_event_name": "SessionStart",
        "source": "startup",
    }
    outside = make_repo(tmp_path / "outside", {"a.txt": "a\n"})
    assert run_hook("claude", {**start, "cwd": str(outside)}, "--scope", "user") == (0, "")
    assert not (outside / ".git" / "planfence-worktree.json").exists()  # not PlanFence's
    with served(repo):
        try:
            code, said = run_hook("claude", start, "--scope", "user")
            assert (code, said) == (
                0,
                f"PlanFence: joined {tree} to the cluster {repo / '.planfence'} as agent-1 "
                f"(owns agent-1:*; its owner runs in the background: planfence cluster down "
                f"{repo / '.planfence'} stops it)\n",
            )
            assert run_hook("claude", start, "--scope", "user") == (0, "")  # served now
            code, out, err = run_cli("workspace", "trust", "t", "--read", "a.txt", cwd=tree)
            assert code == 0, out + err
            call = {**payload("claude-write", tree), "session_id": "s1"}
            assert run_hook("claude", call, "--scope", "user") == (0, "")
        finally:
            run_cli("cluster", "down", repo / ".planfence")


def test_a_drift_that_is_an_own_edit_recorded_meanwhile_is_looked_at_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the suite under load (a false block of the twenty parallel calls): call 1's
    check reads the plan while call 0's edit has landed but is not recorded yet, so it sees
    t0 changed; call 0's PostToolUse then records the edit and drops its in-flight note
    before call 1 looks for notes. With no note left, call 1 blocked on its own plan's edit.
    The interleaving is made here by running call 0's PostToolUse inside call 1's first
    check; the hook must look again."""
    from planfence_net.workspace.hook import run as hookrun

    names = ["t0.txt", "t1.txt"]
    repo = make_repo(tmp_path / "repo", {n: "old\n" for n in names})
    with served(repo):
        targets = [a for n in names for a in ("--target", n)]
        assert run_cli("workspace", "trust", "par", *targets, cwd=repo)[0] == 0

        def call(i: int, event: str) -> dict[str, object]:
            data = payload("claude-write", repo, file_path=str(repo / names[i]), content="new\n")
            return {**data, "hook_event_name": event, "tool_use_id": f"toolu_{i:02}"}

        assert run_hook("claude", call(0, "PreToolUse"), *SLOW) == (0, "")
        write(repo, {names[0]: "new\n"})  # call 0's edit lands
        original = hookrun._Checked.check
        looks: list[int] = []

        def check(self: object, step: float) -> object:
            verdict = original(self, step)  # type: ignore[arg-type]
            looks.append(verdict.exit_code)
            if len(looks) == 1:  # call 0 records its edit now, after this look at the plan
                assert run_hook("claude", call(0, "PostToolUse"), *SLOW) == (0, "")
            return verdict

        monkeypatch.setattr(hookrun._Checked, "check", check)
        answer = hookrun.decide("claude", list(SLOW), json.dumps(call(1, "PreToolUse")).encode())
        assert looks[0] == 2  # the first look saw t0 changed
        assert (answer.code, answer.stderr) == (0, ""), answer.stderr
