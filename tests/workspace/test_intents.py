"""Intents across a team: two sessions in two worktrees of one repository plan the same file.
The owners run as real processes on 127.0.0.1 (`cluster init --workspace`, `cluster up`);
the hook is a fresh `planfence hook claude` process fed the sessions' payloads."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from planfence_net.core.errors import RequestError
from planfence_net.net.syncclient import SyncSessions
from planfence_net.workspace.owner.daemon import TEST_CLOCK, lease_clock
from support.cluster import ClusterHandle, wait_exit
from support.team import A, B, trust
from support.workspace import payload, quiet, run_cli, run_hook_output, served_team


def write_call(root: Path, session: str, rel: str = "src/lib.py") -> dict[str, Any]:
    call = payload("claude-write", root, file_path=str(root / rel))
    call["session_id"] = session
    return call


def hook(handle: ClusterHandle, data: dict[str, Any]) -> tuple[int, str, str]:
    return run_hook_output("claude", data, "--cluster", str(handle.path))


def context(stdout: str) -> str:
    """The text the agent adds to the model's context (PreToolUse JSON on exit 0)."""
    value = json.loads(stdout)
    assert value["hookSpecificOutput"]["hookEventName"] == "PreToolUse"
    assert set(value["hookSpecificOutput"]) == {"hookEventName", "additionalContext"}
    text: str = value["hookSpecificOutput"]["additionalContext"]
    return text


def test_the_second_session_sees_the_first_ones_intent_before_its_first_write(
    team: tuple[ClusterHandle, Path, Path],
) -> None:
    handle, api, web = team
    trust(handle, api, "parser", A, "--read", "src/other.py", "--target", "src/lib.py")
    assert hook(handle, write_call(api, A)) == (0, "", "")  # nobody else intends it
    # (A's hook named its intent with the agent: claude)

    lines = trust(handle, web, "lexer", B, "--target", "src/lib.py")
    assert lines[1] == (
        f"plan 'parser' (claude session aaaaaaaa) in {api} also intends to change web:src/lib.py "
        f"(intent until {_until(lines[1])}). Coordinate: your edits and theirs meet at merge "
        f"time."
    )
    assert lines[2].startswith("intent published: web:src/lib.py until ")
    # Before B's first write the hook asks every owner and shows the model A's intent; the
    # next write of the same file asks nobody.
    code, out, err = hook(handle, write_call(web, B))
    assert (code, err) == (0, "")
    text = context(out)
    assert text.startswith(
        f"PlanFence: plan 'parser' (claude session aaaaaaaa) in {api} also intends to change "
        f"{web}/src/lib.py (intent until "
    ), text
    asked = len(handle.events("api", "request"))
    assert hook(handle, write_call(web, B)) == (0, "", "")
    assert len(handle.events("api", "request")) == asked  # announced: no request at all


def test_an_exclusive_target_blocks_other_plans_until_the_session_ends(
    team: tuple[ClusterHandle, Path, Path],
) -> None:
    handle, api, web = team
    lines = trust(handle, api, "parser", A, "--exclusive", "src/lib.py")
    assert lines[1].startswith("intent published (exclusive): api:src/lib.py until ")
    lines = trust(handle, web, "lexer", B, "--target", "src/lib.py")
    assert lines[1].startswith(
        f"web:src/lib.py is held exclusively by plan 'parser' (session aaaaaaaa) in {api} until "
    ), lines
    assert not [line for line in lines if line.startswith("intent")]  # nothing published
    code, out, err = hook(handle, write_call(web, B))
    assert (code, out) == (2, "")
    assert err.startswith(
        f"PlanFence blocked Write of {web}/src/lib.py: {web}/src/lib.py is held exclusively by "
        f"plan 'parser' (session aaaaaaaa) in {api} until "
    ), err
    # B cannot take exclusivity either, and says why, writing nothing.
    code, out, err = run_cli(
        "workspace", "trust", "lexer", "--cluster", handle.path, "--session", B,
        "--exclusive", "src/lib.py", cwd=web,
    )  # fmt: skip
    assert code == 1 and quiet(err).startswith(
        f"error: --exclusive web:src/lib.py: plan 'parser' (session aaaaaaaa) in {api} already "
        f"intends it exclusively (until "
    ), err
    # A's own writes go on; A's session ends (Claude Code's SessionEnd): B may write.
    assert hook(handle, write_call(api, A)) == (0, "", "")
    end = {"session_id": A, "cwd": str(api), "hook_event_name": "SessionEnd", "reason": "other"}
    assert hook(handle, end) == (0, "", "")
    assert hook(handle, write_call(web, B)) == (0, "", "")
    puts = [e for e in handle.events("api", "put") if "intent/" in e["key"]]
    # published at trust (exclusive, citing the plan), named with its agent by A's first write,
    # ended at SessionEnd: one key, each record citing the one before it
    assert len({e["key"] for e in puts}) == 1 and [e["kind"] for e in puts] == ["intent"] * 3
    assert [e["parents"][:1] for e in puts[1:]] == [[puts[0]["id"]], [puts[1]["id"]]]


@pytest.fixture
def skewed_team(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[ClusterHandle, Path, Path, Path]]:
    """`team`, its owners reading leases on a clock the test moves: the seconds written to
    the fourth item are added to their wall clock (the owners' test hook, `lease_clock`)."""
    skew = tmp_path / "clock-skew"
    monkeypatch.setenv(TEST_CLOCK, str(skew))
    with served_team(tmp_path, {"src/lib.py": "v = 1\n", "src/other.py": "w = 1\n"}) as team:
        yield (*team, skew)


def test_an_exclusive_intent_ends_with_its_lease(
    skewed_team: tuple[ClusterHandle, Path, Path, Path],
) -> None:
    handle, api, web, skew = skewed_team
    trust(handle, api, "parser", A, "--exclusive", "src/lib.py", "--lease", "600")
    trust(handle, web, "lexer", B, "--target", "src/lib.py")
    assert hook(handle, write_call(web, B))[0] == 2
    skew.write_text("300")  # the owners' clock 5 minutes on: the lease still runs
    assert hook(handle, write_call(web, B))[0] == 2
    skew.write_text("3600")  # an hour on: the lease ran out
    assert hook(handle, write_call(web, B)) == (0, "", "")


def test_the_lease_clock_is_the_wall_clock_unless_a_test_moves_it(tmp_path: Path) -> None:
    assert lease_clock({}) is time.time
    skew = tmp_path / "skew"
    clock = lease_clock({TEST_CLOCK: str(skew)})
    assert abs(clock() - time.time()) < 60  # no file yet: no skew
    skew.write_text("86400")
    assert 86400 - 60 < clock() - time.time() < 86400 + 60


def test_exclusivity_is_refused_while_an_owner_cannot_be_asked(
    team: tuple[ClusterHandle, Path, Path],
) -> None:
    handle, api, web = team
    stop_owner(handle, "web")
    code, out, err = run_cli(
        "workspace", "trust", "parser", "--cluster", handle.path, "--session", A,
        "--exclusive", "src/lib.py", cwd=api,
    )  # fmt: skip
    assert code == 1
    assert quiet(err).startswith(
        "error: --exclusive api:src/lib.py: cannot grant exclusivity while an owner of the team "
        "cannot be asked for its intents (web: cannot connect to web at 127.0.0.1:"
    ), err
    assert not [e for e in handle.events("planner", "put")]  # nothing was written
    # A plain write goes on, and the model is told what could not be seen.
    trust(handle, api, "parser", A, "--target", "src/lib.py")
    code, out, err = hook(handle, write_call(api, A))
    assert (code, err) == (0, ""), err
    assert context(out).startswith(
        f"PlanFence: could not ask web for intents on {api}/src/lib.py (cannot connect to web "
    )


def stop_owner(handle: ClusterHandle, name: str) -> None:
    """SIGTERM the owner of `name` and wait until it exited: a clean stop, so a hook socket
    it served is gone (a killed one's stays behind, and the hook then blocks on it)."""
    pid = handle.owner_pid(name)
    os.kill(pid, signal.SIGTERM)
    assert wait_exit(pid) and not handle.alive(name)


def _until(line: str) -> str:
    return line.split("(intent until ", 1)[1].split(")", 1)[0]


def test_only_the_owner_writes_intents_and_their_paths_stay_in_the_worktree(
    team: tuple[ClusterHandle, Path, Path],
) -> None:
    handle, api, _ = team
    sessions = SyncSessions(handle.roster, handle.identity("api"))  # the owner's own identity
    deadline = time.monotonic() + 10
    key = "api:intent/000000000000/src/lib.py"
    bad = [
        ("put", {"key": key, "kind": "intent", "parents": [], "body": {"ended": True}}),
        ("intend", {"plan": "p", "files": ["../x"], "exclusive": False, "lease": 60.0}),
        ("intend", {"plan": "p", "files": ["/etc/passwd"], "exclusive": False, "lease": 60.0}),
        ("intend", {"plan": "p", "files": ["src/lib.py"], "exclusive": False, "lease": 0.5}),
        ("unintend", {}),
    ]
    try:
        codes = []
        for op, args in bad:
            with pytest.raises(RequestError) as refused:
                sessions.request("api", op, args, deadline)
            codes.append(refused.value.code)
    finally:
        sessions.close()
    assert codes == ["forbidden", "bad_request", "bad_request", "bad_request", "bad_request"]
    assert not [e for e in handle.events("api", "put") if "intent/" in e["key"]]


def test_a_session_end_that_cannot_reach_an_owner_never_blocks(
    team: tuple[ClusterHandle, Path, Path],
) -> None:
    handle, api, _ = team
    trust(handle, api, "parser", A, "--target", "src/lib.py")
    handle.kill9("web")
    end = {"session_id": A, "cwd": str(api), "hook_event_name": "SessionEnd", "reason": "other"}
    assert hook(handle, end) == (
        0,
        "",
        "PlanFence could not end this session's intents at web; their lease ends them\n",
    )
    # api's intents of the session did end
    puts = [e for e in handle.events("api", "put") if "intent/" in e["key"]]
    assert len(puts) == 2 and puts[1]["parents"] == [puts[0]["id"]]


def test_a_session_end_where_no_cluster_serves_says_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    end = {"session_id": A, "cwd": str(folder), "hook_event_name": "SessionEnd", "reason": "x"}
    assert run_hook_output("claude", end, "--scope", "user") == (0, "", "")


def test_the_agent_cannot_forge_another_sessions_end_through_its_shell(
    team: tuple[ClusterHandle, Path, Path],
) -> None:
    """`planfence hook claude` fed a SessionEnd of session A would end A's exclusive intent:
    from B's shell that is blocked, as `hook install|uninstall` is; a commit message naming
    the hook is not a hook command."""
    from planfence_net.cluster.command import executable

    handle, api, web = team
    trust(handle, api, "parser", A, "--exclusive", "src/lib.py")
    trust(handle, web, "lexer", B, "--target", "src/other.py")  # B's shell commands may run
    end = {"session_id": A, "cwd": str(api), "hook_event_name": "SessionEnd", "reason": "other"}
    forged = f"echo '{json.dumps(end)}' | {executable()} hook claude --cluster {handle.path}"

    def shell(command: str) -> tuple[int, str, str]:
        call = payload("claude-bash", web, command=command)
        call["session_id"] = B
        return hook(handle, call)

    for command in (forged, "planfence_net=1 python -m planfence_net hook 'codex' < end.json"):
        code, out, err = shell(command)
        assert (code, out) == (2, ""), err
        assert err.startswith("PlanFence blocked Bash `") and err.endswith(
            f"`: `planfence hook {'claude' if command == forged else 'codex'}` is run by the "
            f"agent's client (or git) and the user, never from the agent's shell. Do not try "
            f"another way; ask the user.\n"
        ), err
    code, _, err = shell(f"{executable()} hook uninstall claude")
    assert code == 2 and "`planfence hook uninstall`" in err, err
    assert shell("git commit -m 'planfence: hook install docs'") == (0, "", "")
    assert hook(handle, write_call(web, B))[0] == 2  # A still holds src/lib.py
