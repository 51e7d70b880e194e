"""The `planfence` command: the composition root, one module per command group.

`main` builds the typer app; the modules here are thin shells over the library.
"""

from __future__ import annotations

import sys
from typing import NoReturn


def main() -> None:
    """Console-script entry point.

    `planfence hook claude|codex` runs before every agent tool call: it goes to the lean hook
    module before typer, rich or anything else heavy is imported, and exits 2 on any failure
    (even an import error), never 1.
    """
    argv = sys.argv[1:]
    if len(argv) >= 2 and argv[0] == "hook" and argv[1] in ("claude", "codex"):
        _hook(argv[1], argv[2:])
    from .main import app

    app()


def _hook(agent: str, args: list[str]) -> NoReturn:
    """Run the hook as the short-lived process it is: no cyclic garbage collection while it
    imports, and no interpreter teardown once it has answered (~10 ms of the budget)."""
    import gc
    import os

    gc.disable()
    try:
        from ..workspace.hook import main as hook_main

        code = hook_main(agent, args)
    except BaseException as exc:  # a broken install must block, not let calls through
        sys.stderr.write(f"PlanFence blocked this call: the hook cannot start ({exc!r})\n")
        code = 2
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
