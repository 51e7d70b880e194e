"""`planfence hook install|uninstall|status` for the clients whose hooks live in a hook file
of their own (Gemini CLI, Copilot CLI, Cursor, Windsurf: `installers.hookfiles`) or in our
OpenCode plugin (`installers.opencodeplugin`), and `hook status` of any client. The `hook`
group (`cli/hook.py`) calls these; each is a thin shell over the installers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .support import echo_json


def install_other(
    agent: str,
    project: Path,
    cluster: Path | None,
    user: bool,
    timeout: float | None,
    explicit: bool,
    json_out: bool,
) -> None:
    """`hook install AGENT` (a client with a hook file, or OpenCode): write it, mark the
    project, print what was written (`--json`: the file's content)."""
    from ..workspace.installers import clients as installer
    from ..workspace.place.paths import mark

    if agent == "opencode":
        from ..workspace.installers.opencodeplugin import install as install_plugin

        path = install_plugin(
            project, cluster=cluster, user=user, timeout=timeout, explicit=explicit
        )
    else:
        from ..workspace.installers.hookfiles import install as install_file

        path = install_file(
            agent, project, cluster=cluster, user=user, timeout=timeout, explicit=explicit
        )
    root = installer.project_root(project)
    if not user:
        mark(root, cluster.resolve() if cluster is not None else None)
    if json_out:
        echo_json({"agent": agent, "path": str(path), "config": shown(path)})
        return
    click.echo(f"installed the PlanFence hooks for {agent} in {path}")
    click.echo(installer.unserved_note(root, cluster), nl=False, err=True)
    if agent == "gemini":
        from ..workspace.installers.clientstatus import gemini_off

        off = gemini_off(root, [{"command": ""}])
        if off is not None:
            click.echo(f"warning: {off[1]}\n  to activate: {off[2]}", err=True)
    click.echo(f"check: planfence hook status {agent} --project {root}")


def shown(path: Path) -> Any:
    """A config written, as `--json` shows it: JSON as a value, a plugin as its text."""
    import json

    text = path.read_text()
    return json.loads(text) if path.suffix == ".json" else text


def uninstall_other(agent: str, project: Path, user: bool) -> tuple[Path, bool]:
    """Remove our hooks (OpenCode: our plugin); returns the file and whether ours was there."""
    if agent == "opencode":
        from ..workspace.installers.opencodeplugin import uninstall

        return uninstall(project, user=user)
    from ..workspace.installers.hookfiles import uninstall as uninstall_file

    return uninstall_file(agent, project, user=user)


def client_status(agent: str, root: Path, codex_exe: Path | None) -> Any:
    """`hook status` of one client (`installers.status`, `clientstatus`, `opencodeplugin`)."""
    if agent == "claude":
        from ..workspace.installers.status import claude_status

        return claude_status(root)
    if agent == "codex":
        from ..workspace.installers.codexapp import find_codex
        from ..workspace.installers.status import codex_status

        return codex_status(root, find_codex(codex_exe))
    if agent == "opencode":
        from ..workspace.installers.opencodeplugin import status as opencode_status

        return opencode_status(root)
    from ..workspace.installers.clientstatus import client_status

    return client_status(agent, root)
