"""The hook's trust anchor lives outside the repository, and its exemption runs no code.

Every test runs real `planfence workspace serve` owners and real `planfence hook` processes.
The attacker's cluster is a real one: a decoy worktree served by its own owner, whose plan
is fresh, so that owner truly answers "no drift"; its roster, workspace.json and 0600 key
are copied into the victim's repository (a vendored `.planfence/`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from support.cluster import PLANFENCE
from support.workspace import git, make_repo, payload, run_cli, run_hook, served, write

FILES = {"src/b.ts": "export const b = 1;\n", "auth.ts": "export const timeout = 30;\n"}


def trust(repo: Path, *args: str) -> None:
    code, out, err = run_cli("workspace", "trust", "fix", *args, cwd=repo)
    assert code == 0, out + err


def ship(decoy: Path, into: Path) -> Path:
    """Copy the decoy's cluster folder (roster, workspace.json, keys at 0600) to `into`."""
    into.mkdir(parents=True)
    for name in ("cluster.toml", "workspace.json"):
        shutil.copy2(decoy / ".planfence" / name, into / name)
    shutil.copytree(decoy / ".planfence" / "keys", into / "keys")
    assert {oct(p.stat().st_mode & 0o777) for p in (into / "keys").iterdir()} == {"0o600"}
    return into


def calls(repo: Path, cwd: Path) -> dict[str, dict[str, object]]:
    edit = payload("claude-edit", repo, file_path=str(repo / "src" / "b.ts"))
    bash = payload("claude-bash", repo, command="rm -rf ../../src")
    return {"edit": {**edit, "cwd": str(cwd)}, "bash": {**bash, "cwd": str(cwd)}}


def test_a_shipped_cluster_folder_never_lets_a_stale_plan_through(tmp_path: Path) -> None:
    victim = make_repo(tmp_path / "victim", FILES)
    decoy = make_repo(tmp_path / "decoy", FILES)
    with served(victim), served(decoy):
        trust(victim, "--target", "src/b.ts")
        trust(decoy, "--target", "src/b.ts")
        vendored = ship(decoy, victim / "vendor" / "lib" / ".planfence")
        git(victim, "add", "-A")
        git(victim, "commit", "-q", "-m", "vendor lib")
        write(victim, {"src/b.ts": "export const b = 2;\n"})  # the victim's plan is stale
        # The decoy's owner really answers "no drift" for its own plan.
        assert run_hook("claude", calls(decoy, decoy)["edit"]) == (0, "")
        for name, call in calls(victim, vendored.parent).items():
            code, reason = run_hook("claude", call)
            assert code == 2, name
            assert "plan 'fix' is stale (critical drift)" in reason.splitlines()[0], reason
            assert "chmod" not in reason

        # The same folder at the root of a repository nobody served: git tracks it, refused.
        other = make_repo(tmp_path / "other", FILES)
        ship(decoy, other / ".planfence")
        git(other, "add", "-A")
        git(other, "commit", "-q", "-m", "ship a cluster")
        for name, call in calls(other, other).items():
            assert run_hook("claude", call) == (
                2,
                f"PlanFence blocked {'Edit of ' + str(other / 'src' / 'b.ts') if name == 'edit' else 'Bash `rm -rf ../../src`'}: "
                f"refusing the cluster folder {other / '.planfence'}: git tracks files in "
                f"{other / '.planfence'} (a repository cannot choose the cluster that checks it)\n",
            ), name
        # `workspace serve` never adopts it either (and so never records it for the hook).
        code, out, err = run_cli("workspace", "serve", other)
        assert (code, err.splitlines()[-1]) == (
            1,
            f"error: refusing the cluster folder {other / '.planfence'}: git tracks files in "
            f"{other / '.planfence'} (a repository cannot choose the cluster that checks it)",
        ), out + err


def test_a_cluster_folder_above_the_working_folder_is_never_taken(tmp_path: Path) -> None:
    decoy = make_repo(tmp_path / "decoy", FILES)
    with served(decoy):
        trust(decoy, "--target", "src/b.ts")
        open_dir = tmp_path / "open"
        open_dir.mkdir()
        os.chmod(open_dir, 0o777)  # like /tmp: anyone may put a .planfence/ here
        ship(decoy, open_dir / ".planfence")
        work = open_dir / "work"  # not a git worktree, not served
        write(work, FILES)
        for name, call in calls(work, work).items():
            code, reason = run_hook("claude", call)
            assert code == 2, name
            assert f"no workspace cluster serves {work}" in reason, reason
        # A git worktree's own root folder, group-writable: refused with one line.
        repo = make_repo(open_dir / "repo", FILES)
        ship(decoy, repo / ".planfence")
        os.chmod(repo / ".planfence", 0o775)
        code, reason = run_hook("claude", calls(repo, repo)["edit"])
        assert (code, reason.split(": ", 1)[1]) == (
            2,
            f"refusing the cluster folder {repo / '.planfence'}: {repo / '.planfence'} is "
            "writable by group or others (mode 775)\n",
        )


def test_the_exemption_covers_only_our_executable_running_no_command(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    impostor = tmp_path / "bin" / "planfence"
    impostor.parent.mkdir()
    impostor.write_text("#!/bin/sh\ntouch pwned\n")
    impostor.chmod(0o755)
    with served(repo):
        trust(repo, "--read", "auth.ts", "--target", "src/b.ts")
        write(repo, {"src/b.ts": "export const b = 2;\n"})  # stale
        ours = str(PLANFENCE)
        for command in (
            f"{ours} workspace trust fix --read auth.ts --evidence 'touch pwned'",
            f"{impostor} workspace check fix",
            f"{ours} workspace serve / --listen 0.0.0.0:80",
            "planfence workspace check fix",  # a bare name: PATH, aliases, functions
        ):
            code, reason = run_hook("claude", payload("claude-bash", repo, command=command))
            assert code == 2, command
            assert "plan 'fix' is stale (critical drift)" in reason.splitlines()[0], command
        for command, hook in (
            (f"{ours} hook uninstall claude", "uninstall"),
            (f"{ours} hook install codex --trust", "install"),
        ):  # never from the agent's shell, stale plan or not
            code, reason = run_hook("claude", payload("claude-bash", repo, command=command))
            assert (code, reason.split("`: ", 1)[1]) == (
                2,
                f"`planfence hook {hook}` is run by the agent's client (or git) and the user, "
                f"never from the agent's shell. Do not try another way; ask the user.\n",
            ), command
        assert not (repo / "pwned").exists()
        # What a blocked agent needs still passes: our own check, and a re-trust without
        # evidence (checked by `workspace trust` itself).
        for command in (f"{ours} workspace check fix", f"{ours} workspace trust fix --read a"):
            assert run_hook("claude", payload("claude-bash", repo, command=command)) == (0, "")


def test_what_serve_made_is_trusted_under_a_group_writable_umask(tmp_path: Path) -> None:
    before = os.umask(0o002)  # user private groups: files 0664, folders 0775
    try:
        repo = make_repo(tmp_path / "repo", FILES)
        with served(repo):
            trust(repo, "--target", "src/b.ts")
            assert oct((repo / ".planfence").stat().st_mode & 0o777) == "0o700"
            records = list((Path(os.environ["XDG_STATE_HOME"]) / "planfence" / "served").iterdir())
            assert {oct(p.stat().st_mode & 0o777) for p in records} == {"0o600"}
            assert run_hook("claude", calls(repo, repo)["edit"]) == (0, "")
    finally:
        os.umask(before)
