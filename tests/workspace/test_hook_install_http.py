"""`planfence hook install claude` where a workspace owner serves the worktree: http handlers
to the owner's door with the key in `env`; the command form elsewhere; `status` and
`uninstall` understand both."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from planfence_net.workspace.installers import httphook
from planfence_net.workspace.installers.leanhook import lean_line
from support.cluster import PLANFENCE
from support.workspace import hook_socket, make_repo, run_cli, served

ENVIRONMENT = ["PLANFENCE_CLUSTER", "XDG_STATE_HOME", "HOME", "CODEX_HOME", "XDG_CONFIG_HOME"]
THEIRS = {"env": {"FOO": "1"}, "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
    {"type": "command", "command": "true"}]}]}}  # fmt: skip


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", str(PLANFENCE.parent) + ":/usr/bin:/bin")
    yield home


def status(repo: Path) -> dict[str, Any]:
    code, out, err = run_cli("hook", "status", "claude", "--project", repo, "--json")
    assert err == "", err
    [found] = json.loads(out)["agents"]
    return dict(found)


def test_served_worktree_gets_http_handlers(tmp_path: Path, home: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "x\n"})
    local = repo / ".claude" / "settings.local.json"
    local.parent.mkdir()
    local.write_text(json.dumps(THEIRS))
    with served(repo):
        port = httphook.served_port(repo / ".planfence", "ws")
        assert port is not None
        assert run_cli("hook", "install", "claude", "--project", repo)[0] == 0
        config = json.loads(local.read_text())
        key = (repo / ".planfence" / "run" / "hook-http.secret").read_text()
        assert config["env"] == {"FOO": "1", "PLANFENCE_HOOK_KEY": key}
        handler = {
            "type": "http",
            "url": f"http://127.0.0.1:{port}/hook/claude?mode=auto",
            "headers": {
                "X-PlanFence-Key": "${PLANFENCE_HOOK_KEY}",
                **{f"X-PlanFence-Env-{n}": f"${{{n}}}" for n in ENVIRONMENT},
            },
            "allowedEnvVars": ["PLANFENCE_HOOK_KEY", *ENVIRONMENT],
            "timeout": 30,
            "onFailure": "block",
        }
        pre = config["hooks"]["PreToolUse"]
        assert pre[0] == THEIRS["hooks"]["PreToolUse"][0]  # type: ignore[index]
        assert pre[1]["hooks"] == [handler]
        assert config["hooks"]["SessionEnd"] == [
            {"hooks": [{k: v for k, v in handler.items() if k != "onFailure"}]}
        ]
        # Claude Code runs no http SessionStart: the command form, behind the lean client
        line = lean_line(f"{PLANFENCE} hook claude --mode auto", repo)
        assert line.startswith(f"{sys.executable} -I -S ") and line.endswith(
            f" --socket {hook_socket(repo)} {PLANFENCE} hook claude --mode auto"
        )
        command = {"type": "command", "command": line, "timeout": 30}
        assert config["hooks"]["SessionStart"] == [{"hooks": [command]}]
        found = status(repo)
        assert (found["state"], found["detail"]) == (
            "active",
            "PreToolUse and PostToolUse fail closed; the owner answers",
        )
        config["env"]["PLANFENCE_HOOK_KEY"] = "0" * 64
        local.write_text(json.dumps(config))
        found = status(repo)
        assert found["state"] == "broken"
        assert "refused the probe (the key does not match)" in found["detail"]
        assert run_cli("hook", "install", "claude", "--project", repo)[0] == 0  # repairs it
        assert status(repo)["state"] == "active"
    found = status(repo)  # the owner stopped: every call would block
    assert (found["state"], found["step"]) == ("not served", f"planfence workspace serve {repo}")
    with served(repo):  # its door took the recorded port again: active as installed
        assert status(repo)["state"] == "active"
    assert run_cli("hook", "uninstall", "claude", "--project", repo)[:2] == (
        0,
        f"removed the PlanFence hook from {local}\n",
    )
    assert json.loads(local.read_text()) == THEIRS
    assert run_cli("hook", "install", "claude", "--project", repo)[0] == 0  # not served
    config = json.loads(local.read_text())
    assert config["env"] == {"FOO": "1"}
    assert config["hooks"]["PreToolUse"][1]["hooks"][0]["type"] == "command"
