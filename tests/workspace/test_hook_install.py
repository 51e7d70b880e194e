"""`planfence hook install|uninstall|status`: our hooks are merged into the agents' configs
(Claude Code failing closed, exec form, at the repository root), others' hooks stay, the
files parse and have the documented shape, and `status` says what is active."""

from __future__ import annotations

import hashlib
import json
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from planfence_net.workspace.installers.clients import hook_command, toml_block
from planfence_net.workspace.installers.codexapp import codex_hash
from planfence_net.workspace.place.paths import MARKER
from support.cluster import PLANFENCE
from support.workspace import make_repo, run_cli, served

THEIRS_CLAUDE = {
    "permissions": {"allow": ["Bash(npm test:*)"]},
    "hooks": {
        "PreToolUse": [
            {
                "matcher": "Bash",
                "hooks": [{"type": "command", "command": ".claude/hooks/guard.sh", "timeout": 5}],
            }
        ],
        "PostToolUse": [
            {
                "matcher": "Write|Edit",
                "hooks": [{"type": "command", "command": 'npx prettier --write "$FILE"'}],
            }
        ],
    },
}
THEIRS_CODEX_TOML = """# team settings: keep this comment
model = "gpt-5-codex"

[[hooks.PreToolUse]]
matcher = "Bash"

[[hooks.PreToolUse.hooks]]
type = "command"
command = "python3 .codex/hooks/guard.py"
timeout = 10
"""
CLAUDE_PRE = "Write|Edit|MultiEdit|NotebookEdit|Bash|PowerShell"
CLAUDE_POST = "Write|Edit|MultiEdit|NotebookEdit|Read|NotebookRead|Grep|Bash|PowerShell"
CODEX_POST = "apply_patch|Edit|Write|Bash"
AUTO = ("--mode", "auto")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh HOME and CODEX_HOME, and a PATH without codex."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CODEX_HOME", str(home / ".codex"))
    monkeypatch.setenv("PATH", str(PLANFENCE.parent) + ":/usr/bin:/bin")
    yield home


def claude_handler(*extra: str) -> dict[str, Any]:
    return {
        "type": "command",
        "command": str(PLANFENCE),
        "args": ["hook", "claude", *AUTO, *extra],
        "timeout": 30,
        "onFailure": "block",
    }


def claude_ours(*extra: str) -> dict[str, Any]:
    handler = claude_handler(*extra)
    session = {k: v for k, v in handler.items() if k != "onFailure"}
    return {
        "PreToolUse": {"matcher": CLAUDE_PRE, "hooks": [handler]},
        "PostToolUse": {"matcher": CLAUDE_POST, "hooks": [handler]},
        "PostToolUseFailure": {"matcher": "Bash|PowerShell", "hooks": [handler]},
        "SessionStart": {"hooks": [session]},
        "SessionEnd": {"hooks": [session]},
    }


def codex_group(
    matcher: str | None, command: str | None = None, timeout: int = 30
) -> dict[str, Any]:
    handler = {"type": "command", "command": command or hook_command("codex"), "timeout": timeout}
    return {"hooks": [handler]} if matcher is None else {"matcher": matcher, "hooks": [handler]}


def codex_ours(command: str | None = None, post: str = CODEX_POST) -> dict[str, Any]:
    """Our four Codex groups: SessionStart and SessionEnd have no matcher, and SessionEnd the
    3 s Codex allows it."""
    return {
        "PreToolUse": codex_group("Bash|apply_patch|Edit|Write", command),
        "PostToolUse": codex_group(post, command),
        "SessionStart": codex_group(None, command),
        "SessionEnd": codex_group(None, command, timeout=3),
    }


def test_claude_installs_at_the_repository_root_failing_closed(tmp_path: Path, home: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"src/app.ts": "x\n"})
    local = repo / ".claude" / "settings.local.json"
    local.parent.mkdir()
    local.write_text(json.dumps(THEIRS_CLAUDE, indent=2))
    for _ in range(2):  # installing twice leaves one copy; from a subfolder: the root
        code, out, _ = run_cli("hook", "install", "claude", "--project", repo / "src")
        assert (code, out) == (
            0,
            f"installed the PlanFence hooks (PreToolUse, PostToolUse) for claude in {local}\n",
        )
    ours = claude_ours()
    assert json.loads(local.read_text()) == {
        **THEIRS_CLAUDE,
        "hooks": {
            "PreToolUse": [*THEIRS_CLAUDE["hooks"]["PreToolUse"], ours["PreToolUse"]],
            "PostToolUse": [*THEIRS_CLAUDE["hooks"]["PostToolUse"], ours["PostToolUse"]],
            "PostToolUseFailure": [ours["PostToolUseFailure"]],
            "SessionStart": [ours["SessionStart"]],
            "SessionEnd": [ours["SessionEnd"]],
        },
    }
    assert not (repo / "src" / ".claude").exists()
    assert json.loads((repo / ".git" / MARKER).read_text()) == {"clusters": []}
    assert run_cli("hook", "uninstall", "claude", "--project", repo)[:2] == (
        0,
        f"removed the PlanFence hook from {local}\n",
    )
    assert json.loads(local.read_text()) == THEIRS_CLAUDE
    assert run_cli("hook", "uninstall", "claude", "--project", repo)[:2] == (
        0,
        f"no PlanFence hook in {local}\n",
    )


def test_claude_shared_names_no_path_of_this_machine(tmp_path: Path, home: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "x\n"})
    assert run_cli("hook", "install", "claude", "--project", repo, "--shared")[0] == 0
    written = json.loads((repo / ".claude" / "settings.json").read_text())
    [pre] = written["hooks"]["PreToolUse"]
    assert pre["hooks"] == [
        {
            "type": "command",
            "command": "planfence hook claude --mode auto",
            "timeout": 30,
            "onFailure": "block",
        }
    ]
    assert not (repo / ".claude" / "settings.local.json").exists()


def test_user_scope_and_mcp_writes(tmp_path: Path, home: Path) -> None:
    args = ("--user", "--mcp-writes", "mcp__fs__write_.*")
    assert run_cli("hook", "install", "claude", *args)[0] == 0
    written = json.loads((home / ".claude" / "settings.json").read_text())
    [pre] = written["hooks"]["PreToolUse"]
    assert pre == {
        "matcher": CLAUDE_PRE + "|mcp__fs__write_.*",
        "hooks": [claude_handler("--scope", "user")],
    }
    assert run_cli("hook", "install", "codex", *args)[0] == 0
    hooks = json.loads((home / ".codex" / "hooks.json").read_text())["hooks"]
    assert hooks["PostToolUse"] == [
        codex_group(CODEX_POST + "|mcp__fs__write_.*", hook_command("codex", user=True))
    ]
    code, out, err = run_cli("hook", "install", "claude", "--user", "--mcp-writes", "mcp__(")
    assert (code, out) == (1, "")
    assert err.startswith("error: --mcp-writes 'mcp__(' is not a regular expression: ")


def test_codex_hooks_json_from_nothing_and_back(tmp_path: Path, home: Path) -> None:
    code, out, _ = run_cli("hook", "install", "codex", "--project", tmp_path, "--json")
    path = tmp_path / ".codex" / "hooks.json"
    expected = {"hooks": {event: [group] for event, group in codex_ours().items()}}
    assert code == 0 and json.loads(out) == {
        "agent": "codex",
        "path": str(path),
        "moved_from": [],
        "config": expected,
        "trusted": [],
    }
    assert json.loads(path.read_text()) == expected
    code, out, _ = run_cli("hook", "install", "codex", "--project", tmp_path)
    assert out.splitlines()[1:3] == [
        "Codex runs project hooks only after two trust decisions of yours:",
        f"  1. trust the project {tmp_path} (Codex asks on first start, or `codex exec --trust`);",
    ]
    assert json.loads(path.read_text()) == expected  # installing twice: one copy
    assert run_cli("hook", "uninstall", "codex", "--project", tmp_path)[0] == 0
    assert json.loads(path.read_text()) == {}


def test_codex_config_toml_keeps_its_tables(tmp_path: Path, home: Path) -> None:
    config = tmp_path / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(THEIRS_CODEX_TOML)
    theirs = tomllib.loads(THEIRS_CODEX_TOML)
    args = ("--project", tmp_path, "--format", "toml", "--cluster", tmp_path)
    assert run_cli("hook", "install", "codex", *args)[0] == 0
    written = tomllib.loads(config.read_text())
    command = hook_command("codex", tmp_path)
    ours = codex_ours(command)
    assert written == {
        "model": "gpt-5-codex",
        "hooks": {
            "PreToolUse": [*theirs["hooks"]["PreToolUse"], ours["PreToolUse"]],
            **{event: [group] for event, group in ours.items() if event != "PreToolUse"},
        },
    }
    assert command.endswith(f" hook codex --mode auto --cluster {tmp_path}")
    appended = THEIRS_CODEX_TOML + "".join(toml_block(e, g) for e, g in ours.items())
    assert config.read_text() == appended  # appended as text
    assert run_cli("hook", "install", "codex", *args)[0] == 0
    assert config.read_text() == appended  # installing twice: one copy, same text
    # A second form in the same layer: refused while theirs is in config.toml.
    code, out, err = run_cli("hook", "install", "codex", "--project", tmp_path)
    assert (code, out) == (1, "")
    assert err == (
        f"error: {config} already holds hooks: Codex would load both forms of this layer; "
        f"install with --format toml, or move those hooks\n"
    )
    assert not (tmp_path / ".codex" / "hooks.json").exists()
    assert run_cli("hook", "uninstall", "codex", "--project", tmp_path, "--format", "toml")[0] == 0
    assert config.read_text() == THEIRS_CODEX_TOML


def test_codex_moves_ours_to_the_form_asked_for(tmp_path: Path, home: Path) -> None:
    assert run_cli("hook", "install", "codex", "--project", tmp_path, "--format", "toml")[0] == 0
    code, out, _ = run_cli("hook", "install", "codex", "--project", tmp_path)
    toml = tmp_path / ".codex" / "config.toml"
    assert code == 0 and f"moved ours out of {toml} (Codex would run both forms)" in out
    assert toml.read_text() == ""
    assert json.loads((tmp_path / ".codex" / "hooks.json").read_text()) == {
        "hooks": {event: [group] for event, group in codex_ours().items()}
    }


@pytest.mark.parametrize(
    ("agent", "fmt", "rel", "text", "error"),
    [
        (
            "claude",
            "json",
            ".claude/settings.local.json",
            "{oops",
            "does not parse (Expecting property name enclosed in double quotes: line 1 column 2 "
            "(char 1)); fix it first, not touching it",
        ),
        (
            "codex",
            "json",
            ".codex/hooks.json",
            '{"hooks": []}',
            "'hooks' / 'hooks.PreToolUse' has an unexpected shape; not touching it",
        ),
        (
            "claude",
            "toml",
            ".claude/settings.local.json",
            "{}",
            "no toml hook config for 'claude' (claude: json; codex: json, toml)",
        ),
    ],
)
def test_a_config_we_cannot_read_is_left_alone(
    tmp_path: Path, home: Path, agent: str, fmt: str, rel: str, text: str, error: str
) -> None:
    path = tmp_path / rel
    path.parent.mkdir()
    path.write_text(text)
    code, out, err = run_cli("hook", "install", agent, "--project", tmp_path, "--format", fmt)
    assert (code, out) == (1, "")
    assert err.startswith("error: ") and err.rstrip().endswith(error)
    assert path.read_text() == text


def status(repo: Path, agent: str) -> tuple[int, dict[str, Any]]:
    code, out, err = run_cli("hook", "status", agent, "--project", repo, "--json")
    assert err == "", err
    [found] = json.loads(out)["agents"]
    return code, found


def test_claude_status_names_the_step(tmp_path: Path, home: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "x\n"})
    install = f"planfence hook install claude --project {repo}"
    code, found = status(repo, "claude")
    assert (code, found["state"], found["step"]) == (1, "missing", install)
    assert run_cli("hook", "install", "claude", "--project", repo)[0] == 0
    assert status(repo, "claude")[1]["state"] == "not served"  # no owner: writes would block
    with served(repo):
        code, found = status(repo, "claude")
        assert (code, found["state"], found["active"]) == (0, "active", True)
    local = repo / ".claude" / "settings.local.json"
    config = json.loads(local.read_text())
    del config["hooks"]["PostToolUse"][0]["hooks"][0]["onFailure"]
    local.write_text(json.dumps(config))
    assert status(repo, "claude")[1]["state"] == "fails open"
    config["hooks"]["PostToolUse"][0]["hooks"][0]["onFailure"] = "block"
    for group in config["hooks"].values():
        group[0]["hooks"][0]["command"] = str(tmp_path / "moved" / "planfence")
    local.write_text(json.dumps(config))
    code, found = status(repo, "claude")
    assert (code, found["state"], found["step"]) == (1, "broken", install)
    assert found["detail"].startswith(f"the hook command {tmp_path}/moved/planfence hook claude")


def test_codex_trust_without_codex_is_computed_and_unverified(tmp_path: Path, home: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "x\n"})
    assert run_cli("hook", "install", "codex", "--project", repo)[0] == 0
    code, found = status(repo, "codex")
    assert (code, found["state"]) == (1, "unverified")
    assert found["step"] == f"planfence hook install codex --project {repo} --trust"
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text('# mine\nmodel = "gpt-5.5"\n')
    code, out, err = run_cli("hook", "install", "codex", "--project", repo, "--trust")
    assert code == 0, out + err
    source = repo / ".codex" / "hooks.json"
    command = hook_command("codex")
    pre = codex_hash("pre_tool_use", "Bash|apply_patch|Edit|Write", command, 30)
    post = codex_hash("post_tool_use", CODEX_POST, command, 30)
    start = codex_hash("session_start", None, command, 30)
    end = codex_hash("session_end", None, command, 3)
    text = (home / ".codex" / "config.toml").read_text()
    assert text.startswith('# mine\nmodel = "gpt-5.5"\n')  # appended: the comment stays
    assert tomllib.loads(text) == {
        "model": "gpt-5.5",
        "projects": {str(repo): {"trust_level": "trusted"}},
        "hooks": {
            "state": {
                f"{source}:pre_tool_use:0:0": {"trusted_hash": pre},
                f"{source}:post_tool_use:0:0": {"trusted_hash": post},
                f"{source}:session_start:0:0": {"trusted_hash": start},
                f"{source}:session_end:0:0": {"trusted_hash": end},
            }
        },
    }
    assert f'[projects."{repo}"] trust_level = "trusted"' in out


def test_workspace_commands_warn_when_no_hook_is_active(tmp_path: Path, home: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "x\n"})
    warning = (
        f"warning: no agent hook is active for {repo}: nothing blocks a stale edit "
        f"(`planfence hook status --project {repo}` says what to do)\n"
    )
    with served(repo):
        code, out, err = run_cli("workspace", "trust", "p", "--read", "a.txt", cwd=repo)
        assert (code, err) == (0, warning), out
        assert run_cli("workspace", "check", "p", cwd=repo / ".planfence")[2] == warning
        assert run_cli("hook", "install", "claude", "--project", repo)[0] == 0
        code, out, err = run_cli("workspace", "trust", "p", "--read", "a.txt", cwd=repo)
        assert (code, err) == (0, ""), out
        assert run_cli("workspace", "check", "p", cwd=repo)[:3:2] == (0, "")


def test_explicit_keeps_trusted_plans_only(tmp_path: Path, home: Path) -> None:
    """`--explicit`: no `--mode auto`, PostToolUse only for edits, no PostToolUseFailure."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "x\n"})
    assert run_cli("hook", "install", "claude", "--project", repo, "--explicit")[0] == 0
    written = json.loads((repo / ".claude" / "settings.local.json").read_text())
    handler = {**claude_handler(), "args": ["hook", "claude"]}
    assert written == {
        "hooks": {
            "PreToolUse": [{"matcher": CLAUDE_PRE, "hooks": [handler]}],
            "PostToolUse": [{"matcher": "Write|Edit|MultiEdit|NotebookEdit", "hooks": [handler]}],
            "SessionStart": [{"hooks": [{k: v for k, v in handler.items() if k != "onFailure"}]}],
            "SessionEnd": [{"hooks": [{k: v for k, v in handler.items() if k != "onFailure"}]}],
        }
    }
    # Installing in automatic mode over it replaces ours, PostToolUseFailure included.
    assert run_cli("hook", "install", "claude", "--project", repo)[0] == 0
    written = json.loads((repo / ".claude" / "settings.local.json").read_text())
    assert written["hooks"]["PostToolUseFailure"] == [claude_ours()["PostToolUseFailure"]]
    assert run_cli("hook", "uninstall", "claude", "--project", repo)[0] == 0
    assert json.loads((repo / ".claude" / "settings.local.json").read_text()) == {}
    code, _, _ = run_cli("hook", "install", "codex", "--project", repo, "--explicit")
    hooks = json.loads((repo / ".codex" / "hooks.json").read_text())["hooks"]
    explicit = hook_command("codex", explicit=True)
    assert code == 0 and hooks == {  # SessionStart joins, SessionEnd ends intents: kept
        event: [group]
        for event, group in codex_ours(explicit, post="apply_patch|Edit|Write").items()
    }
    assert hooks["PreToolUse"][0]["hooks"][0]["command"] == f"{PLANFENCE} hook codex"


def test_codex_hash_normalizes_timeouts_as_codex_does() -> None:
    """What Codex 0.171.0's `hooks/list` reports (tests/agents/test_codex_session.py checks
    ours against it): a SessionEnd handler's timeout is 1 s when missing and at most 3 s;
    another event's is 600 s when missing."""

    def literal(label: str, seconds: int, matcher: str = "") -> str:
        text = (
            f'{{"event_name":"{label}","hooks":[{{"async":false,"command":"c",'
            f'"timeout":{seconds},"type":"command"}}]{matcher}}}'
        )
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()

    end = [codex_hash("session_end", None, "c", t) for t in (None, 0, 1, 2, 3, 30)]
    assert end == [literal("session_end", s) for s in (1, 1, 1, 2, 3, 3)]
    assert codex_hash("session_start", None, "c", None) == literal("session_start", 600)
    assert codex_hash("pre_tool_use", "Bash", "c", 30) == literal(
        "pre_tool_use", 30, ',"matcher":"Bash"'
    )


FAKE_CODEX = """#!{python}
import json, sys
hooks = json.loads({hooks!r})
for line in sys.stdin:
    message = json.loads(line)
    result = {{}} if message["method"] == "initialize" else {{"data": [{{"hooks": hooks}}]}}
    print(json.dumps({{"id": message["id"], "result": result}}), flush=True)
"""


def test_codex_status_needs_our_session_hooks_trusted_too(tmp_path: Path, home: Path) -> None:
    """A Codex that lists our SessionEnd untrusted skips it: the session's intents would
    outlive it, so `hook status` says untrusted (a stand-in `codex app-server` answers)."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "x\n"})
    assert run_cli("hook", "install", "codex", "--project", repo)[0] == 0
    source = repo / ".codex" / "hooks.json"
    listed = [
        {
            "key": f"{source}:{label}:0:0",
            "eventName": event,
            "command": hook_command("codex"),
            "enabled": True,
            "trustStatus": "untrusted" if label == "session_end" else "trusted",
        }
        for event, label in (
            ("preToolUse", "pre_tool_use"),
            ("postToolUse", "post_tool_use"),
            ("sessionStart", "session_start"),
            ("sessionEnd", "session_end"),
        )
    ]
    fake = tmp_path / "codex"
    fake.write_text(FAKE_CODEX.format(python=sys.executable, hooks=json.dumps(listed)))
    fake.chmod(0o755)
    code, out, err = run_cli("hook", "status", "codex", "--project", repo, "--codex", fake)
    assert (code, err) == (1, "")
    assert out == (
        f"codex: untrusted: Codex skips {source}:session_end:0:0: untrusted\n"
        f"  to activate: planfence hook install codex --project {repo} --trust\n"
    )
    listed[3]["trustStatus"] = "trusted"
    fake.write_text(FAKE_CODEX.format(python=sys.executable, hooks=json.dumps(listed)))
    with served(repo):  # active only where an owner serves the folder
        code, out, _ = run_cli("hook", "status", "codex", "--project", repo, "--codex", fake)
    assert (code, out) == (0, "codex: active: Codex lists our hooks enabled and trusted\n")
