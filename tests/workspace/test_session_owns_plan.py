"""Sessions own their plans: an agent never moves another session onto a plan of its choosing.

Against a real `workspace serve` owner: the same forbidden request (trust a decoy plan for
another session) through every front door (the hook screening an agent's shell command in
every spelling, the CLI run from Claude Code's and from Codex's shell, the MCP server's
`trust` tool) ends in the same refusal, written by `plans.access`; the victim keeps its plan,
and its write after its read drifts is still blocked (issue 28, H2).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.server.mcpserver.exceptions import ToolError

from planfence_net.cluster.folder import ClusterDir
from planfence_net.core.errors import ConfigError
from planfence_net.mcp.serve import build_server
from planfence_net.workspace.place.config import bound_plan
from planfence_net.workspace.plans.access import (
    GRANT_TIMEOUT,
    Caller,
    Refused,
    authorize,
    grant,
    not_yours,
    person_only,
    shell_refusal,
    take_grant,
)
from support.cluster import PLANFENCE
from support.workspace import (
    in_process,
    make_repo,
    payload,
    quiet,
    run_cli,
    run_hook,
    served,
    write,
)

VICTIM, ATTACKER = "victim-7f3a", "attacker-19c2"
FILES = {"README.md": "hello\n", "src/a.py": "a = 1\n", "src/b.py": "b = 1\n"}
REFUSAL = not_yours("workspace trust", VICTIM)
MCP_ERROR = "Error executing tool trust: "
DECOY = ("workspace", "trust", "decoy", "--read", "README.md", "--lockfiles", "none")


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    """A served worktree whose session VICTIM works under its own plan `mine` (read
    src/a.py, will change src/b.py), trusted by the person."""
    root = make_repo(tmp_path / "repo", FILES)
    with served(root):
        code, out, err = run_cli(
            "workspace",
            "trust",
            "mine",
            "--read",
            "src/a.py",
            "--target",
            "src/b.py",
            "--lockfiles",
            "none",
            "--session",
            VICTIM,
            cwd=root,
        )
        assert code == 0, out + err
        yield root


def shell_call(repo: Path, command: str, session: str) -> dict[str, Any]:
    """Claude Code's PreToolUse payload of a Bash `command` by `session`."""
    call = payload("claude-bash", repo, command=command)
    call["session_id"] = session
    return call


def spellings(session: str) -> list[str]:
    """The decoy trust for `session`, as an agent's shell may spell it."""
    ours, args = str(PLANFENCE), shlex.join(DECOY)
    return [
        f"{ours} {args} --session {session}",  # the exempt form: a path to this binary
        f"{ours} {args} --session={session}",
        f"planfence {args} --session {session}",
        f"{sys.executable} -m planfence_net {args} --session {session}",
        f"planfence {args} '--session' \"{session}\"",
        f"cd . && planfence {args} --ses\\sion {session}",
    ]


def mcp_trust(repo: Path, **arguments: Any) -> str:
    """The reason of the ToolError the MCP server's `trust` tool ends in."""
    server = build_server(None, repo)
    with pytest.raises(ToolError) as info:
        anyio.run(server.call_tool, "trust", {"plan": "decoy", "read": ["README.md"], **arguments})
    text = str(info.value)
    assert text.startswith(MCP_ERROR), text
    return text.removeprefix(MCP_ERROR)


def test_every_door_refuses_to_trust_for_another_session(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for command in spellings(VICTIM):
        code, err = run_hook("claude", shell_call(repo, command, ATTACKER))
        assert (code, err.partition("`: ")[2]) == (2, REFUSAL + "\n"), command
    with in_process(repo):  # the hook deciding in its own process, not the owner's
        code, err = run_hook("claude", shell_call(repo, spellings(VICTIM)[0], ATTACKER))
        assert (code, err.partition("`: ")[2]) == (2, REFUSAL + "\n")

    monkeypatch.setenv("CLAUDECODE", "1")  # Claude Code's shell: no grant for VICTIM
    code, out, err = run_cli(*DECOY, "--session", VICTIM, cwd=repo)
    assert (code, out, quiet(err)) == (1, "", f"error: {REFUSAL}\n")
    monkeypatch.delenv("CLAUDECODE")
    monkeypatch.setenv("CODEX_THREAD_ID", ATTACKER)  # Codex's shell names its thread
    code, out, err = run_cli(*DECOY, f"--session={VICTIM}", cwd=repo)
    assert (code, out, quiet(err)) == (1, "", f"error: {REFUSAL}\n")
    monkeypatch.delenv("CODEX_THREAD_ID")

    assert mcp_trust(repo, session=VICTIM) == REFUSAL

    cdir = ClusterDir(repo / ".planfence")
    assert bound_plan(cdir, VICTIM) == "mine"  # nothing re-bound
    code, out, _ = run_cli("workspace", "check", "decoy", cwd=repo)
    assert code == 3, out  # and nothing written: decoy has no trusted state


def agent_shell(repo: Path, command: str, session: str) -> int:
    """What Claude Code does with `session`'s Bash call of `command`: asks the hook, and runs
    the command in its shell (CLAUDECODE=1) only when the hook lets it through."""
    code, _ = run_hook("claude", shell_call(repo, command, session))
    if code != 0:
        return code
    env = {**os.environ, "CLAUDECODE": "1"}
    ran = subprocess.run(command, shell=True, cwd=repo, env=env, capture_output=True, timeout=60)
    return ran.returncode


def test_the_victim_is_still_blocked_after_its_read_drifts(repo: Path) -> None:
    runnable = [c for c in spellings(VICTIM) if not c.startswith(("planfence", "cd"))]
    codes = [agent_shell(repo, command, ATTACKER) for command in runnable]
    write(repo, {"src/a.py": "a = 2\n"})  # what the victim's plan read changes
    edit = payload("claude-edit", repo, file_path=str(repo / "src/b.py"))
    edit["session_id"] = VICTIM
    code, err = run_hook("claude", edit)
    assert code == 2, err
    assert "src/a.py" in err
    assert codes == [2] * len(runnable)


def test_a_session_re_trusts_its_own_plan_from_its_shell(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    retrust = (*DECOY[:2], "mine", "--read", "src/a.py", "--target", "src/b.py")
    retrust = (*retrust, "--lockfiles", "none", "--session", VICTIM)
    command = shlex.join([str(PLANFENCE), *retrust])
    assert run_hook("claude", shell_call(repo, command, VICTIM)) == (0, "")  # exempt, granted
    monkeypatch.setenv("CLAUDECODE", "1")
    code, out, err = run_cli(*retrust, cwd=repo)
    assert code == 0, out + err
    assert out.startswith("trusted mine (trust 2)")
    code, out, err = run_cli(*retrust, cwd=repo)  # the grant served one command
    assert (code, quiet(err)) == (1, f"error: {REFUSAL}\n")
    monkeypatch.setenv("CODEX_THREAD_ID", VICTIM)  # Codex's shell names the session itself
    code, out, err = run_cli(*retrust, cwd=repo)
    assert code == 0, out + err


def test_mcp_binds_no_session_and_the_person_flags_stay_the_users(repo: Path) -> None:
    assert mcp_trust(repo, session=ATTACKER) == not_yours("workspace trust", ATTACKER)
    assert mcp_trust(repo, fresh=True) == person_only("--fresh")


def test_authorize_is_the_one_rule() -> None:
    me = Caller.agent("s1")
    authorize(Caller.person(), "workspace refresh", "s1", ("--fresh",))
    authorize(me, "workspace trust", "s1")
    authorize(me, "workspace trust", None)
    for caller, session in ((me, "s2"), (Caller.mcp(), "s1"), (Caller.agent(None), "s1")):
        with pytest.raises(Refused, match="only that session itself"):
            authorize(caller, "workspace trust", session)
    with pytest.raises(Refused, match="re-bases a plan"):
        authorize(me, "workspace refresh", "s1")
    with pytest.raises(Refused) as info:
        authorize(me, "workspace trust", "s1", ("--narrow",))
    assert str(info.value) == person_only("--narrow", "the command")
    assert isinstance(info.value, ConfigError)  # one line and exit 1 at the CLI
    assert shell_refusal("planfence workspace trust p --read f --session s1", "s1") is None
    assert shell_refusal("planfence workspace check p", None) is None
    assert shell_refusal("planfence workspace trust p --session=s2", "s1") == not_yours(
        "workspace trust", "s2"
    )


def test_a_grant_serves_one_command_within_its_time(tmp_path: Path) -> None:
    grant(tmp_path, "workspace trust", "s1", now=100.0)
    assert not take_grant(tmp_path, "workspace trust", "s2", now=100.0)  # another session's
    assert take_grant(tmp_path, "workspace trust", "s1", now=100.0 + GRANT_TIMEOUT)
    assert not take_grant(tmp_path, "workspace trust", "s1", now=100.0)  # taken already
    grant(tmp_path, "workspace trust", "s1", now=100.0)
    assert not take_grant(tmp_path, "workspace trust", "s1", now=100.1 + GRANT_TIMEOUT)
    env = {"CLAUDECODE": "1"}
    grant(tmp_path, "workspace trust", "s1")
    assert Caller.of_shell(env, tmp_path, "workspace trust", "s1") == Caller.agent("s1")
    assert Caller.of_shell(env, tmp_path, "workspace trust", "s1") == Caller.agent(None)
    assert Caller.of_shell({}, tmp_path, "workspace trust", "s1") == Caller.person()


def test_a_refresh_from_an_agents_shell_is_refused(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODEX_THREAD_ID", VICTIM)  # even the session's own: the user's call
    code, out, err = run_cli("workspace", "refresh", "--session", VICTIM, "--yes", cwd=repo)
    assert (code, out) == (1, "")
    assert err.startswith("error: PlanFence refused workspace refresh: it re-bases a plan")
