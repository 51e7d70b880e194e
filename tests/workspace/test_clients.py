"""The normalized payload layer (`workspace.clients`): each client's payloads, taken from its
documentation or recorded from the pinned client, map into the canonical form; the hook's
answer maps back; `hook install|status` of the clients with JSON hook files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from planfence_net import cli
from planfence_net.workspace.clients.table import Mapped, answered, client, normalized
from planfence_net.workspace.installers import clientstatus, hookfiles
from planfence_net.workspace.model.payload import AGENTS, OTHER, READ, SHELL, WRITE, parse_payload

P = "/p"


def parsed(name: str, value: dict[str, Any]):  # type: ignore[no-untyped-def]
    return parse_payload(name, normalized(name, json.dumps(value).encode()).data)  # type: ignore[arg-type]


def test_every_client_has_a_row_and_the_lean_path_knows_it() -> None:
    assert cli.HOOK_CLIENTS == AGENTS
    assert all(client(name) is not None for name in AGENTS)
    assert client("aider") is None


# -- Gemini CLI: payloads as its hooks reference documents them (docs/hooks/reference.md:
# the base input schema, BeforeTool's tool_name/tool_input, AfterTool's tool_response) -----

GEMINI_BASE = {
    "session_id": "3f1c", "transcript_path": "/t.json", "cwd": P, "timestamp": "2026-01-01T00:00:00Z",
}  # fmt: skip


def gemini(event: str, tool: str, tool_input: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        **GEMINI_BASE,
        "hook_event_name": event,
        "tool_name": tool,
        "tool_input": tool_input,
        **more,
    }


@pytest.mark.parametrize(
    ("tool", "tool_input", "canonical", "kind", "files", "command"),
    [
        ("write_file", {"file_path": "/p/a.py", "content": "x"}, "Write", WRITE, ("/p/a.py",), None),
        ("replace", {"file_path": "/p/a.py", "old_string": "a", "new_string": "b"}, "Edit", WRITE, ("/p/a.py",), None),
        ("run_shell_command", {"command": "npm test"}, "Bash", SHELL, (), "npm test"),
        ("read_file", {"file_path": "/p/a.py"}, "Read", READ, (), None),
        ("glob", {"pattern": "*.py"}, "Glob", READ, (), None),
        ("mcp_db_put", {"row": 1}, "mcp_db_put", OTHER, (), None),
    ],
)  # fmt: skip
def test_gemini_before_tool_maps_into_the_canonical_call(
    tool: str,
    tool_input: dict[str, Any],
    canonical: str,
    kind: str,
    files: tuple[str, ...],
    command: str | None,
) -> None:
    call = parsed("gemini", gemini("BeforeTool", tool, tool_input))
    assert (call.event, call.tool, call.kind, call.files, call.command) == (
        "PreToolUse", canonical, kind, files, command,
    )  # fmt: skip
    assert call.agent == "gemini" and call.session == "3f1c" and call.cwd == P
    assert call.describe().startswith(tool)  # the model reads the client's own name
    assert call.tool_use_id and call.tool_use_id.startswith("gemini-")


def test_gemini_before_and_after_of_one_call_share_its_id() -> None:
    edit = {"file_path": "/p/a.py", "old_string": "a", "new_string": "b", "allow_multiple": True}
    before = parsed("gemini", gemini("BeforeTool", "replace", edit))
    response = {"llmContent": "Successfully modified file", "returnDisplay": "", "error": None}
    after = parsed("gemini", gemini("AfterTool", "replace", edit, tool_response=response))
    assert after.event == "PostToolUse" and after.tool_use_id == before.tool_use_id
    assert after.files == ("/p/a.py",) and after.gated
    data = json.loads(
        normalized("gemini", json.dumps(gemini("BeforeTool", "replace", edit)).encode()).data
    )  # type: ignore[arg-type]
    assert data["tool_input"]["replace_all"] is True  # what `outcome.made` reads


def test_gemini_after_tool_outcomes() -> None:
    failed = {
        "llmContent": "",
        "error": {"message": "0 occurrences found", "type": "edit_no_occurrence_found"},
    }
    call = parsed(
        "gemini", gemini("AfterTool", "replace", {"file_path": "/p/a.py"}, tool_response=failed)
    )
    assert (call.event, call.files, call.gated) == ("PostToolUseFailure", (), False)
    shell = {"llmContent": "Output: 1 failed\nExit Code: 1", "returnDisplay": ""}
    ran = parsed(
        "gemini",
        gemini(
            "AfterTool",
            "run_shell_command",
            {"command": "pytest", "dir_path": "sub"},
            tool_response=shell,
        ),
    )
    assert (ran.event, ran.exit, ran.cwd) == ("PostToolUse", 1, "/p/sub")
    ok = parsed(
        "gemini",
        gemini(
            "AfterTool",
            "run_shell_command",
            {"command": "pytest"},
            tool_response={"llmContent": "Output: ok"},
        ),
    )
    assert ok.exit == 0
    many = parsed(
        "gemini",
        gemini(
            "AfterTool",
            "read_many_files",
            {"include": ["/p/a.py", "src/**/*.py"]},
            tool_response={},
        ),
    )
    assert many.reads == ("/p/a.py",)  # a glob names no file to record


def test_gemini_answers() -> None:
    before = Mapped(b"", "PreToolUse")
    assert answered("gemini", before, (2, "PlanFence blocked x", "")) == (
        2,
        "PlanFence blocked x",
        "",
    )
    after = Mapped(b"", "PostToolUse")
    code, err, out = answered("gemini", after, (2, "PlanFence did not record x", ""))
    assert (code, err) == (0, "")  # exit 2 after a call would hide the tool's result
    assert (
        json.loads(out)["hookSpecificOutput"]["additionalContext"] == "PlanFence did not record x"
    )
    assert answered("claude", after, (2, "r", "")) == (2, "r", "")


def test_a_payload_that_is_not_json_reaches_the_parser_unchanged() -> None:
    assert normalized("gemini", b"{not json").data == b"{not json"
    error = OSError("stdin")
    assert normalized("gemini", error).data is error


# -- installing and status -------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in (
        "GEMINI_CLI_TRUST_WORKSPACE",
        "GEMINI_RESTRICTED_MODE",
        "GEMINI_CLI_TRUSTED_FOLDERS_PATH",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GEMINI_CLI_SYSTEM_SETTINGS_PATH", str(tmp_path / "system.json"))
    return home


THEIRS_GEMINI = {
    "model": {"name": "gemini-2.5-pro"},
    "hooks": {
        "BeforeTool": [
            {
                "matcher": "write_file",
                "hooks": [{"name": "lint", "type": "command", "command": "./lint.sh"}],
            }
        ]
    },
}


def test_install_gemini_merges_once_and_uninstall_leaves_theirs(tmp_path: Path, home: Path) -> None:
    root = tmp_path / "proj"
    (root / ".gemini").mkdir(parents=True)
    settings = root / ".gemini" / "settings.json"
    settings.write_text(json.dumps(THEIRS_GEMINI))
    for _ in range(2):
        assert (
            hookfiles.install("gemini", root, command="/x/planfence hook gemini --mode auto")
            == settings
        )
    value = json.loads(settings.read_text())
    assert value["model"] == THEIRS_GEMINI["model"]
    before = value["hooks"]["BeforeTool"]
    assert before[0] == THEIRS_GEMINI["hooks"]["BeforeTool"][0]
    assert before[1] == {
        "matcher": "^(write_file|replace|run_shell_command)$",
        "hooks": [
            {
                "name": "planfence",
                "type": "command",
                "command": "/x/planfence hook gemini --mode auto",
                "timeout": 30000,
            }
        ],
    }
    assert (
        value["hooks"]["AfterTool"][0]["matcher"]
        == "^(write_file|replace|run_shell_command|read_file|read_many_files)$"
    )
    assert list(value["hooks"]) == ["BeforeTool", "AfterTool", "SessionStart", "SessionEnd"]
    assert hookfiles.uninstall("gemini", root) == (settings, True)
    assert json.loads(settings.read_text()) == THEIRS_GEMINI


def test_gemini_status_names_each_switch_that_turns_ours_off(tmp_path: Path, home: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    assert clientstatus.client_status("gemini", root).state == "missing"
    hookfiles.install("gemini", root, command="true hook gemini")
    status = clientstatus.client_status("gemini", root)
    assert status.state == "untrusted" and "does not trust" in status.detail
    (home / ".gemini").mkdir()
    (home / ".gemini" / "trustedFolders.json").write_text(
        json.dumps({str(tmp_path): "TRUST_FOLDER"})
    )
    settings = root / ".gemini" / "settings.json"
    value = json.loads(settings.read_text())
    settings.write_text(json.dumps({**value, "hooksConfig": {"disabled": ["planfence"]}}))
    status = clientstatus.client_status("gemini", root)
    assert (status.state, status.step) == (
        "disabled",
        f"remove planfence from hooksConfig.disabled in {settings}",
    )
    (tmp_path / "system.json").write_text(json.dumps({"hooksConfig": {"enabled": False}}))
    status = clientstatus.client_status("gemini", root)
    assert status.state == "disabled" and "hooksConfig.enabled to false" in status.detail
    (tmp_path / "system.json").unlink()
    settings.write_text(json.dumps(value))
    status = clientstatus.client_status("gemini", root)
    assert status.state == "not served", status  # trusted, enabled, the command answers
    (home / ".gemini" / "trustedFolders.json").write_text(
        json.dumps({str(tmp_path): "DO_NOT_TRUST"})
    )
    assert clientstatus.client_status("gemini", root).state == "untrusted"


def test_hooks_md_shows_what_install_gemini_writes() -> None:
    """docs/HOOKS.md's `client-example` blocks are rebuilt from the installer."""
    import re

    from support.cluster import REPO

    text = (REPO / "docs" / "HOOKS.md").read_text()
    found = dict(re.findall(r"<!-- client-example: (\S+) -->\n```\w*\n(.*?)```", text, re.S))
    command = "/home/dev/.venv/bin/planfence hook gemini --mode auto"
    merged = hookfiles.merged({}, "gemini", command, explicit=False)
    assert found == {"gemini-settings": json.dumps(merged, indent=2) + "\n"}


@pytest.mark.parametrize("name", AGENTS)
def test_the_benchmarks_native_calls_are_what_they_say(name: str) -> None:
    """scripts/bench-stale-writes sends each client's own payloads: each maps to its kind."""
    from support.native_calls import calls

    made = calls(name, "s-1", P)
    expected = [
        (made.read("/p/a.py"), SHELL if name == "codex" else READ),  # Codex reads by `cat`
        (made.write("/p/a.py", "x = 1\n"), WRITE),
        (made.shell("npm test"), SHELL),
    ]
    for pair, kind in expected:
        for event, payload in zip(("PreToolUse", "PostToolUse"), pair, strict=True):
            if payload is None:
                continue  # recorded only after the call (Cursor's and Windsurf's reads)
            call = parsed(name, payload)
            assert (call.event, call.kind, call.session or "s-1") == (event, kind, "s-1")
    before, after = made.write("/p/a.py", "x = 1\n")
    assert before is not None
    assert parsed(name, before).tool_use_id == parsed(name, after).tool_use_id


def test_the_cli_installs_reports_and_removes_each_new_clients_hooks(
    tmp_path: Path, home: Path
) -> None:
    from support.workspace import run_cli

    root = tmp_path / "proj"
    root.mkdir()
    code, out, err = run_cli("hook", "install", "gemini", "--project", root, "--json")
    assert code == 0, out + err
    shown = json.loads(out)
    assert shown["path"] == str(root / ".gemini" / "settings.json")
    assert shown["config"]["hooks"]["BeforeTool"][0]["hooks"][0]["name"] == "planfence"
    code, out, _ = run_cli("hook", "status", "gemini", "--project", root, "--json")
    assert code == 1 and json.loads(out)["agents"][0]["state"] == "untrusted"
    code, out, err = run_cli("hook", "install", "opencode", "--project", root)
    assert code == 0 and out.startswith(
        f"installed the PlanFence hooks for opencode in {root}/.opencode/plugins/planfence.js\n"
    ), out + err
    code, out, _ = run_cli("hook", "install", "copilot", "--project", root, "--shared")
    assert code == 1  # --shared is Claude Code's
    for name, path in (
        ("gemini", ".gemini/settings.json"),
        ("opencode", ".opencode/plugins/planfence.js"),
    ):
        code, out, _ = run_cli("hook", "uninstall", name, "--project", root)
        assert (code, out) == (0, f"removed the PlanFence hook from {root / path}\n")


def test_install_gemini_warns_where_gemini_cli_would_not_run_it(tmp_path: Path, home: Path) -> None:
    from support.workspace import run_cli

    root = tmp_path / "proj"
    root.mkdir()
    code, out, err = run_cli("hook", "install", "gemini", "--project", root)
    assert code == 0, out + err
    assert f"warning: Gemini CLI does not trust {root}: it runs no hooks there" in err, err
    (home / ".gemini").mkdir(exist_ok=True)
    (home / ".gemini" / "trustedFolders.json").write_text(json.dumps({str(root): "TRUST_FOLDER"}))
    code, out, err = run_cli("hook", "install", "gemini", "--project", root)
    assert code == 0 and "Gemini CLI does not trust" not in err, err


@pytest.mark.parametrize(
    ("command", "files"),
    [
        ("black main.py", ("main.py",)),
        ("ruff format src/a.py src/b.py", ("src/a.py", "src/b.py")),
        ("prettier --write web/app.ts", ("web/app.ts",)),
        ("gofmt -w /p/cmd/main.go", ("/p/cmd/main.go",)),
        ("ruff check main.py", ()),  # not its rewriting form
        ("prettier web/app.ts", ()),  # prints, writes nothing
        ("black .", ()),  # a folder: which files it rewrote cannot be said
        ("black /elsewhere/x.py", ()),  # outside the call's folder
        ("black ../x.py", ()),
        ("black *.py", ()),
        ("black main.py && rm -rf src", ()),
        ("black $(ls)", ()),
    ],
)
def test_a_formatter_in_the_shell_writes_its_file_operands(
    command: str, files: tuple[str, ...]
) -> None:
    """The session's own formatter is its write: checked before, recorded after (so the next
    write of the formatted file is not refused as a sibling's change)."""
    call = parsed("claude", {
        "session_id": "s", "cwd": P, "hook_event_name": "PostToolUse", "tool_name": "Bash",
        "tool_input": {"command": command}, "tool_use_id": "t",
    })  # fmt: skip
    assert (call.files, call.gated) == (files, bool(files))
    assert call.describe() == f"Bash `{command}`"


def test_an_agent_cannot_switch_its_own_clients_hooks_off(tmp_path: Path) -> None:
    """The new clients' hook files are the fence's own (a person's): a Gemini CLI session
    writing `hooksConfig.disabled` into the project's settings, or an OpenCode session
    deleting our plugin, is blocked, whatever its plan; its ordinary writes still pass."""
    from support.workspace import make_repo, run_hook, served

    repo = make_repo(tmp_path / "repo", {"lib.py": "v = 1\n"})
    settings = str(repo / ".gemini" / "settings.json")
    disable = json.dumps({"hooksConfig": {"disabled": ["planfence"]}})
    with served(repo):
        for name, payload in (
            ("gemini", gemini("BeforeTool", "write_file", {"file_path": settings, "content": disable}, cwd=str(repo))),
            ("gemini", gemini("BeforeTool", "run_shell_command", {"command": "rm .gemini/settings.json"}, cwd=str(repo))),
            ("opencode", {"hook_event_name": "PreToolUse", "session_id": "o", "cwd": str(repo), "tool_name": "bash",
                          "tool_input": {"command": "rm .opencode/plugins/planfence.js"}, "tool_use_id": "c1"}),
            ("gemini", gemini("BeforeTool", "replace", {"file_path": str(repo / ".github/hooks/x.json"), "old_string": "a", "new_string": "b"}, cwd=str(repo))),
        ):  # fmt: skip
            code, reason = run_hook(name, payload, "--mode", "auto")
            assert code == 2 and "only a person may change" in reason, (payload, reason)
        ordinary = gemini(
            "BeforeTool",
            "write_file",
            {"file_path": str(repo / "lib.py"), "content": "v = 2\n"},
            cwd=str(repo),
        )
        assert run_hook("gemini", ordinary, "--mode", "auto") == (0, "")


# -- a payload the hook cannot read blocks in the client's own form --------------------


@pytest.mark.parametrize("name", [n for n in AGENTS if n not in ("claude", "codex")])
def test_a_block_of_a_payload_of_unknown_event_is_the_clients_block_before_a_call(
    name: str,
) -> None:
    """Found by review: Copilot CLI skips a hook's exit 2, so a block whose event the hook
    could not read (garbled, oversize, a hook that cannot start) was answered as after a
    call: exit 0 with nothing it reads, and the call ran. It counts as before a call."""
    unknown = answered(name, Mapped(b"{not json"), (2, "PlanFence blocked this call: r", ""))
    before = answered(name, Mapped(b"", "PreToolUse"), (2, "PlanFence blocked this call: r", ""))
    assert unknown == before
    code, err, out = unknown
    assert (
        code == 2
        or json.loads(out).get("permissionDecision", "") == "deny"
        or (json.loads(out).get("permission") == "deny")
    )
    assert "PlanFence blocked this call: r" in err + out


@pytest.mark.parametrize("name", ["copilot", "cursor"])
def test_an_oversize_or_garbled_payload_is_denied_in_the_clients_form(name: str) -> None:
    """`planfence hook NAME` as the client starts it: a payload over the cap (refused by the
    fast path's client, unread) and one that is not JSON (refused by the parser) are both
    a deny on stdout, the form these clients obey."""
    from planfence_net.workspace.hook import client as hookclient

    for data in (b"{" * (hookclient.MAX_PAYLOAD + 1), b"{not json"):
        proc = subprocess.run(
            [sys.executable, "-m", "planfence_net", "hook", name],
            input=data,
            capture_output=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        decision = json.loads(proc.stdout)
        assert "deny" in (decision.get("permissionDecision"), decision.get("permission"))


def test_a_hook_that_cannot_start_denies_in_copilots_form() -> None:
    """The hook's last guard (a broken install) blocks in the client's form too: Copilot
    CLI would run the call on a bare exit 2."""
    halted = (
        "import sys; sys.modules['planfence_net.workspace.hook.client'] = None; "
        "sys.argv = ['planfence', 'hook', 'copilot']; from planfence_net.cli import main; main()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", halted], input=b"{}", capture_output=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    decision = json.loads(proc.stdout)
    assert decision["permissionDecision"] == "deny"
    assert "the hook cannot start" in decision["permissionDecisionReason"]
