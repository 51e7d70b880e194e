"""Where the hook sockets are, and the lean command line a command hook runs per call.

    socket_dir    the user's state directory's `hookd/` (mode 0700)
    socket_path   the hook socket of one cluster folder there (`owner/hookd.py` serves it)
    lean_line     a hook command line made lean: `PYTHON -I -S .../hook/leanrun.py
                  --socket SOCKET` in front of the ordinary `planfence hook CLIENT ...`
                  line, where a cluster folder serves the project; else the line as it is
                  (Codex, Gemini CLI, Copilot CLI, Cursor, Windsurf)
    lean_argv     the same for a command given as a list (our OpenCode plugin spawns one)
    is_lean       whether a command line runs the lean client (`hook status` says so)
    lean_handler  Claude Code's exec-form command handler made lean the same way (a shell
                  line): its SessionStart, where its other events go to the owner's http door

The lean client starts an interpreter with nothing but what it loads by itself (no site
packages, no environment options) and hands the payload to the owner's socket; where the
owner does not answer it (another cluster, installation or environment) it runs the rest of
its line, the ordinary hook, on the same payload (`hook/lean.py`). The line still reads
`... planfence hook CLIENT ...`, so everything that recognises our handler still does.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from ..place.paths import state_dir


def socket_dir() -> Path:
    """Where hook sockets live: the user's state directory's `hookd/` (mode 0700)."""
    return state_dir() / "hookd"


def socket_path(cluster: Path) -> Path:
    """The hook socket of the cluster folder `cluster` (keyed by its real path)."""
    import hashlib

    real = os.path.realpath(cluster).encode()
    return socket_dir() / f"{hashlib.blake2b(real, digest_size=12).hexdigest()}.sock"


def lean_script() -> Path:
    """The lean client's script (`hook/leanrun.py`, part of the package)."""
    return Path(__file__).resolve().parents[1] / "hook" / "leanrun.py"


def lean_prefix(root: Path | None, cluster: Path | None = None) -> list[str] | None:
    """`PYTHON -I -S .../hook/leanrun.py --socket SOCKET`, what goes in front of an ordinary
    `planfence hook CLIENT ...` command, when a cluster folder serves `root` (`cluster`, else
    the one found for it) and its socket path fits AF_UNIX; None otherwise (or for `root`
    None: a user-wide install names no one cluster)."""
    if root is None or not lean_script().is_file():
        return None
    from ...core.errors import ConfigError
    from ..place.config import NoCluster, find_cluster

    try:
        cdir = find_cluster(cluster, root)
    except (NoCluster, ConfigError):
        return None
    where = socket_path(cdir.root)
    if len(os.fsencode(where)) >= 108:
        return None
    return [sys.executable, "-I", "-S", str(lean_script()), "--socket", str(where)]


def lean_line(line: str, root: Path | None, cluster: Path | None = None) -> str:
    """`line` (an ordinary `planfence hook CLIENT ...` command line) behind the lean client
    where `lean_prefix` gives one; `line` as it is otherwise."""
    import shlex

    lean = lean_prefix(root, cluster)
    return line if lean is None else f"{shlex.join(lean)} {line}"


def lean_argv(argv: list[str], root: Path | None, cluster: Path | None = None) -> list[str]:
    """`argv` (an ordinary `planfence hook CLIENT ...` command, as a list) behind the lean
    client where `lean_prefix` gives one; `argv` as it is otherwise."""
    return [*(lean_prefix(root, cluster) or []), *argv]


def is_lean(command: str) -> bool:
    """Whether the hook command line `command` runs the lean client."""
    return "leanrun.py" in command and " --socket " in command


def lean_handler(
    handler: dict[str, Any], root: Path, cluster: Path | None = None
) -> dict[str, Any]:
    """Claude Code's exec-form `handler` ({"command": ABS, "args": [...]}) as a shell line
    behind the lean client (`lean_line`), or `handler` as it is where no cluster serves
    `root`."""
    import shlex

    args = handler.get("args")
    if not isinstance(args, list):
        return handler
    line = shlex.join([str(handler["command"]), *map(str, args)])
    lean = lean_line(line, root, cluster)
    if lean == line:
        return handler
    return {**{k: v for k, v in handler.items() if k != "args"}, "command": lean}
