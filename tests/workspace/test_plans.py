"""`workspace plans` and `workspace show`: the plans the owners hold (real owner processes on
127.0.0.1), and a plan's history from the owners' logs: its trusts, the edits the hook
recorded, and every check, allowed or blocked."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cluster import ClusterHandle
from support.workspace import (
    make_repo,
    payload,
    quiet,
    run_cli,
    run_hook,
    served,
    served_team,
    write,
)

SESSION = "9f2c6a1e-4b7d-4e0a-9c55-2f1d8e7b3a10"  # the recorded payloads' session
FILES = {"auth.ts": "export const timeout = 30;\n", "lib.ts": "export {};\n", "README.md": "#\n"}
STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
T = "YYYY-MM-DD HH:MM:SS"


def cli(repo: Path, *args: object) -> tuple[int, str, str]:
    code, out, err = run_cli(*args, cwd=repo)
    return code, out, quiet(err)


def ok_json(repo: Path, *args: object) -> dict:
    code, out, err = cli(repo, *args, "--json")
    assert (code, err) == (0, ""), out + err
    return json.loads(out)


def test_plans_and_their_history_of_trusts_edits_and_checks(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        docs = ok_json(repo, "workspace", "trust", "docs", "--read", "README.md")
        trusted = ok_json(
            repo,
            "workspace",
            "trust",
            "auth-fix",
            "--session",
            SESSION,
            "--read",
            "lib.ts",
            "--target",
            "auth.ts",
            "--lockfiles",
            "none",
        )
        listed = ok_json(repo, "workspace", "plans")
        times = [row.pop("time") for row in listed["plans"]]
        assert all(isinstance(t, float) for t in times)
        assert listed == {
            "plans": [
                {
                    "plan": "auth-fix",
                    "owner": "ws",
                    "record": trusted["id"],
                    "seq": trusted["seq"],
                    "current": False,
                    "session": SESSION,
                    "agent": None,
                    "worktrees": {"ws": str(repo)},
                    "reads": 1,
                    "targets": 1,
                    "evidence": 0,
                    "lockfiles": 0,
                    "trust": 1,
                    "replans": 0,
                    "advanced": 0,
                    "from": None,
                    "last_check": None,
                },
                {
                    "plan": "docs",
                    "owner": "ws",
                    "record": docs["id"],
                    "seq": docs["seq"],
                    "current": True,
                    "session": None,
                    "agent": None,
                    "worktrees": {"ws": str(repo)},
                    "reads": 1,
                    "targets": 0,
                    "evidence": 0,
                    "lockfiles": 0,
                    "trust": 1,
                    "replans": 0,
                    "advanced": 0,
                    "from": None,
                    "last_check": None,
                },
            ],
            "unreachable": {},
        }
        edit = payload("claude-edit", repo)
        assert run_hook("claude", edit) == (0, "")  # allowed, noted in flight
        write(repo, {"auth.ts": "export const timeout = 60;\n"})  # the Edit itself
        assert run_hook("claude", payload("claude-post-edit", repo)) == (0, "")  # advance
        write(repo, {"lib.ts": "export const changed = 1;\n"})  # someone else's edit
        code, reason = run_hook("claude", edit)
        assert code == 2 and "plan 'auth-fix' is stale (relevant drift)" in reason
        assert cli(repo, "workspace", "check", "auth-fix")[0] == 2

        (plan, _) = ok_json(repo, "workspace", "plans")["plans"]
        assert (plan["advanced"], plan["trust"], plan["replans"]) == (1, 1, 0)
        assert {k: v for k, v in plan["last_check"].items() if k != "time"} == {
            "class": "relevant",
            "exit": 2,
            "outcome": "failed",
            "source": "cli",
            "session": None,
            "tool": None,
        }
        shown = ok_json(repo, "workspace", "show", "auth-fix")
        assert (shown["plan"], shown["owner"], shown["unreachable"]) == ("auth-fix", "ws", {})
        history = shown["history"]
        assert [(h["event"], h.get("class"), h.get("source")) for h in history] == [
            ("trust", None, None),
            ("allowed", "none", "hook"),
            ("advance", None, None),
            ("blocked", "relevant", "hook"),
            ("failed", "relevant", "cli"),
        ]
        assert history[0] | {"time": 0} == {
            "time": 0,
            "event": "trust",
            "seq": trusted["seq"],
            "record": trusted["id"],
            "trust": 1,
            "advanced": 0,
            "session": SESSION,
            "subagent": None,
            "reads": 1,
            "targets": 1,
            "evidence": 0,
            "from": None,
        }
        assert history[3] | {"time": 0} == {
            "time": 0,
            "event": "blocked",
            "class": "relevant",
            "exit": 2,
            "source": "hook",
            "session": SESSION,
            "subagent": None,
            "tool": "Edit",
            "files": ["auth.ts"],
            "trust": 1,
            "changed_again": False,
            "reread": ["lib.ts"],
            "lines": [
                "Workspace drift detected since the previous trusted state:",
                "- 1 previously inspected file changed: lib.ts",
            ],
            "detail": "",
        }
        code, out, err = cli(repo, "workspace", "show", "auth-fix")
        assert (code, err) == (0, "")
        assert [STAMP.sub(T, line.rstrip()) for line in out.splitlines()] == [
            "time                 event    class     by                  detail",
            f"{T}  trust    -         9f2c6a1e            trust 1: 1 read, 1 target, 0 evidence",
            f"{T}  allowed  none      hook 9f2c6a1e Edit  auth.ts",
            f"{T}  advance  -         9f2c6a1e            edits recorded: 1",
            f"{T}  blocked  relevant  hook 9f2c6a1e Edit  auth.ts; re-read lib.ts",
            f"{T}  failed   relevant  cli                 re-read lib.ts",
        ]
        # a replan: trust 2, and the plans table says so
        ok_json(
            repo,
            "workspace",
            "trust",
            "auth-fix",
            "--session",
            SESSION,
            "--read",
            "lib.ts",
            "--target",
            "auth.ts",
            "--lockfiles",
            "none",
        )
        code, out, err = cli(repo, "workspace", "plans")
        assert (code, err) == (0, "")
        assert [STAMP.sub(T, line.rstrip()) for line in out.splitlines()] == [
            "plan      session   agent  worktree  reads  targets  evidence  trust  replans  "
            "last check                  class",
            f"auth-fix  9f2c6a1e  -      ws        1      1        0         2      1        "
            f"{T} failed  relevant",
            "docs *    -         -      ws        1      0        0         1      0        -"
            "                           -",
        ]


@pytest.fixture
def team(tmp_path: Path) -> Iterator[tuple[ClusterHandle, Path]]:
    """A planner (plan/*) and the workspace owners `api` and `web`, as real processes."""
    with served_team(tmp_path, {"a.ts": "1\n"}, {"w.ts": "2\n"}) as (handle, api, _):
        yield handle, api


def test_an_unreachable_owner_is_named_and_the_others_listed(
    team: tuple[ClusterHandle, Path],
) -> None:
    handle, api = team
    where = ("--cluster", handle.path)
    code, out, err = cli(
        api,
        "workspace",
        "trust",
        "p",
        "--read",
        "api:a.ts",
        "--read",
        "web:w.ts",
        "--lockfiles",
        "none",
        *where,
    )
    assert code == 0, out + err
    (plan,) = ok_json(api, "workspace", "plans", *where)["plans"]
    assert (plan["owner"], plan["worktrees"]) == (
        "planner",
        {"api": str(api), "web": str(handle.path.parent / "web")},
    )
    handle.kill9("web")
    listed = ok_json(api, "workspace", "plans", *where)
    assert [p["plan"] for p in listed["plans"]] == ["p"]
    assert list(listed["unreachable"]) == ["web"]
    assert listed["unreachable"]["web"].startswith("owner web: cannot connect to 127.0.0.1:")
    code, out, err = cli(api, "workspace", "plans", *where)
    assert code == 0
    assert err.startswith("warning: could not ask owner web: owner web: cannot connect to ")
    assert len(err.splitlines()) == 1 and out.splitlines()[1].startswith("p ")
    # the planner gone: no plan can be listed, and show says it could not fetch the records
    handle.kill9("planner")
    assert ok_json(api, "workspace", "plans", *where)["plans"] == []
    shown = ok_json(api, "workspace", "show", "p", *where)
    assert [h["event"] for h in shown["history"]] == ["record"]
    assert list(shown["unreachable"]) == ["planner"]


def test_show_of_a_plan_never_trusted_or_checked_says_so(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        code, out, err = cli(repo, "workspace", "show", "nope")
        assert (code, out, err) == (
            1,
            "",
            f"error: no trust or check of plan 'nope' in the logs of {repo}/.planfence/logs\n",
        )
        assert cli(repo, "workspace", "plans") == (0, "no plans\n", "")
        # a damaged log line is skipped; a put line whose id is not hex is shown as a record
        with open(repo / ".planfence" / "logs" / "ws.jsonl", "a") as log:
            log.write('not json\n{"ts":1.0,"event":"put","key":"plan/nope","id":"zz","seq":3}\n')
        shown = ok_json(repo, "workspace", "show", "nope")
        assert [(h["event"], h["seq"], h["record"]) for h in shown["history"]] == [
            ("record", 3, None)
        ]


def test_a_blocked_agent_may_run_plans_and_show(tmp_path: Path) -> None:
    """Both only read: the hook lets them through like `workspace check`, when plain."""
    import shlex

    from planfence_net.cluster.command import executable
    from planfence_net.workspace.model.payload import parse_payload

    def gated(command: str) -> bool:
        data = payload("claude-bash", tmp_path, command=command)
        return parse_payload("claude", json.dumps(data).encode()).gated

    ours = shlex.quote(executable())
    assert not gated(f"{ours} workspace plans --json")
    assert not gated(f"{ours} workspace show auth-fix")
    assert gated(f"{ours} workspace show auth-fix; rm -rf src")
    assert gated("planfence workspace plans")  # a bare name: the shell decides what runs
