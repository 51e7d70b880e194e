"""`planfence hook claude|codex`: recorded payloads of both agents block (2) or allow (0);
every failure blocks (2) with a reason on stderr; the hook path imports nothing heavy."""

from __future__ import annotations

import io
import json
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planfence_net.cluster.command import executable
from planfence_net.cluster.folder import ClusterDir
from planfence_net.workspace.hook.run import main as hook_main
from planfence_net.workspace.model.payload import PayloadError, ToolCall, parse_payload
from planfence_net.workspace.plans import check as check_module
from support.cluster import PLANFENCE
from support.workspace import (
    FIXTURES,
    in_process,
    make_repo,
    payload,
    run_cli,
    run_hook,
    served,
    write,
)
from support.writers import without_writers

FILES = {"auth.ts": "export const timeout = 30;\n", "README.md": "# app\n"}
NEVER = (
    "typer",
    "rich",
    "click",
    "matplotlib",
    "anyio",
    "asyncio",
    "aiosqlite",
    "planfence_net.owners",
    "planfence_net.bench",
    "planfence_net.executor.pool",  # the async executor (its blocking runner is the check's)
    "planfence_net.executor.runner",
    "planfence_net.executor.replica",
    "planfence_net.cli.main",
)


# -- payloads (pure) ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "agent", "tool", "files", "command", "gated"),
    [
        ("claude-edit", "claude", "Edit", ("/p/auth.ts",), None, True),
        ("claude-write", "claude", "Write", ("/p/session.ts",), None, True),
        ("claude-bash", "claude", "Bash", (), "npm test -- auth", True),
        ("claude-read", "claude", "Read", (), None, False),
        ("codex-bash", "codex", "Bash", (), "npm test -- auth", True),
        ("codex-apply-patch", "codex", "apply_patch", ("auth.ts", "session.ts"), None, True),
    ],
)
def test_recorded_payloads_map_to_tool_calls(
    name: str, agent: str, tool: str, files: tuple[str, ...], command: str | None, gated: bool
) -> None:
    call = parse_payload(agent, json.dumps(payload(name, Path("/p"))).encode())
    assert (call.agent, call.tool, call.files, call.gated) == (agent, tool, files, gated)
    assert call.cwd == "/p" and call.session
    if command is not None:
        assert call.command == command


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (
            b"{not json",
            "stdin is not JSON: Expecting property name enclosed in double quotes: "
            "line 1 column 2 (char 1)",
        ),
        (b"[]", "stdin is not a JSON object"),
        (
            b'{"hook_event_name": "Stop"}',
            "hook_event_name is 'Stop', not 'PreToolUse' or 'PostToolUse'",
        ),
        (
            b'{"hook_event_name": "PreToolUse", "tool_name": "Edit", "tool_input": {}, "cwd": "/p",'
            b' "session_id": "s"}',
            "Edit call without tool_input.file_path",
        ),
        (
            b'{"hook_event_name": "PreToolUse", "tool_name": "apply_patch", "cwd": "/p",'
            b' "session_id": "s", "tool_input": {"command": "no headers"}}',
            "apply_patch call whose patch names no file",
        ),
    ],
)
def test_malformed_payloads_are_refused(data: bytes, why: str) -> None:
    with pytest.raises(PayloadError) as caught:
        parse_payload("claude", data)
    assert str(caught.value) == why


def test_only_our_own_executable_with_safe_subcommands_is_not_gated(tmp_path: Path) -> None:
    def bash(command: str) -> ToolCall:
        data = payload("claude-bash", tmp_path, command=command)
        return parse_payload("claude", json.dumps(data).encode())

    ours = shlex.quote(executable())
    assert not bash(f"{ours} workspace trust fix --read auth.ts").gated
    assert not bash(f"{ours} workspace check fix").gated
    assert not bash(f"{ours} workspace join").gated
    other = tmp_path / "bin" / "planfence"  # another binary of the same name
    other.parent.mkdir()
    other.write_text("#!/bin/sh\n")
    for command in (
        "planfence workspace trust fix --read auth.ts",  # through PATH, aliases, functions
        f"{other} workspace check fix",
        f"{ours} workspace trust p1 --read a --evidence 'touch pwned'",
        f"{ours} workspace trust p1 --read a --evidence='touch pwned'",
        f"{ours} workspace serve / --listen 0.0.0.0:80",
        f"{ours} workspace join --cluster /tmp/theirs",
        f"{ours} hook uninstall claude",
        f"{ours} hook install codex --trust",
        f"{ours} workspace trust x; rm -rf src",
        f"{ours} workspace trust x $(rm -rf src)",
    ):
        assert bash(command).gated, command


def test_a_changed_call_line_describes_itself() -> None:
    call = parse_payload("codex", json.dumps(payload("codex-apply-patch", Path("/p"))).encode())
    assert call.describe() == "apply_patch of auth.ts, session.ts"


# -- against a real workspace owner ---------------------------------------------------------


def test_the_agents_own_edit_of_a_target_is_recorded_after_the_call(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        code, out, err = run_cli(
            "workspace",
            "trust",
            "fix",
            "--target",
            "auth.ts",
            "--evidence",
            "grep -q timeout auth.ts",
            cwd=repo,
        )
        assert code == 0, out + err
        for agent, pre, post in (
            ("claude", "claude-edit", "claude-post-edit"),
            ("codex", "codex-apply-patch", "codex-post-apply-patch"),
        ):
            assert run_hook(agent, payload(pre, repo)) == (0, "")
            write(repo, {"auth.ts": f"export const timeout = 60; // {agent}\n"})  # the call
            assert run_hook(agent, payload(post, repo)) == (0, "")
            # Its own edit is no drift (a Bash call: checked against every key, never noted
            # as an edit in flight).
            assert run_hook(agent, payload(f"{agent}-bash", repo)) == (0, "")
        code, out, _ = run_cli("workspace", "check", "fix", "--json", cwd=repo)
        report = json.loads(out)
        assert (code, report["class"], report["trust"]) == (0, "none", 1)  # not a replan
        write(repo, {"auth.ts": "export const timeout = 1;\n"})  # someone else's edit
        code, reason = run_hook("claude", payload("claude-edit", repo))
        assert code == 2 and "- 1 file the plan will modify changed: auth.ts\n" in reason


def test_recorded_payloads_block_on_drift_and_allow_otherwise(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        code, out, err = run_cli(
            "workspace",
            "trust",
            "fix",
            "--read",
            "auth.ts",
            "--lockfiles",
            "none",
            cwd=repo,
        )
        assert code == 0, out + err
        calls = {
            name: payload(name, repo)
            for name in (
                "claude-edit",
                "claude-write",
                "claude-bash",
                "claude-read",
                "codex-bash",
                "codex-apply-patch",
            )
        }
        for name, call in calls.items():
            assert run_hook(name.split("-")[0], call) == (0, ""), name
        before = len(requests(repo, 0))
        assert run_hook("claude", calls["claude-edit"]) == (0, "")
        # The plan and its lineage are cached: a call is one heads round trip, plan included.
        assert requests(repo, before + 1)[before:] == [
            ("heads", sorted(["plan/fix", "ws:branch", "ws:file/auth.ts", "ws:head", "ws:repo"]))
        ]
        write(repo, {"auth.ts": "export const timeout = 5;\n"})
        for name, call in calls.items():
            code, reason = run_hook(name.split("-")[0], call)
            if name == "claude-read":
                assert (code, reason) == (0, "")  # reading changes nothing: never gated
                continue
            assert code == 2, name
            assert without_writers(reason).splitlines()[1:] == [
                "Workspace drift detected since the previous trusted state:",
                "- 1 previously inspected file changed: auth.ts",
                "Re-read auth.ts, then replan once and record the new state with "
                f"`{PLANFENCE} workspace trust fix ...`. If it changes again, stop and report.",
            ]
        assert run_hook("codex", calls["codex-apply-patch"])[1].startswith(
            "PlanFence blocked apply_patch of auth.ts, session.ts: plan 'fix' is stale "
            "(relevant drift)."
        )
        retrust = payload(
            "claude-bash", repo, command=f"{PLANFENCE} workspace trust fix --read auth.ts"
        )
        assert run_hook("claude", retrust) == (0, "")


def requests(repo: Path, count: int) -> list[tuple[str, list[str]]]:
    """The owner's logged requests, (op, sorted keys), once there are at least `count` (the
    owner logs a request after answering it, so this tails its log for a while)."""
    deadline = time.monotonic() + 10
    while True:
        lines = (repo / ".planfence" / "logs" / "ws.jsonl").read_text().splitlines()
        found = [
            (e["op"], sorted(e["keys"])) for e in map(json.loads, lines) if e["event"] == "request"
        ]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.01)  # tailing a file another process appends to


@pytest.mark.parametrize(
    ("stdin", "args", "reason"),
    [
        (
            b"{not json",
            (),
            "PlanFence blocked this call: unreadable hook input (stdin is not "
            "JSON: Expecting property name enclosed in double quotes: line 1 "
            "column 2 (char 1))",
        ),
        (
            b"",
            (),
            "PlanFence blocked this call: unreadable hook input (stdin is not JSON: "
            "Expecting value: line 1 column 1 (char 0))",
        ),
        (
            None,
            ("--plan",),
            "PlanFence blocked this call: the hook failed (ValueError: usage: "
            "planfence hook CLIENT [--cluster DIR] [--plan NAME] [--as "
            "AGENT] [--timeout SECONDS] [--scope user|project] [--mode auto|explicit]); "
            "it fails closed",
        ),
    ],
)
def test_failures_block_with_a_reason(
    tmp_path: Path, stdin: bytes | None, args: tuple[str, ...], reason: str
) -> None:
    data = stdin if stdin is not None else payload("claude-edit", tmp_path)
    assert run_hook("claude", data, *args) == (2, reason + "\n")


def test_no_cluster_no_plan_and_owner_down_block(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    call = payload("claude-edit", repo)
    code, reason = run_hook("claude", call, "--cluster", str(tmp_path / "nowhere"))
    assert code == 2 and reason.startswith("PlanFence blocked Edit of ")
    assert f"no roster at {tmp_path}/nowhere/cluster.toml" in reason
    with served(repo):
        code, reason = run_hook("claude", call)
        assert code == 2 and "no trusted plan for this session" in reason
        assert run_cli("workspace", "trust", "fix", "--read", "auth.ts", cwd=repo)[0] == 0
    code, reason = run_hook("claude", call)  # the owner is down now
    assert (code, reason) == (
        2,
        f"PlanFence blocked Edit of {repo}/auth.ts: cannot validate "
        f"plan 'fix': owner 'ws': owner unavailable. The call is "
        f"blocked because the plan cannot be checked (it fails "
        f"closed); report this to the user if it persists.\n",
    )


def test_an_owner_that_never_answers_times_out_and_blocks(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert run_cli("workspace", "trust", "fix", "--read", "auth.ts", cwd=repo)[0] == 0
    port = ClusterDir(repo / ".planfence").roster().agent("ws").port
    with socket.create_server(("127.0.0.1", port)):  # accepts connections, never answers
        code, reason = run_hook("claude", payload("claude-edit", repo), "--timeout", "0.4")
    assert (code, reason) == (
        2,
        f"PlanFence blocked Edit of {repo}/auth.ts: cannot validate "
        f"plan 'fix': owner 'ws': timeout. The call is blocked "
        f"because the plan cannot be checked (it fails closed); "
        f"report this to the user if it persists.\n",
    )


def test_a_raise_inside_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert run_cli("workspace", "trust", "fix", "--read", "auth.ts", cwd=repo)[0] == 0

        def broken(*args: object, **kwargs: object) -> None:
            raise RuntimeError("injected")

        monkeypatch.setattr(check_module, "run_check", broken)
        err = io.StringIO()
        stdin = io.BytesIO(json.dumps(payload("claude-edit", repo)).encode())
        assert hook_main("claude", [], stdin, err) == 2
        assert err.getvalue() == (
            "PlanFence blocked this call: the hook failed "
            "(RuntimeError: injected); it fails closed\n"
        )


def test_the_hook_path_imports_nothing_heavy(tmp_path: Path) -> None:
    """The in-process hook (no owner socket; the fast path's imports: test_hookd.py)."""
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo), in_process(repo):
        assert run_cli("workspace", "trust", "fix", "--read", "auth.ts", cwd=repo)[0] == 0
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", str(PLANFENCE), "hook", "claude"],
            input=json.dumps(payload("claude-edit", repo)).encode(),
            capture_output=True,
            timeout=30,
        )
    assert proc.returncode == 0
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.decode().splitlines()
        if line.startswith("import time:")
    }
    assert "planfence_net.net.syncclient" in modules  # it did check, over the network
    assert sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in NEVER)) == []


def test_fixtures_are_the_documented_shape() -> None:
    for path in sorted(FIXTURES.glob("*.json")):
        value = json.loads(path.read_text())
        assert {
            "session_id",
            "transcript_path",
            "cwd",
            "hook_event_name",
            "tool_name",
            "tool_input",
        } <= value.keys(), path.name
        assert value["hook_event_name"] in ("PreToolUse", "PostToolUse")
        assert ("tool_response" in value) == (value["hook_event_name"] == "PostToolUse")


def test_powershell_mcp_and_subagent_fields() -> None:
    def parse(**fields: object) -> ToolCall:
        data = {**payload("claude-bash", Path("/p")), **fields}
        return parse_payload("claude", json.dumps(data).encode())

    shell = parse(tool_name="PowerShell", tool_input={"command": "Set-Content a.txt x"})
    assert (shell.gated, shell.describe()) == (True, "PowerShell `Set-Content a.txt x`")
    retrust = parse(
        tool_name="PowerShell", tool_input={"command": f"{PLANFENCE} workspace trust fix"}
    )
    assert not retrust.gated
    mcp = parse(tool_name="mcp__fs__write_file", tool_input={"path": "a.txt"})
    assert (mcp.gated, mcp.unknown, mcp.files, mcp.describe()) == (
        True,
        True,
        (),
        "mcp__fs__write_file",
    )
    sub = parse(agent_id="a81f3c", agent_type="Explore")
    assert (sub.agent_id, sub.agent_type, sub.tool_use_id) == (
        "a81f3c",
        "Explore",
        "toolu_01CDEFGH4567JKLMNPQRSTUV",
    )
    assert sub.subagent() == " (subagent a81f3c, Explore)" and parse().subagent() == ""
    start = parse_payload(
        "claude", json.dumps({"hook_event_name": "SessionStart", "cwd": "/p"}).encode()
    )
    assert (start.event, start.gated) == ("SessionStart", False)
