"""Automatic mode (`planfence hook ... --mode auto`): a session's plan is made from its own
reads and writes, as real hook processes against a real workspace owner. A drift of what it
read blocks its next write naming the files; a re-read lets the same write through; a drift
after the re-read is "changed again: stop and report"; an unread tracked file never blocks;
a branch switch blocks until a person refreshes; test runs are evidence."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from planfence_net.cluster.command import executable
from planfence_net.workspace.hook.auto import resolve_reads
from planfence_net.workspace.model.payload import parse_payload
from planfence_net.workspace.plans.session import auto_plan
from support.auto_hook import AUTO, PLAN, SESSION, claude, read, write_call
from support.cluster import PLANFENCE
from support.workspace import git, make_repo, payload, run_cli, run_hook, served, write
from support.writers import no_writers

CODEX_SESSION = "0199a7c4-5e2b-7f31-8d6a-3c9e1b2f4a58"
FILES = {"lib.py": "def f():\n    return 1\n", "main.py": "import lib\n"}


def bash(repo: Path, command: str, event: str = "PreToolUse", n: int = 2) -> tuple[int, str]:
    data = claude(event, "Bash", {"command": command, "description": "run"}, repo, n)
    return run_hook("claude", data, *AUTO)


def check(repo: Path, plan: str = PLAN) -> dict[str, Any]:
    code, out, err = run_cli("workspace", "check", plan, "--json", cwd=repo)
    report: dict[str, Any] = json.loads(out)
    assert code == report["exit_code"], err
    return report


def blocked(repo: Path, level: str, *lines: str, plan: str = PLAN, rel: str = "main.py") -> str:
    return "\n".join(
        [
            f"PlanFence blocked Write of {repo / rel}: plan '{plan}' (what this session read "
            f"and wrote) is stale ({level} drift).",
            "Workspace drift detected since the previous trusted state:",
            *lines,
        ]
    )


def reread_line(files: str) -> str:
    return (
        f"Re-read {files} (with Read, or cat in the shell), then retry the same call: the "
        f"re-read records what the files hold now. If one changes again, stop and report."
    )


def test_block_reread_go_on_once(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert read(repo, "lib.py") == (0, "")  # the session's first call starts its plan
        assert check(repo)["class"] == "none"
        assert write_call(repo, "main.py") == (0, "")
        write(repo, {"main.py": "import lib\nlib.f()\n"})
        assert write_call(repo, "main.py", "PostToolUse") == (0, "")  # now a target
        write(repo, {"lib.py": "def f():\n    return 2\n"})  # another process
        reason = blocked(
            repo, "relevant", "- 1 previously inspected file changed: lib.py", reread_line("lib.py")
        )
        assert no_writers(write_call(repo, "main.py", n=3)) == (2, reason + "\n")
        assert read(repo, "lib.py", 4) == (0, "")  # the re-read: lib.py moves, one replan
        assert check(repo)["trust"] == 2
        assert write_call(repo, "main.py", n=3) == (0, "")  # the same write, validated again
        write(repo, {"lib.py": "def f():\n    return 3\n"})  # changed again before it landed
        code, reason = no_writers(write_call(repo, "main.py", n=5))
        assert (code, reason) == (
            2,
            blocked(
                repo,
                "relevant",
                "- 1 previously inspected file changed: lib.py",
                "A file you already re-read has changed again: stop and report the drift "
                "above to the user; do not retry this call and do not re-read again.",
                f"The plan's writes now stay blocked until the user re-bases it with "
                f"`{executable()} workspace refresh {PLAN}` (never run it yourself); "
                f"re-reading does not lift this.",
            )
            + "\n",
        )
        assert "changed again: stop and report" in reason
        # Stopped (issue 28, H8): the write that went through lands, but neither it nor a
        # re-read starts the count over; only a person's refresh does.
        assert read(repo, "lib.py", 6) == (0, "")
        assert write_call(repo, "main.py", "PostToolUse", n=3) == (0, "")
        assert check(repo)["trust"] == 3
        assert write_call(repo, "main.py", n=7)[0] == 2
        code, out, err = run_cli("workspace", "refresh", PLAN, "--yes", cwd=repo)
        assert (code, err) == (0, ""), out
        assert check(repo)["trust"] == 1
        # Someone else edits the file the session wrote: critical, re-read it.
        write(repo, {"main.py": "someone else\n"})
        assert no_writers(write_call(repo, "main.py", n=7)) == (
            2,
            blocked(
                repo,
                "critical",
                "- 1 file the plan will modify changed: main.py",
                reread_line("main.py"),
            )
            + "\n",
        )
        assert read(repo, "main.py", 8) == (0, "")
        assert write_call(repo, "main.py", n=7) == (0, "")


def test_explicit_mode_and_an_explicit_plan_take_precedence(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        code, reason = run_hook(
            "claude",
            claude(
                "PreToolUse", "Write", {"file_path": str(repo / "main.py"), "content": ""}, repo, 1
            ),
        )
        assert code == 2 and "no trusted plan for this session" in reason  # --mode explicit
        data = claude("PostToolUse", "Read", {"file_path": str(repo / "lib.py")}, repo, 0)
        assert run_hook("claude", data) == (0, "")  # explicit mode records no read
        assert check(repo)["reason"] == "no_plan"
        code, out, err = run_cli(
            "workspace", "trust", "mine", "--read", "main.py", "--session", SESSION, cwd=repo
        )
        assert code == 0, out + err
        assert read(repo, "lib.py") == (0, "")  # the trusted plan is the session's: no auto plan
        assert check(repo)["reason"] == "no_plan"
        write(repo, {"lib.py": "changed\n"})
        assert write_call(repo, "main.py") == (0, "")  # checked against 'mine' only


def test_thirty_reads_block_only_on_what_was_read_or_written(tmp_path: Path) -> None:
    files = {f"src/m{i:02}.py": f"v = {i}\n" for i in range(40)}
    repo = make_repo(tmp_path / "repo", files)
    names = sorted(files)
    with served(repo):
        for n, rel in enumerate(names[:15]):  # Read, one call each
            assert read(repo, rel, n) == (0, "")
        cat = "cat " + " ".join(names[15:25]) + " && head -n 3 " + " ".join(names[25:30])
        assert bash(repo, cat, "PostToolUse") == (0, "")  # a shell command that reads
        assert write_call(repo, names[0]) == (0, "")
        write(repo, {names[0]: "v = 'mine'\n"})
        assert write_call(repo, names[0], "PostToolUse") == (0, "")
        write(repo, {rel: "changed by another agent\n" for rel in names[30:]})  # unread
        assert write_call(repo, names[1], n=9) == (0, "")
        report = check(repo)
        assert (report["class"], report["exit_code"]) == ("informational", 0)
        assert report["lines"][-1] == (
            "- Unrelated tracked files changed (informational): " + ", ".join(names[30:])
        )
        write(repo, {names[29]: "read with head, changed\n"})
        assert no_writers(write_call(repo, names[1], n=9)) == (
            2,
            blocked(
                repo,
                "relevant",
                f"- 1 previously inspected file changed: {names[29]}",
                reread_line(names[29]),
                rel=names[1],
            )
            + "\n",
        )


def test_parallel_reads_are_never_lost(tmp_path: Path) -> None:
    files = {f"r{i:02}.txt": f"{i}\n" for i in range(12)}
    repo = make_repo(tmp_path / "repo", files)
    with served(repo):
        procs = []
        for n, rel in enumerate(sorted(files)):  # 12 PostToolUse hooks at once
            data = claude("PostToolUse", "Read", {"file_path": str(repo / rel)}, repo, n)
            proc = subprocess.Popen(
                [str(PLANFENCE), "hook", "claude", *AUTO, "--timeout", "20"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(data).encode())
            proc.stdin.close()
            procs.append(proc)
        for proc in procs:
            assert proc.stdout is not None and proc.stderr is not None
            out, err = proc.stdout.read(), proc.stderr.read()
            assert (proc.wait(timeout=60), out, err) == (0, b"", b"")
            proc.stdout.close()
            proc.stderr.close()
        write(repo, {rel: "changed\n" for rel in files})
        code, reason = write_call(repo, "r00.txt", n=99)
        assert code == 2
        assert f"- 12 previously inspected files changed: {', '.join(sorted(files))}\n" in reason


def test_codex_reads_with_cat_and_a_cat_is_never_blocked(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):

        def codex(event: str, tool: str, command: str, n: int) -> tuple[int, str]:
            data = payload("codex-bash", repo)
            data.update(hook_event_name=event, tool_name=tool, tool_use_id=f"call_{n}")
            data["tool_input"] = {"command": command}
            return run_hook("codex", data, *AUTO)

        patch = "*** Begin Patch\n*** Update File: main.py\n@@\n-import lib\n+import lib  # x\n*** End Patch\n"
        assert codex("PreToolUse", "Bash", "cat lib.py", 1) == (0, "")
        assert codex("PostToolUse", "Bash", "cat lib.py", 1) == (0, "")
        write(repo, {"lib.py": "changed\n"})
        code, reason = codex("PreToolUse", "apply_patch", patch, 2)
        assert code == 2
        assert reason.startswith(
            f"PlanFence blocked apply_patch of main.py: plan '{auto_plan(CODEX_SESSION)}' (what "
            "this session read and wrote) is stale (relevant drift)."
        )
        assert codex("PreToolUse", "Bash", "sed -n '1,20p' lib.py", 3) == (0, "")  # read-only
        assert codex("PostToolUse", "Bash", "sed -n '1,20p' lib.py", 3) == (0, "")
        assert codex("PreToolUse", "apply_patch", patch, 2) == (0, "")
        code, reason = codex("PreToolUse", "Bash", "cat lib.py > copy.py", 4)
        assert code == 0  # a write through the shell: checked against the plan, no drift now


def test_a_branch_switch_blocks_until_a_person_refreshes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert read(repo, "lib.py") == (0, "")
        git(repo, "checkout", "-q", "-b", "other")
        code, reason = write_call(repo, "main.py")
        assert code == 2
        lines = reason.splitlines()
        assert lines[2] == "- Branch changed: main -> other"
        assert lines[-1] == (
            "The branch or HEAD changed: stop and tell the user. Only the user can re-base "
            f"this plan on it, with `{executable()} workspace refresh {PLAN}` (never run it "
            "yourself)."
        )
        code, reason = bash(repo, f"{executable()} workspace refresh {PLAN} --yes")
        assert code == 2 and reason.endswith(
            "`: `planfence workspace refresh` re-bases a plan on a new branch or HEAD and is "
            "the user's decision, never the agent's. Do not try another way; ask the user.\n"
        )
        assert bash(repo, "planfence workspace 'refresh'")[0] == 2  # through PATH too
        code, out, err = run_cli("workspace", "refresh", PLAN, "--yes", cwd=repo)
        assert (code, err) == (0, ""), out
        assert out.splitlines()[-1] == (
            f"refreshed {PLAN}: re-based on the current branch and HEAD (replan count 1)"
        )
        assert write_call(repo, "main.py") == (0, "")
        code, out, err = run_cli("workspace", "refresh", "--session", "nobody", "--yes", cwd=repo)
        assert (code, out, err) == (1, "", f"error: no plan '{auto_plan('nobody')}'\n")


def test_a_test_run_is_evidence_and_goes_stale(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert read(repo, "lib.py") == (0, "")
        assert bash(repo, "pytest -q", "PostToolUse") == (0, "")
        assert check(repo)["class"] == "none"
        write(repo, {"lib.py": "changed\n"})
        code, reason = write_call(repo, "main.py")
        assert code == 2
        assert reason.splitlines()[2:4] == [
            "- 1 previously inspected file changed: lib.py",
            "- Previous test result is now stale: `pytest -q` ran against lib.py",
        ]


@pytest.mark.parametrize(
    ("event", "extra", "exit"),
    [
        ("PostToolUse", {}, 0),
        ("PostToolUseFailure", {"error": "Exit code 3"}, 3),
        ("PostToolUseFailure", {"error": "interrupted"}, None),
    ],
)
def test_exit_codes_of_shell_commands(event: str, extra: dict[str, Any], exit: int | None) -> None:
    data = {**claude(event, "Bash", {"command": "pytest"}, Path("/p"), 1), **extra}
    call = parse_payload("claude", json.dumps(data).encode())
    assert (call.exit, call.gated, call.files) == (exit, False, ())
    codex = {**payload("codex-bash", Path("/p")), "hook_event_name": "PostToolUse"}
    assert parse_payload("codex", json.dumps(codex).encode()).exit is None  # Codex does not say


def test_session_start_starts_the_plan_and_tells_the_model(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    start = {
        "session_id": SESSION,
        "transcript_path": None,
        "cwd": str(repo),
        "hook_event_name": "SessionStart",
        "source": "startup",
    }
    with served(repo):
        proc = subprocess.run(
            [str(PLANFENCE), "hook", "claude", *AUTO],
            input=json.dumps(start).encode(),
            capture_output=True,
            timeout=30,
        )
        assert (proc.returncode, proc.stderr) == (0, b"")
        context = json.loads(proc.stdout)["hookSpecificOutput"]
        assert context["hookEventName"] == "SessionStart"
        assert context["additionalContext"].count(". ") == 1  # two sentences
        assert check(repo)["class"] == "none"  # branch, HEAD and repository recorded
        git(repo, "commit", "-q", "--allow-empty", "-m", "moved on")
        assert check(repo)["class"] == "critical"


def test_read_operands_become_keys_of_existing_files_inside_the_worktree(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"lib.py": "x\n", "src/a.py": "a\n"})
    (tmp_path / "secret").write_text("outside\n")
    (repo / "link").symlink_to(tmp_path / "secret")  # leads out of the worktree
    spaces = {"ws": repo}
    operands = ["lib.py", "missing.py", "link", "../secret", ":src/a.py", "src", "lib.py"]
    assert resolve_reads(spaces, str(repo), operands) == ["ws:file/lib.py", "ws:file/src/a.py"]
    assert resolve_reads(spaces, str(repo / "src"), ["a.py", ":lib.py"]) == [
        "ws:file/src/a.py",
        "ws:file/lib.py",
    ]


def test_a_trust_never_moves_a_session_off_its_stale_plan(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert read(repo, "lib.py") == (0, "")
        write(repo, {"lib.py": "changed\n"})
        assert write_call(repo, "main.py")[0] == 2
        # A plan trusted for every session (the folder's first: its current plan) is shared
        # with sessions without one of their own; this session has its own.
        code, out, err = run_cli("workspace", "trust", "shared", "--read", "main.py", cwd=repo)
        assert code == 0, out + err
        code, reason = write_call(repo, "main.py")
        assert code == 2 and f"plan '{PLAN}'" in reason
        other = {
            **claude(
                "PreToolUse", "Write", {"file_path": str(repo / "main.py"), "content": ""}, repo, 1
            ),
            "session_id": "another",
        }
        code, reason = run_hook("claude", other, *AUTO)
        assert (code, reason) == (0, "")  # a session that never started one uses the shared plan
        # Trusting a plan for this session while its own is stale is a re-trust of it.
        code, out, err = run_cli(
            "workspace", "trust", "mine", "--read", "main.py", "--session", SESSION, cwd=repo
        )
        assert (code, out) == (1, "")
        assert err.startswith(
            f"error: trusting mine for session {SESSION} would replace the stale plan {PLAN} "
            "and would declare less than its trusted state: "
        ), err
        assert "ws:lib.py (read)" in err, err


def test_the_clusters_hook_table_names_the_test_commands(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        roster = repo / ".planfence" / "cluster.toml"
        roster.write_text(roster.read_text() + '\n[hook]\ntests = ["make check*"]\n')
        assert read(repo, "lib.py") == (0, "")
        assert bash(repo, "pytest -q", "PostToolUse", n=3) == (0, "")  # not a test command here
        assert bash(repo, "make check", "PostToolUse", n=4) == (0, "")
        write(repo, {"lib.py": "changed\n"})
        lines = write_call(repo, "main.py")[1].splitlines()
        assert [x for x in lines if x.startswith("- Previous")] == [
            "- Previous test result is now stale: `make check` ran against lib.py"
        ]
        roster.write_text(roster.read_text().replace('["make check*"]', '"make check"'))
        code, reason = bash(repo, "make check", "PostToolUse", n=5)
        assert (code, reason) == (
            2,
            f"PlanFence could not record Bash `make check` in this session's plan ({roster}: "
            "[hook] tests must be a list of strings); a later change to them will not block "
            "your writes.\n",
        )
