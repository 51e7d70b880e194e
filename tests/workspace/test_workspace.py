"""Workspace owners end to end: a real `planfence workspace serve` process on 127.0.0.1 and a
real git repository (or plain folder) the test makes; `workspace trust` and `workspace check`
run in-process and must print exactly the summary."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import anyio
import pytest

from planfence_net.cluster.command import executable
from planfence_net.cluster.folder import ClusterDir
from planfence_net.net.client import open_session
from support.workspace import git, make_repo, payload, quiet, run_cli, run_hook, served, write
from support.writers import without_writers

AUTH = "export const timeout = 30;\n"
FILES = {
    "auth.ts": AUTH,
    "package-lock.json": '{"lockfileVersion": 3}\n',
    "README.md": "# app\n",
    "tests/auth.test.ts": "test('timeout')\n",
    **{f"src/mod{i}.ts": f"export const m{i} = {i};\n" for i in range(30)},
}
HEADER = "Workspace drift detected since the previous trusted state:"


def check(repo: Path, plan: str = "auth-fix", *args: str) -> tuple[int, list[str]]:
    """`workspace check PLAN`: exit code and lines, without who changed what (see
    `writers`)."""
    code, out, err = run_cli("workspace", "check", plan, *args, cwd=repo)
    return code, without_writers(out + quiet(err)).splitlines()


def writers(repo: Path, plan: str = "auth-fix") -> list[dict[str, object]]:
    """Who changed what, as `workspace check --json` says."""
    code, out, _ = run_cli("workspace", "check", plan, "--json", cwd=repo)
    found: list[dict[str, object]] = json.loads(out)["writers"]
    return found


def trust(repo: Path, *args: str) -> str:
    code, out, err = run_cli("workspace", "trust", "auth-fix", *args, cwd=repo)
    assert code == 0, out + err
    return out


def test_codex_tracker_scenario_is_critical(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES, branch="feature/auth")
    git(repo, "branch", "main")
    with served(repo):
        out = trust(repo, "--read", "auth.ts", "--evidence", "grep -q timeout auth.ts")
        assert out.startswith(
            "trusted auth-fix (trust 1): 1 read, 0 target, 1 lockfile, 1 evidence; record "
        )
        assert out.endswith("evidence `grep -q timeout auth.ts` exited 0\n")
        assert check(repo) == (0, ["No workspace drift since the trusted state."])
        old = git(repo, "rev-parse", "HEAD").strip()
        git(repo, "checkout", "-q", "main")
        write(
            repo,
            {
                "auth.ts": "export const timeout = 5;\n",  # another agent's edit
                "package-lock.json": '{"lockfileVersion": 3, "packages": {}}\n',
            },
        )
        git(repo, "commit", "-q", "-am", "other agent")
        new = git(repo, "rev-parse", "HEAD").strip()
        assert check(repo) == (
            2,
            [
                HEADER,
                "- Branch changed: feature/auth -> main",
                f"- HEAD changed: {old[:7]} -> {new[:7]}",
                "- 1 previously inspected file changed: auth.ts",
                "- package-lock.json changed",
                "- Previous test result is now stale: `grep -q timeout auth.ts` ran against "
                "auth.ts, package-lock.json",
                "Drift class: critical",
            ],
        )
        code, out, _ = run_cli("workspace", "check", "auth-fix", "--json", cwd=repo)
        report = json.loads(out)
        assert (code, report["class"], report["exit_code"]) == (2, "critical", 2)
        assert report["reread"] == ["auth.ts", "package-lock.json"]
        assert (report["trust"], report["changed_again"]) == (1, False)
        head, auth, lock = report["writers"]  # a commit outside any session: its author
        assert (head["path"], head["commit"]) == ("HEAD", new)
        assert head["writer"] == f"commit {new[:7]} by test <test@example.invalid> ('other agent')"
        assert head["diff"] == "M auth.ts\nM package-lock.json"
        assert (auth["path"], auth["writer"], auth["session"]) == (
            "auth.ts",
            "outside any fenced session",
            None,
        )
        assert auth["diff"] == (
            "@@ -1 +1 @@\n-export const timeout = 30;\n+export const timeout = 5;"
        )
        assert lock["path"] == "package-lock.json" and lock["diff"].startswith("@@")


def test_unrelated_change_is_informational_and_the_hook_allows(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        trust(repo, "--read", "auth.ts", "--target", "src/mod1.ts")
        write(repo, {"README.md": "# app, documented\n"})
        assert check(repo) == (
            0,
            [
                HEADER,
                "- Unrelated tracked files changed (informational): README.md",
                "Drift class: informational",
            ],
        )
        assert run_hook("claude", payload("claude-edit", repo)) == (0, "")
        # Only the 3 declared files were ever hashed (at most once per observation: trust,
        # check, hook, as they are younger than the racy window), never the other 31.
        assert stats(repo)["files_hashed"] <= 3 * 4


def test_evidence_goes_stale_when_its_input_changes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        trust(
            repo,
            "--read",
            "auth.ts",
            "--evidence",
            "grep -q timeout tests/auth.test.ts",
            "--evidence-input",
            "tests/auth.test.ts",
            "--lockfiles",
            "none",
        )
        write(repo, {"tests/auth.test.ts": "test('timeout', retries)\n"})
        assert check(repo) == (
            2,
            [
                HEADER,
                "- Previous test result is now stale: `grep -q timeout tests/auth.test.ts` "
                "ran against tests/auth.test.ts",
                "Drift class: relevant",
            ],
        )


def test_a_folder_without_git(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    write(folder, {"notes.txt": "read me\n", "out/plan.md": "todo\n"})
    with served(folder):
        trust(folder, "--read", "notes.txt", "--target", "out/plan.md")
        assert check(folder) == (0, ["No workspace drift since the trusted state."])
        write(folder, {"out/plan.md": "done\n"})
        assert check(folder) == (
            2,
            [HEADER, "- 1 file the plan will modify changed: out/plan.md", "Drift class: critical"],
        )
        heads = file_record(folder, "out/plan.md")
        assert heads["hash"].startswith("blake2b:") and heads["size"] == 5
        [row] = writers(folder)  # kept by its BLAKE2b hash at the trust: no git to ask
        assert (row["writer"], row["diff"]) == (
            "outside any fenced session",
            "@@ -1 +1 @@\n-todo\n+done",
        )


def test_a_second_drift_after_the_replan_is_changed_again(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        trust(repo, "--read", "auth.ts", "--lockfiles", "none")
        write(repo, {"auth.ts": "v2\n"})
        assert check(repo)[1][-1] == "Drift class: relevant"
        assert trust(repo, "--read", "auth.ts", "--lockfiles", "none").startswith(
            "trusted auth-fix (trust 2)"
        )
        assert check(repo)[0] == 0
        write(repo, {"auth.ts": "v3\n"})
        assert check(repo) == (
            2,
            [
                HEADER,
                "- 1 previously inspected file changed: auth.ts",
                "Drift class: relevant; it changed again after a replan: stop and report",
            ],
        )
        code, reason = run_hook("claude", payload("claude-edit", repo))
        assert code == 2
        assert without_writers(reason).splitlines()[-2:] == [
            "It changed again after the plan was already re-made once. "
            "Stop: do not replan again; report the drift above to the user.",
            "The plan's writes now stay blocked until the user re-bases it with "
            f"`{executable()} workspace refresh auth-fix` (never run it yourself); "
            "re-reading does not lift this.",
        ]
        assert trust(repo, "--read", "auth.ts", "--fresh").startswith("trusted auth-fix (trust 1)")


def test_cannot_decide_exits_3(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        trust(repo, "--read", "auth.ts")
        moved = tmp_path / "moved"
        shutil.move(repo, moved)
        code, lines = check(moved, "auth-fix", "--cluster", str(moved / ".planfence"))
        assert code == 3
        assert lines[0].startswith(
            "Cannot decide whether plan 'auth-fix' is still valid: "
            "owner 'ws': owner unavailable (worktree_gone: worktree "
        )
        shutil.move(moved, repo)
    assert check(repo) == (
        3,
        ["Cannot decide whether plan 'auth-fix' is still valid: owner 'ws': owner unavailable"],
    )
    with served(repo):
        assert check(repo, "never-trusted") == (
            3,
            [
                "Cannot decide whether plan 'never-trusted' is still valid: no trusted state for "
                "plan 'never-trusted': run `planfence workspace trust never-trusted ...` first"
            ],
        )


def stats(repo: Path) -> dict[str, object]:
    cdir = ClusterDir(repo / ".planfence")

    async def ask() -> dict[str, object]:
        async with open_session(cdir.roster(), cdir.identity("ws"), "ws") as session:
            return await session.request("stats")

    return anyio.run(ask)


def file_record(folder: Path, rel: str) -> dict[str, object]:
    cdir = ClusterDir(folder / ".planfence")

    async def ask() -> dict[str, object]:
        async with open_session(cdir.roster(), cdir.identity("ws"), "ws") as session:
            answer = await session.request(
                "heads", {"keys": [f"ws:file/{rel}"], "expect": {f"ws:file/{rel}": b"\0" * 32}}
            )
        from planfence_net.core.records import record_from_wire

        body: dict[str, object] = record_from_wire(answer["records"][0]).body
        return body

    return anyio.run(ask)


pytestmark = pytest.mark.timeout(60)
