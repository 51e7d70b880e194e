"""This installation's `planfence` command (standard library only: the hook imports it)."""

from __future__ import annotations

import sys
from pathlib import Path


def executable() -> str:
    """This installation's `planfence` by absolute path (what a block message tells the
    model to run, and what `hook install` writes), or plain `planfence` when there is none
    next to the interpreter (`python -m planfence_net`)."""
    exe = Path(sys.executable).parent / "planfence"
    return str(exe) if exe.exists() else "planfence"
