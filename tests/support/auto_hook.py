"""Claude Code's hook calls in automatic mode (`planfence hook claude --mode auto`), as fresh
hook processes fed the recorded payloads (tests/fixtures/hooks) with the tool call changed.

SESSION     the recorded Claude Code payloads' session; PLAN its automatic plan
claude      a payload for one tool call (event, tool, input, tool_use_id number `n`)
read        the PostToolUse of a Read: (exit code, stderr)
write_call  a Write, PreToolUse or PostToolUse: (exit code, stderr)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planfence_net.workspace.plans.session import auto_plan
from support.workspace import payload, run_hook

AUTO = ("--mode", "auto")
SESSION = "9f2c6a1e-4b7d-4e0a-9c55-2f1d8e7b3a10"  # the recorded Claude Code payloads' session
PLAN = auto_plan(SESSION)


def claude(event: str, tool: str, tool_input: dict[str, Any], repo: Path, n: int) -> dict[str, Any]:
    return {
        **payload("claude-read", repo),
        "hook_event_name": event,
        "tool_name": tool,
        "tool_input": tool_input,
        "tool_use_id": f"toolu_{n:04}",
    }


def read(repo: Path, rel: str, n: int = 0) -> tuple[int, str]:
    """Claude Code's PostToolUse of a Read of `rel`."""
    data = claude("PostToolUse", "Read", {"file_path": str(repo / rel)}, repo, n)
    return run_hook("claude", data, *AUTO)


def write_call(repo: Path, rel: str, event: str = "PreToolUse", n: int = 1) -> tuple[int, str]:
    """Claude Code's Write of `rel` (PreToolUse, or PostToolUse after it landed)."""
    data = claude(event, "Write", {"file_path": str(repo / rel), "content": "x\n"}, repo, n)
    return run_hook("claude", data, *AUTO)
