"""The `planfence` command: the composition root, one module per command group.

`main` runs the click group of `main.py`; the modules here are thin shells over the library.
"""

from __future__ import annotations

import sys
from typing import NoReturn

# `planfence hook CLIENT`: the clients the hook speaks for (`workspace.model.payload.AGENTS`,
# kept equal by tests/workspace/test_clients.py; not imported here, to keep this path lean).
HOOK_CLIENTS = ("claude", "codex", "gemini", "opencode", "copilot", "cursor", "windsurf")


def main() -> None:
    """Console-script entry point.

    `planfence hook CLIENT` (claude, codex, gemini, ...) runs before every agent tool call: it goes to the lean hook
    module before click, rich or anything else heavy is imported, and exits 2 on any failure
    (even an import error), never 1. `hook claude --help` is help like any other command's.
    """
    argv = sys.argv[1:]
    asks_help = "--help" in argv[2:]
    if len(argv) >= 2 and argv[0] == "hook" and argv[1] in HOOK_CLIENTS and not asks_help:
        _hook(argv[1], argv[2:])
    if argv[:1] == ["authorize"]:  # one-shot: decided without click when the args are plain
        from .oneshot import run_authorize

        run_authorize(argv[1:])
    if argv[:2] == ["owner", "serve"]:  # an ordinary owner starts without click
        from ..owners.main import serve_plain

        serve_plain(argv[2:])
    from .main import app

    app.main(prog_name="planfence")


def _cannot_start(agent: str, exc: BaseException) -> int:
    """Print why the hook cannot start as a block, in client `agent`'s form where its
    adapter loads (`clients.table.answered`: some clients skip a bare exit 2), and return
    the exit code."""
    reason = f"PlanFence blocked this call: the hook cannot start ({exc!r})"
    try:
        from ..workspace.clients.table import BLOCK, Mapped, answered

        code, err, out = answered(agent, Mapped(b""), (BLOCK, reason, ""))
    except BaseException:
        code, err, out = 2, reason, ""
    for stream, text in ((sys.stdout, out), (sys.stderr, err)):
        if text:
            stream.write(text + "\n")
    return code


def _hook(agent: str, args: list[str]) -> NoReturn:
    """Run the hook as the short-lived process it is: no cyclic garbage collection while it
    imports, and no interpreter teardown once it has answered (~10 ms of the budget). The
    running workspace owner answers when it serves the call's folder (`hookclient`, standard
    library only); otherwise the hook runs in this process (`hook.main`)."""
    import gc
    import os

    gc.disable()
    try:
        from ..workspace.hook.client import run

        code = run(agent, args)
    except BaseException as exc:  # a broken install must block, not let calls through
        code = _cannot_start(agent, exc)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
