"""The stale-write benchmark's scenarios through the real clients that run here (Claude Code,
Gemini CLI, OpenCode), for `scripts/bench-stale-writes --real`: each scenario one client run
against the scripted model endpoint, in a fresh served repository with `hook install`.

    sibling     read lib.py; another process rewrites it; write main.py (refused: prevented)
    own-edits   read lib.py; write main.py three times (a refusal is a false refusal)

`run(client, tmp)` returns {scenario: (refused, attempted)} and the clients' wall seconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.workspace import make_repo, served

from .clients import ClientRun, find_clients, run_claude
from .model_server import ANTHROPIC, CHAT, GEMINI, ModelServer, Reply, Text, ToolCall, Turn
from .newclients import run_gemini, run_opencode
from .turns import claude_tool_results, content_text
from .workspaces import Workspace

FILES = {"lib.py": "v = 1\n", "main.py": "import lib\n"}
BLOCKED = "PlanFence blocked"


def _tools(
    client: str, root: Path
) -> tuple[Callable[[str], ToolCall], Callable[[str, str], ToolCall]]:
    """(read, write) turns in the client's own tool names."""
    if client == "claude":
        return (lambda p: ToolCall("Read", {"file_path": str(root / p)}),
                lambda p, c: ToolCall("Write", {"file_path": str(root / p), "content": c}))  # fmt: skip
    if client == "gemini":
        return (lambda p: ToolCall("read_file", {"file_path": str(root / p)}),
                lambda p, c: ToolCall("write_file", {"file_path": str(root / p), "content": c}))  # fmt: skip
    return (lambda p: ToolCall("read", {"filePath": str(root / p)}),
            lambda p, c: ToolCall("write", {"filePath": str(root / p), "content": c}))  # fmt: skip


def _results(client: str, server: ModelServer) -> list[str]:
    """The tool results the model last received, as text, in order."""
    if client == "claude":
        return [content_text(r["content"]) for r in claude_tool_results(server)]
    if client == "gemini":
        body = server.model_requests(GEMINI)[-1]
        return [
            json.dumps(part["functionResponse"])
            for content in body["contents"]
            for part in content.get("parts", [])
            if "functionResponse" in part
        ]
    body = server.model_requests(CHAT)[-1]
    return [json.dumps(m.get("content")) for m in body["messages"] if m.get("role") == "tool"]


def _run(client: str, server: ModelServer, root: Path, home: Path) -> ClientRun:
    if client == "claude":
        path = find_clients().claude
        assert path is not None
        return run_claude(path, server.url, root, home, "Use lib in main.")
    if client == "gemini":
        return run_gemini(server.url, root, home, "Use lib in main.")
    return run_opencode(server.url, root, home, "Use lib in main.")


API = {"claude": ANTHROPIC, "gemini": GEMINI, "opencode": CHAT}


def scenario(client: str, tmp: Path, name: str) -> tuple[int, int, float]:
    """(refused writes, writes, client seconds) of scenario `name` through the real client."""
    root = make_repo(tmp / f"{client}-{name}", FILES)
    ws = Workspace(root)
    with served(root):
        extra = ("--command",) if client == "claude" else ()
        ws.planfence("hook", "install", client, "--project", root, *extra)
        read, write = _tools(client, root)
        turns: list[Turn]
        if name == "sibling":

            def change_then_write(body: dict[str, Any]) -> ToolCall:
                (root / "lib.py").write_text("v = 2  # a sibling\n")
                return write("main.py", "import lib\nlib.v\n")

            turns, writes = [read("lib.py"), Reply(change_then_write), Text("done")], [1]
        else:
            turns = [read("lib.py"), *(write("main.py", f"import lib\n# {n}\n") for n in range(3))]
            turns, writes = [*turns, Text("done")], [1, 2, 3]
        with ModelServer() as server:
            server.script(API[client], turns)
            started = time.monotonic()
            run = _run(client, server, root, tmp / f"{client}-{name}-home")
            seconds = time.monotonic() - started
            assert run.returncode == 0, run.stdout + run.stderr
            results = _results(client, server)
    return sum(BLOCKED in results[i] for i in writes), len(writes), seconds


def run(client: str, tmp: Path) -> dict[str, tuple[int, int, float]]:
    """Every scenario of `client` through the real client."""
    return {name: scenario(client, tmp, name) for name in ("sibling", "own-edits")}
