"""`hook install claude --sandbox` in the real Claude Code, with bubblewrap from the OS packages,
and what Codex's own sandbox modes allow.

Claude Code: the scripted model asks for Bash commands that read the workspace owner's key
file, connect to its hook socket and look the socket up, each path built at run time (a
command that names the fence's files is the hook's to block: test_fence_guards). With the
hook alone all succeed (nothing drifted); with `--sandbox` each fails inside
the client, and so does an append to .git/config: the tool results the model receives say
so. `hook uninstall claude` then takes the sandbox settings away again.

Codex: `codex exec --sandbox MODE` against the same probes and writes to the fence's files,
pinned as the table docs/HOOKS.md shows (MEASURED).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from planfence_net.workspace.hook.client import socket_path

from .clients import codex_env, run_bounded, run_claude, skip_without_clients, write_codex_config
from .model_server import ANTHROPIC, OPENAI, ModelServer, Text, ToolCall, Turn
from .turns import (
    assert_scripted_and_offline,
    claude_tool_results,
    codex_call_outputs,
    content_text,
)
from .workspaces import Workspace

pytestmark = pytest.mark.agents
skip_without_clients()
if shutil.which("bwrap") is None or shutil.which("socat") is None:
    pytest.skip(
        "Claude Code's sandbox needs bubblewrap and socat: apt-get install bubblewrap socat",
        allow_module_level=True,
    )

READ_OK, CONNECTED, SEEN, WROTE = "read the key:", "connected", "socket seen", "wrote"


def python(code: str, description: str) -> ToolCall:
    return ToolCall(
        "Bash", {"command": f'{sys.executable} -c "{code}"', "description": description}
    )


def hidden(path: Path) -> str:
    """A Python expression for `path` that builds it at run time (reversed): the hook's check
    of the fence's own files reads a command's text and cannot see it, so what stops the
    command is the sandbox, its second line (docs/HOOKS.md, section 6)."""
    return f"{str(path)[::-1]!r}[::-1]"


def probes(key: Path, sock: Path, config: Path | None) -> list[Turn]:
    """Read `key`, connect to `sock`, stat `sock`, and (given `config`) append to it, then
    finish: each command prints its marker on success."""
    calls = [
        python(f"print({READ_OK!r}, len(open({hidden(key)}).read()))", "key"),
        python(
            "import socket; s = socket.socket(socket.AF_UNIX); "
            f"s.connect({hidden(sock)}); print({CONNECTED!r})",
            "connect",
        ),
        python(f"import os; os.stat({hidden(sock)}); print({SEEN!r})", "stat"),
    ]
    if config is not None:
        calls.append(python(f"open({hidden(config)}, 'a').write('#'); print({WROTE!r})", "git"))
    return [*calls, Text("done")]


def run_probes(
    claude: Path, server: ModelServer, ws: Workspace, home: Path, config: Path | None = None
) -> list[dict[str, Any]]:
    """The tool results of one run of `probes` against the workspace's owner."""
    cluster = ws.path / ".planfence"
    (key,) = (cluster / "keys").glob("*.key")
    turns = probes(key, socket_path(cluster), config)
    server.script(ANTHROPIC, turns)
    run = run_claude(claude, server.url, ws.path, home, "Look at the fence.")
    assert run.returncode == 0, run.stdout + run.stderr
    assert_scripted_and_offline(server, ANTHROPIC, turns)
    return claude_tool_results(server)[-len(turns) + 1 :]


def test_claude_sandbox_keeps_bash_from_the_fence_key_and_socket(
    claude: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    """Issue 28's acceptance line: with the hook alone the probes succeed; with `--sandbox`
    reading the key, connecting to and finding the socket, and appending to .git/config all
    fail inside Claude Code; `hook uninstall` leaves the settings as they were."""
    local = workspace.path / ".claude" / "settings.local.json"
    local.parent.mkdir()
    local.write_text(json.dumps({"permissions": {"allow": ["Bash"]}}))
    workspace.planfence("hook", "install", "claude", "--project", workspace.path, "--command")
    results = run_probes(claude, model_server, workspace, tmp_path / "home")
    said = [content_text(r["content"]) for r in results]
    assert [r.get("is_error", False) for r in results] == [False] * 3, said  # the hook alone
    assert [READ_OK in said[0], CONNECTED in said[1], SEEN in said[2]] == [True] * 3, said

    workspace.planfence("hook", "install", "claude", "--project", workspace.path, "--sandbox")
    config = workspace.path / ".git" / "config"
    before = config.read_text()
    results = run_probes(claude, model_server, workspace, tmp_path / "home", config)
    said = [content_text(r["content"]) for r in results]
    assert [r.get("is_error") for r in results] == [True] * 4, said
    assert "No such file or directory" in said[0], said  # the cluster folder is hidden
    assert CONNECTED not in said[1] and SEEN not in said[2], said  # and the socket
    assert "No such file or directory" in said[2], said
    assert config.read_text() == before, said

    workspace.planfence("hook", "uninstall", "claude", "--project", workspace.path)
    assert json.loads(local.read_text()) == {"permissions": {"allow": ["Bash"]}}


def test_claude_sandbox_alone_leaves_the_key_readable(
    claude: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path
) -> None:
    """Claude Code's sandbox without our paths (what `/sandbox` turns on): the key is read
    and the socket seen; only Unix sockets (seccomp) and .git/config are closed by default.
    So `--sandbox`'s denyRead is what hides the fence (docs/HOOKS.md)."""
    local = workspace.path / ".claude" / "settings.local.json"
    local.parent.mkdir()
    scalars = {"enabled": True, "failIfUnavailable": True, "allowUnsandboxedCommands": False}
    local.write_text(json.dumps({"permissions": {"allow": ["Bash"]}, "sandbox": scalars}))
    workspace.planfence("hook", "install", "claude", "--project", workspace.path, "--command")
    config = workspace.path / ".git" / "config"
    results = run_probes(claude, model_server, workspace, tmp_path / "home", config)
    said = [content_text(r["content"]) for r in results]
    assert [bool(r.get("is_error")) for r in results] == [False, True, False, True], said
    assert READ_OK in said[0] and SEEN in said[2], said


# -- Codex: what its sandbox modes allow (measured; docs/HOOKS.md, "The sandbox") -----------


def codex_probes(ws: Workspace) -> tuple[list[Turn], list[str]]:
    """exec_command calls: read the owner's key, connect to its socket, append to .git/config
    and cluster.toml, create .codex/hooks.json; with what each prints on success."""
    cluster = ws.path / ".planfence"
    (key,) = (cluster / "keys").glob("*.key")
    sock = socket_path(cluster)
    codes = {
        "read key": f"print({READ_OK!r}, len(open({str(key)!r}).read()))",
        "connect socket": "import socket; s = socket.socket(socket.AF_UNIX); "
        f"s.connect({str(sock)!r}); print({CONNECTED!r})",
        "write .git/config": f"open({str(ws.path / '.git' / 'config')!r}, 'a').write('#'); "
        f"print({WROTE!r})",
        "write cluster.toml": f"open({str(cluster / 'cluster.toml')!r}, 'a').write('#'); "
        f"print({WROTE!r})",
        "write .codex/": f"import os; os.makedirs({str(ws.path / '.codex')!r}, exist_ok=True); "
        f"open({str(ws.path / '.codex' / 'hooks.json')!r}, 'a').write(''); print({WROTE!r})",
    }
    turns: list[Turn] = [
        ToolCall("exec_command", {"cmd": f'{sys.executable} -c "{code}"'})
        for code in codes.values()
    ]
    return [*turns, Text("done")], [READ_OK, CONNECTED, WROTE, WROTE, WROTE]


# What each probe of codex_probes did (True: it succeeded), per sandbox mode; docs/HOOKS.md
# shows this table. "+network" is workspace-write with sandbox_workspace_write.network_access;
# "profile" is no --sandbox but the permission profile of fence_profile.
MEASURED = {
    "read-only": (True, False, False, False, False),
    "workspace-write": (True, False, False, True, False),
    "workspace-write+network": (True, True, False, True, False),
    "danger-full-access": (True, True, True, True, True),
    "profile": (False, False, False, False, False),
}


def fence_profile(cluster: Path) -> dict[str, Any]:
    """config.toml keys selecting a permission profile: Codex's :workspace, with no access to
    the cluster folder and the hook socket directory (the table docs/HOOKS.md shows)."""
    paths = [os.path.realpath(cluster), str(socket_path(cluster).parent)]
    # /tmp read-only: as a writable root, Codex 0.171.0 put empty .git, .codex and .agents
    # placeholders in it (its metadata masks), which turned /tmp into a git worktree
    filesystem = {":slash_tmp": "read", **dict.fromkeys(paths, "none")}
    profile = {"extends": ":workspace", "filesystem": filesystem}
    return {"default_permissions": "planfence", "permissions": {"planfence": profile}}


@pytest.mark.parametrize("mode", list(MEASURED))
def test_codex_sandbox_modes(
    codex: Path, model_server: ModelServer, workspace: Workspace, tmp_path: Path, mode: str
) -> None:
    """`codex exec --sandbox MODE`, or the permission profile (no PlanFence hook: the sandbox
    alone) against the probes."""
    home, codex_home = tmp_path / "home", tmp_path / "codex-home"
    config = write_codex_config(codex_home, model_server.url, trusted_projects=(workspace.path,))
    turns, markers = codex_probes(workspace)
    model_server.script(OPENAI, turns)
    sandbox, _, network = mode.partition("+")
    extra = ["--sandbox", sandbox] if mode != "profile" else []
    extra += ["-c", "sandbox_workspace_write.network_access=true"] if network else []
    if mode == "profile":
        keys = tomllib.loads(config.read_text()) | fence_profile(workspace.path / ".planfence")
        config.write_text(tomli_w.dumps(keys))
    placeholders = [Path(tempfile.gettempdir(), name) for name in (".git", ".codex", ".agents")]
    there = [p.exists() for p in placeholders]
    run = run_bounded(
        [str(codex), "exec", *extra, "--skip-git-repo-check", "--json", "."],
        workspace.path,
        codex_env(model_server.url, home, codex_home),
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert [p.exists() for p in placeholders] == there  # /tmp is no git worktree afterwards
    assert_scripted_and_offline(model_server, OPENAI, turns)
    outputs = codex_call_outputs(model_server)
    did = tuple(marker in out for marker, out in zip(markers, outputs, strict=True))
    assert did == MEASURED[mode], outputs
