"""Blocks that say who changed what (issue 30, item 1), as real hook processes against a real
workspace owner: session A's write that stales session B's plan names A (session, subagent,
client, worktree) with the diff since B's read, a Codex session's patch too; a plain process
is "outside any fenced session", with the diff, and so is a write replaced before its
PostToolUse; a HEAD change names the commit and its author; a large file's content is not
kept, and the block says so. The owners' log line carries the same, as `writers`. Then the
pure rules (`model.writers`) and the store (`place.history`) on their own."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from planfence_net.workspace.model.machine import Verdict
from planfence_net.workspace.model.writers import (
    CONTENT_CAP,
    DIFF_LINES,
    MISSING,
    OUTSIDE,
    Drifted,
    Write,
    bounded_diff,
    file_writer,
)
from planfence_net.workspace.place import history
from planfence_net.workspace.plans.session import auto_plan
from planfence_net.workspace.plans.writers import attributed
from support.auto_hook import AUTO
from support.workspace import git, make_repo, payload, run_hook, served

FILES = {"lib.py": "def f():\n    return 1\n", "main.py": "import lib\n"}
A = "0199a7c4-5e2b-7f31-8d6a-3c9e1b2f4a58"
B = "9f2c6a1e-4b7d-4e0a-9c55-2f1d8e7b3a10"


def hook(
    repo: Path, session: str, event: str, tool: str, args: dict[str, Any], n: int, **more: str
) -> tuple[int, str]:
    data = {
        **payload("claude-read", repo),
        "session_id": session,
        "hook_event_name": event,
        "tool_name": tool,
        "tool_input": args,
        "tool_use_id": f"toolu_{session[:4]}{n:04}",
        **more,
    }
    return run_hook("claude", data, *AUTO)


def read(repo: Path, session: str, rel: str, n: int) -> None:
    assert hook(repo, session, "PostToolUse", "Read", {"file_path": str(repo / rel)}, n) == (0, "")


def agent_write(repo: Path, session: str, rel: str, text: str, n: int, **more: str) -> None:
    """A Write through the hooks: PreToolUse, the write itself, PostToolUse."""
    args = {"file_path": str(repo / rel), "content": text}
    assert hook(repo, session, "PreToolUse", "Write", args, n, **more) == (0, "")
    (repo / rel).write_text(text)
    assert hook(repo, session, "PostToolUse", "Write", args, n, **more) == (0, "")


def blocked_write(repo: Path, session: str, n: int) -> str:
    args = {"file_path": str(repo / "main.py"), "content": "x\n"}
    code, reason = hook(repo, session, "PreToolUse", "Write", args, n)
    assert code == 2, reason
    return reason


def who(reason: str) -> list[str]:
    """The block's "Who changed what" lines, without the first (its heading)."""
    lines = reason.splitlines()
    at = lines.index("Who changed what:")
    return [ln for ln in lines[at + 1 :] if ln.startswith(("- ", "    "))]


def logged(repo: Path, plan: str) -> list[dict[str, Any]]:
    """The `writers` of the last logged block of `plan` in the owner's log."""
    log = (repo / ".planfence" / "logs" / "ws.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in log if '"event":"check"' in x]
    [*_, last] = [r for r in rows if r["plan"] == plan and r["exit"] == 2]
    writers: list[dict[str, Any]] = last["writers"]
    return writers


def stamp_free(line: str) -> str:
    """`line` with its UTC time stamp (the time of a write) replaced by T."""
    import re

    return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", "T", line)


def test_session_a_stales_session_b_and_b_is_told_it_was_a(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        read(repo, B, "lib.py", 1)
        read(repo, A, "lib.py", 1)
        agent_write(
            repo,
            A,
            "lib.py",
            "def f():\n    return 2\n",
            2,
            agent_id="a81f3c",
            agent_type="Explore",
        )
        reason = blocked_write(repo, B, 3)
        assert [stamp_free(ln) for ln in who(reason)] == [
            f"- lib.py: written by session {A} (subagent a81f3c, Explore) of claude in {repo}, "
            "T; diff since the version the plan read:",
            "    @@ -1,2 +1,2 @@",
            "     def f():",
            "    -    return 1",
            "    +    return 2",
        ]
        [row] = logged(repo, auto_plan(B))
        assert {k: row[k] for k in ("path", "session", "agent", "client", "worktree")} == {
            "path": "lib.py",
            "session": A,
            "agent": "a81f3c",
            "client": "claude",
            "worktree": str(repo),
        }
        assert row["diff"] == "@@ -1,2 +1,2 @@\n def f():\n-    return 1\n+    return 2"
        assert row["commit"] is None and isinstance(row["at"], float)


def test_a_codex_sessions_patch_is_named_with_its_client(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {**FILES, "auth.ts": "export const timeout = 30;\n"})
    with served(repo):
        read(repo, B, "auth.ts", 1)
        assert run_hook("codex", payload("codex-apply-patch", repo), *AUTO) == (0, "")
        (repo / "auth.ts").write_text("export const timeout = 60;\n")  # what the patch does
        (repo / "session.ts").write_text("export const session = {};\n")
        assert run_hook("codex", payload("codex-post-apply-patch", repo), *AUTO) == (0, "")
        assert [stamp_free(ln) for ln in who(blocked_write(repo, B, 2))] == [
            f"- auth.ts: written by session {A} of codex in {repo}, T; diff since the version "
            "the plan read:",
            "    @@ -1 +1 @@",
            "    -export const timeout = 30;",
            "    +export const timeout = 60;",
        ]


def test_a_plain_process_is_outside_any_fenced_session(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        read(repo, B, "lib.py", 1)
        agent_write(repo, A, "lib.py", "def f():\n    return 2\n", 1)  # A's, then overwritten:
        script = "open('lib.py', 'w').write('def f():\\n    return 3\\n')"
        subprocess.run([sys.executable, "-c", script], cwd=repo, check=True)
        reason = blocked_write(repo, B, 2)
        assert [stamp_free(ln) for ln in who(reason)] == [
            "- lib.py: outside any fenced session, T; diff since the version the plan read:",
            "    @@ -1,2 +1,2 @@",
            "     def f():",
            "    -    return 1",
            "    +    return 3",
        ]
        [row] = logged(repo, auto_plan(B))
        assert (row["writer"], row["session"], row["client"]) == (
            "outside any fenced session",
            None,
            None,
        )
        assert row["diff"] == "@@ -1,2 +1,2 @@\n def f():\n-    return 1\n+    return 3"


def test_a_write_overwritten_before_its_post_tool_use_is_not_the_sessions(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        read(repo, B, "lib.py", 1)
        args = {"file_path": str(repo / "lib.py"), "content": "def f():\n    return 2\n"}
        assert hook(repo, A, "PreToolUse", "Write", args, 1) == (0, "")
        (repo / "lib.py").write_text("def f():\n    return 3\n")  # not what A's call made
        assert hook(repo, A, "PostToolUse", "Write", args, 1) == (0, "")
        [line, *_] = who(blocked_write(repo, B, 2))
        assert stamp_free(line).startswith("- lib.py: outside any fenced session, T; diff")


def test_a_head_change_names_the_commit_and_its_author(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        read(repo, B, "lib.py", 1)
        (repo / "lib.py").write_text("def f():\n    return 4\n")
        git(repo, "-c", "user.name=Ann Author", "-c", "user.email=ann@example.com",
            "commit", "-qam", "Return four")  # fmt: skip
        sha = git(repo, "rev-parse", "HEAD").strip()
        reason = blocked_write(repo, B, 2)
        lines = [stamp_free(ln) for ln in who(reason)]
        assert lines[:2] == [
            f"- HEAD: commit {sha[:7]} by Ann Author <ann@example.com> ('Return four'), T; "
            "files changed since the plan's HEAD:",
            "    M lib.py",
        ]
        assert lines[2].startswith("- lib.py: outside any fenced session, T; diff since")
        rows = logged(repo, auto_plan(B))
        assert [(r["path"], r["commit"]) for r in rows] == [("HEAD", sha), ("lib.py", None)]


def test_a_large_files_content_is_not_kept_and_the_block_says_so(tmp_path: Path) -> None:
    big = "".join(f"line {i}\n" for i in range(CONTENT_CAP // 6))
    assert len(big) > CONTENT_CAP
    repo = make_repo(tmp_path / "repo", {**FILES, "big.txt": big})
    (repo / "big.txt").write_text(big + "more\n")  # an uncommitted version: git has no blob
    with served(repo):
        read(repo, B, "big.txt", 1)
        (repo / "big.txt").write_text(big + "changed\n")
        reason = blocked_write(repo, B, 2)
        size = len(big) + len("more\n")
        assert [stamp_free(ln) for ln in who(reason)] == [
            f"- big.txt: outside any fenced session, T; diff not kept (the read version is "
            f"{size} bytes; content is kept for files of at most 64 KiB)"
        ]
        [row] = logged(repo, auto_plan(B))
        assert row["diff"] is None and "diff not kept" in row["note"]
        assert not list((repo / ".planfence" / "run" / "contents").glob("*")) or all(
            p.stat().st_size <= CONTENT_CAP
            for p in (repo / ".planfence" / "run" / "contents").iterdir()
        )


# The pure rules (`model.writers`), without owners.

WRITE = Write(("git:2", "blake2b:2"), A, None, None, "codex", "/home/dev/wt", 1796142600.0)


def test_a_session_is_named_only_for_the_exact_content_its_write_left() -> None:
    drifted = Drifted("ws:file/lib.py", {"hash": "git:1"}, {"hash": "git:2"})
    named = file_writer("lib.py", drifted, [WRITE], 5.0, (b"a\n", b"b\n"))
    assert (named.session, named.client, named.worktree, named.at) == (
        A,
        "codex",
        "/home/dev/wt",
        1796142600.0,
    )
    assert named.writer == f"written by session {A} of codex in /home/dev/wt"
    later = Drifted("ws:file/lib.py", {"hash": "git:1"}, {"hash": "git:3"})  # changed since
    other = file_writer("lib.py", later, [WRITE], 5.0, (b"a\n", b"c\n"))
    assert (other.writer, other.session, other.at) == (OUTSIDE, None, 5.0)
    gone = Drifted("ws:file/lib.py", {"hash": "git:1"}, {"missing": True})
    deleted = Write((MISSING,), A, "a81f3c", "Explore", "claude", "/home/dev/wt", 9.0)
    assert file_writer("lib.py", gone, [WRITE, deleted], None, (b"a\n", None)).agent == "a81f3c"


def test_a_diff_is_bounded_and_binary_content_is_not_diffed() -> None:
    old = "".join(f"{i}\n" for i in range(100)).encode()
    diff, note = bounded_diff(old, b"")
    assert diff is not None and note == ""
    lines = diff.splitlines()
    assert len(lines) == DIFF_LINES and lines[-1] == f"... {101 - DIFF_LINES + 1} more lines"
    assert bounded_diff(b"a\0b", b"a\0c") == (None, "binary content: no diff shown")
    assert bounded_diff(b"\xff\xfe", b"x") == (None, "binary content: no diff shown")
    assert bounded_diff(None, b"new\n") == ("@@ -0,0 +1 @@\n+new", "")


def test_the_content_store_keeps_small_files_by_both_hashes(tmp_path: Path) -> None:
    small, big = tmp_path / "small.txt", tmp_path / "big.txt"
    small.write_bytes(b"hello\n")
    big.write_bytes(b"x" * (CONTENT_CAP + 1))
    names = history.keep(tmp_path / "cluster", small)
    git_sha = subprocess.run(
        ["git", "hash-object", str(small)], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert names[0] == f"git:{git_sha}" and names[1].startswith("blake2b:")
    assert [history.content(tmp_path / "cluster", n) for n in names] == [b"hello\n"] * 2
    assert history.keep(tmp_path / "cluster", big) == ()
    assert history.content(tmp_path / "cluster", "git:../../etc/passwd") is None


def test_a_block_names_at_most_ten_files_and_git_only_within_its_time(tmp_path: Path) -> None:
    drifted = tuple(
        Drifted(f"ws:file/f{i:02}.py", {"hash": "git:1"}, {"hash": "git:2"}) for i in range(12)
    )
    verdict = Verdict("p", "relevant", (), (), False, 1, None, "", None, drifted=drifted)
    named = attributed(tmp_path / "no-cluster", verdict)
    assert [w.path for w in named.writers] == [f"f{i:02}.py" for i in range(10)]
    assert named.writer_lines()[-1] == "- and 2 more changed files"
    repo = make_repo(tmp_path / "repo", FILES)
    sha = git(repo, "rev-parse", "HEAD").strip()
    moved = dataclasses.replace(verdict, drifted=(Drifted("ws:head", {}, {"head": sha}),))
    [asked] = attributed_in(repo, moved, timeout=5).writers
    assert (asked.writer, asked.commit) == (
        f"commit {sha[:7]} by test <test@example.invalid> ('initial')",
        sha,
    )
    [late] = attributed_in(repo, moved, timeout=0).writers
    assert (late.writer, late.commit) == (f"now at {sha[:7]}", sha)  # no time to ask git


def attributed_in(repo: Path, verdict: Verdict, timeout: float) -> Verdict:
    """`attributed` for a cluster whose workspace agent `ws` serves `repo`."""
    cluster = repo.parent / "cluster"
    cluster.mkdir(exist_ok=True)
    (cluster / "cluster.toml").write_text(
        f'name = "t"\n[[agents]]\nname = "ws"\nworkspace = "{repo}"\n'
    )
    return attributed(cluster, verdict, timeout=timeout)


def test_the_last_recorded_write_of_a_file_counts(tmp_path: Path) -> None:
    cluster, path = tmp_path / "cluster", tmp_path / "lib.py"
    for i in range(400):  # past the record's size: it starts over, the last write stays
        path.write_text(f"v = {i}\n")
        who = Write((), f"s{i}", None, None, "claude", str(tmp_path), float(i))
        history.note_write(cluster, "ws:file/lib.py", path, who)
        assert history.last_write(cluster, "ws:file/lib.py") == dataclasses.replace(
            who, hashes=history.hashes(f"v = {i}\n".encode())
        )
    [record] = (cluster / "run" / "writes").iterdir()
    assert record.stat().st_size <= history.MAX_WRITES_BYTES
    path.unlink()
    history.note_write(cluster, "ws:file/lib.py", path, who)  # a deletion
    deleted = history.last_write(cluster, "ws:file/lib.py")
    assert deleted is not None and deleted.hashes == (MISSING,)
    assert history.last_write(cluster, "ws:file/other.py") is None


def test_kept_content_is_readable_by_this_user_only(tmp_path: Path) -> None:
    secret = tmp_path / ".env"
    secret.write_text("TOKEN=abc\n")
    secret.chmod(0o600)
    [name, _] = history.keep(tmp_path / "cluster", secret)
    [kept] = [
        p for p in (tmp_path / "cluster" / "run" / "contents").iterdir() if name[4:] in p.name
    ]
    assert kept.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "cluster" / "run" / "contents").stat().st_mode & 0o777 == 0o700
