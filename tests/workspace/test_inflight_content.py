"""No lost update through the in-flight window (issue 28, W1): a write let through whose
PostToolUse never comes (the tool failed) leaves a note; another process's change to that
file is not the session's own, so the session's next write exits 2. Only the change the call
makes (a Write's content, an Edit's new text in place of the old) is taken for its own, as
it lands before its PostToolUse. Real hook processes against a real workspace owner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from planfence_net.workspace.model.outcome import ABSENT, digest, made
from support.auto_hook import AUTO, claude
from support.workspace import make_repo, payload, run_hook, served, write

FILES = {"lib.py": "def f():\n    return 1\n", "main.py": "import lib\n"}


def call(repo: Path, event: str, tool: str, tool_input: dict[str, Any], n: int) -> tuple[int, str]:
    return run_hook("claude", claude(event, tool, tool_input, repo, n), *AUTO)


def read(repo: Path, rel: str, n: int) -> None:
    assert call(repo, "PostToolUse", "Read", {"file_path": str(repo / rel)}, n) == (0, "")


def write_main(repo: Path, content: str, n: int) -> tuple[int, str]:
    return call(
        repo, "PreToolUse", "Write", {"file_path": str(repo / "main.py"), "content": content}, n
    )


def test_another_process_change_in_the_window_of_a_call_that_never_landed_blocks(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        read(repo, "main.py", 0)
        assert write_main(repo, "mine\n", 1) == (0, "")  # its tool fails: no PostToolUse
        write(repo, {"main.py": "theirs\n"})  # another process, seconds later
        code, reason = write_main(repo, "mine again\n", 2)
        assert code == 2, "a lost update: another process's write taken for the session's own"
        assert "- 1 previously inspected file changed: main.py" in reason


def test_the_change_a_call_makes_is_its_own_before_its_post_tool_use(tmp_path: Path) -> None:
    """Parallel calls: a Write and an Edit let through have landed, their PostToolUse hooks
    not yet run; the next write of the plan passes (its targets hold what the calls made),
    until one of them is changed by someone else."""
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        read(repo, "main.py", 0)
        read(repo, "lib.py", 1)
        assert write_main(repo, "mine\n", 2) == (0, "")
        edit = {
            "file_path": str(repo / "lib.py"),
            "old_string": "return 1",
            "new_string": "return 2",
        }
        assert call(repo, "PreToolUse", "Edit", edit, 3) == (0, "")
        write(repo, {"main.py": "mine\n", "lib.py": "def f():\n    return 2\n"})  # they land
        other = {"file_path": str(repo / "new.py"), "content": "x\n"}
        assert call(repo, "PreToolUse", "Write", other, 4) == (0, "")
        write(repo, {"lib.py": "def f():\n    return 3\n"})  # not the Edit's text
        code, reason = call(repo, "PreToolUse", "Write", other, 5)
        assert code == 2 and "lib.py" in reason


def test_a_call_the_client_reports_failed_is_no_longer_in_flight(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    notes = repo / ".planfence" / "run"
    with served(repo):
        read(repo, "main.py", 0)
        content = {"file_path": str(repo / "main.py"), "content": "mine\n"}
        assert call(repo, "PreToolUse", "Write", content, 1) == (0, "")
        assert len(list(notes.glob("inflight-*/*.json"))) == 1
        failure = {**payload("claude-read", repo), "session_id": "another session"}
        failure.update(
            hook_event_name="PostToolUseFailure",
            tool_name="Write",
            tool_input=content,
            tool_use_id="toolu_0001",
            error="EACCES",
        )
        assert run_hook("claude", failure, *AUTO)[0] == 0
        assert len(list(notes.glob("inflight-*/*.json"))) == 1  # not that session's call
        own = {**failure, "session_id": payload("claude-read", repo)["session_id"]}
        assert run_hook("claude", own, *AUTO) == (0, "")
        assert list(notes.glob("inflight-*/*.json")) == []


@pytest.mark.parametrize(
    ("tool", "tool_input", "before", "after"),
    [
        ("Write", {"content": "x\n"}, b"old", b"x\n"),
        ("Edit", {"old_string": "a", "new_string": "b"}, b"xay", b"xby"),
        ("Edit", {"old_string": "a", "new_string": "b", "replace_all": True}, b"aa", b"bb"),
        ("Edit", {"old_string": "", "new_string": "new"}, None, b"new"),
        (
            "MultiEdit",
            {
                "edits": [
                    {"old_string": "a", "new_string": "b"},
                    {"old_string": "b", "new_string": "c"},
                ]
            },
            b"a",
            b"c",
        ),
        (
            "apply_patch",
            {"command": "*** Begin Patch\n*** Add File: f\n+one\n+two\n*** End Patch\n"},
            None,
            b"one\ntwo\n",
        ),
        (
            "apply_patch",
            {"command": "*** Begin Patch\n*** Delete File: f\n*** End Patch\n"},
            b"x",
            None,
        ),
    ],
)
def test_what_a_call_makes(
    tool: str, tool_input: dict[str, Any], before: bytes | None, after: bytes | None
) -> None:
    assert made(tool, tool_input, "f", before) == digest(after)
    assert digest(None) == ABSENT


@pytest.mark.parametrize(
    ("tool", "tool_input", "before"),
    [
        ("Edit", {"old_string": "a", "new_string": "b"}, b"aa"),  # not unique: the tool fails
        ("Edit", {"old_string": "z", "new_string": "b"}, b"aa"),  # not there
        ("Edit", {"old_string": "a", "new_string": "b"}, b"\xff"),  # not text
        ("NotebookEdit", {"new_source": "x"}, b"{}"),
        (
            "apply_patch",
            {"command": "*** Begin Patch\n*** Update File: f\n@@\n-a\n+b\n*** End Patch\n"},
            b"a\n",
        ),
    ],
)
def test_what_cannot_be_said_is_never_taken_for_the_calls_own(
    tool: str, tool_input: dict[str, Any], before: bytes | None
) -> None:
    assert made(tool, tool_input, "f", before) is None
