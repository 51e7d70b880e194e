"""`planfence hook install|uninstall`: our hook is merged into the agents' project configs,
others' hooks stay, the files parse and have the documented shape."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from planfence_net.workspace.install import hook_command, toml_block
from support.workspace import run_cli

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


def ours(agent: str, matcher: str, command: str | None = None) -> dict[str, Any]:
    return {
        "matcher": matcher,
        "hooks": [{"type": "command", "command": command or hook_command(agent), "timeout": 30}],
    }


def test_claude_install_keeps_other_hooks_and_uninstall_removes_only_ours(tmp_path: Path) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(THEIRS_CLAUDE, indent=2))
    for _ in range(2):  # installing twice leaves one copy
        code, out, _ = run_cli("hook", "install", "claude", "--project", tmp_path)
        assert (code, out) == (
            0,
            f"installed the PlanFence hooks (PreToolUse, PostToolUse) for claude in {settings}\n",
        )
    written = json.loads(settings.read_text())
    assert written == {
        **THEIRS_CLAUDE,
        "hooks": {
            "PreToolUse": [
                *THEIRS_CLAUDE["hooks"]["PreToolUse"],
                ours("claude", "Write|Edit|MultiEdit|NotebookEdit|Bash"),
            ],
            "PostToolUse": [
                *THEIRS_CLAUDE["hooks"]["PostToolUse"],
                ours("claude", "Write|Edit|MultiEdit|NotebookEdit"),
            ],
        },
    }
    assert run_cli("hook", "uninstall", "claude", "--project", tmp_path)[:2] == (
        0,
        f"removed the PlanFence hook from {settings}\n",
    )
    assert json.loads(settings.read_text()) == THEIRS_CLAUDE
    assert run_cli("hook", "uninstall", "claude", "--project", tmp_path)[:2] == (
        0,
        f"no PlanFence hook in {settings}\n",
    )


def test_codex_hooks_json_from_nothing_and_back(tmp_path: Path) -> None:
    code, out, _ = run_cli("hook", "install", "codex", "--project", tmp_path, "--json")
    path = tmp_path / ".codex" / "hooks.json"
    expected = {
        "hooks": {
            "PreToolUse": [ours("codex", "Bash|apply_patch|Edit|Write")],
            "PostToolUse": [ours("codex", "apply_patch|Edit|Write")],
        }
    }
    assert code == 0 and json.loads(out) == {
        "agent": "codex",
        "path": str(path),
        "config": expected,
    }
    assert json.loads(path.read_text()) == expected
    assert run_cli("hook", "uninstall", "codex", "--project", tmp_path)[0] == 0
    assert json.loads(path.read_text()) == {}


def test_codex_config_toml_keeps_its_tables(tmp_path: Path) -> None:
    config = tmp_path / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(THEIRS_CODEX_TOML)
    theirs = tomllib.loads(THEIRS_CODEX_TOML)
    assert (
        run_cli(
            "hook",
            "install",
            "codex",
            "--project",
            tmp_path,
            "--format",
            "toml",
            "--cluster",
            tmp_path,
        )[0]
        == 0
    )
    written = tomllib.loads(config.read_text())
    command = hook_command("codex", tmp_path)
    pre = ours("codex", "Bash|apply_patch|Edit|Write", command)
    post = ours("codex", "apply_patch|Edit|Write", command)
    assert written == {
        "model": "gpt-5-codex",
        "hooks": {"PreToolUse": [*theirs["hooks"]["PreToolUse"], pre], "PostToolUse": [post]},
    }
    assert command.endswith(f" hook codex --cluster {tmp_path}")
    assert config.read_text() == (
        THEIRS_CODEX_TOML + toml_block("PreToolUse", pre) + toml_block("PostToolUse", post)
    )  # appended as text
    assert run_cli("hook", "uninstall", "codex", "--project", tmp_path, "--format", "toml")[0] == 0
    assert config.read_text() == THEIRS_CODEX_TOML


@pytest.mark.parametrize(
    ("agent", "fmt", "rel", "text", "error"),
    [
        (
            "claude",
            "json",
            ".claude/settings.json",
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
            ".claude/settings.json",
            "{}",
            "no toml hook config for 'claude' (claude: json; codex: json, toml)",
        ),
    ],
)
def test_a_config_we_cannot_read_is_left_alone(
    tmp_path: Path, agent: str, fmt: str, rel: str, text: str, error: str
) -> None:
    path = tmp_path / rel
    path.parent.mkdir()
    path.write_text(text)
    code, out, err = run_cli("hook", "install", agent, "--project", tmp_path, "--format", fmt)
    assert (code, out) == (1, "")
    assert err.startswith("error: ") and err.rstrip().endswith(error)
    assert path.read_text() == text


def test_the_installed_command_runs_the_hook() -> None:
    command = hook_command("claude")
    assert command.endswith(" hook claude")
    assert Path(command.split()[0]).name == "planfence"
