"""Every write is decided: tools the hook does not know, paths outside every served worktree,
sessions without a plan of their own, a PostToolUse no allowed PreToolUse announced, and the
hook's own deadline against the agent's. Real `planfence workspace serve` owners and real
`planfence hook` processes throughout.
"""

from __future__ import annotations

import os
from pathlib import Path

from support.cluster import PLANFENCE
from support.workspace import make_repo, payload, run_cli, run_hook, served, write

FILES = {"auth.ts": "export const timeout = 30;\n", "README.md": "# app\n"}


def trust(repo: Path, plan: str, *args: str) -> None:
    code, out, err = run_cli("workspace", "trust", plan, *args, cwd=repo)
    assert code == 0, out + err


def allow(repo: Path, table: str) -> None:
    """Append the [hook] table to the cluster's config."""
    roster = repo / ".planfence" / "cluster.toml"
    roster.write_text(roster.read_text() + "\n[hook]\n" + table)


def test_unknown_tools_are_blocked_unless_the_cluster_allows_them(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    mcp = {**payload("claude-edit", repo), "tool_name": "mcp__fs__write_file"}
    mcp["tool_input"] = {"path": str(repo / "auth.ts"), "content": "x"}
    docs = {**mcp, "tool_name": "mcp__docs__search"}
    shell = {**payload("codex-bash", repo), "tool_name": "shell"}
    with served(repo):
        trust(repo, "fix", "--target", "auth.ts")  # fresh
        roster = repo / ".planfence" / "cluster.toml"
        for agent, call in (("claude", mcp), ("claude", docs), ("codex", shell)):
            assert run_hook(agent, call) == (
                2,
                f"PlanFence blocked {call['tool_name']}: PlanFence does not know what "
                f"{call['tool_name']} changes, so it cannot check it against the plan and "
                f"blocks it. Only the user can allow it (in {roster} under [hook]: allow or "
                "check); do not try another tool for the same change.\n",
            )
        allow(repo, 'allow = ["mcp__docs__.*"]\ncheck = ["shell", "mcp__fs__write_.*"]\n')
        assert run_hook("claude", docs) == (0, "")  # allowed: never checked
        assert run_hook("codex", shell) == (0, "")  # checked: the plan is fresh
        assert run_hook("claude", mcp) == (0, "")
        write(repo, {"auth.ts": "export const timeout = 1;\n"})  # stale
        assert run_hook("claude", docs) == (0, "")
        for agent, call in (("claude", mcp), ("codex", shell)):
            code, reason = run_hook(agent, call)
            assert (code, reason.splitlines()[0]) == (
                2,
                f"PlanFence blocked {call['tool_name']}: plan 'fix' is stale (critical drift).",
            )
        roster.write_text(roster.read_text() + 'outside = "/tmp"\n')
        assert run_hook("claude", docs) == (
            2,
            f"PlanFence blocked mcp__docs__search: {roster}: [hook] outside must be a list "
            "of strings\n",
        )


def test_paths_outside_every_served_worktree_are_blocked_unless_allowed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    (repo / "out").symlink_to(tmp_path)  # a folder link inside the worktree leading out
    scratch = tmp_path / "scratch"
    with served(repo):
        trust(repo, "fix", "--target", "auth.ts")  # fresh
        for path in ("/etc/passwd", "../../x", str(repo / "out" / "x"), str(scratch / "a")):
            call = payload("claude-edit", repo, file_path=path)
            assert run_hook("claude", call) == (
                2,
                f"PlanFence blocked Edit of {path}: {path} is outside every worktree this "
                f"cluster serves, so no plan can speak for it. Only the user can allow such "
                f"paths (in {repo / '.planfence' / 'cluster.toml'} under [hook]: outside).\n",
            ), path
        allow(repo, f'outside = ["{os.path.realpath(scratch)}/*"]\n')
        assert run_hook("claude", payload("claude-edit", repo, file_path=str(scratch / "a"))) == (
            0,
            "",
        )
        code, _ = run_hook("claude", payload("claude-edit", repo, file_path="/etc/passwd"))
        assert code == 2


def test_a_session_without_its_own_plan_never_borrows_another_sessions(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    edit = payload("claude-edit", repo)  # session 9f2c6a1e-...
    with served(repo):
        trust(repo, "theirs", "--target", "auth.ts", "--session", "other-session")
        code, reason = run_hook("claude", edit)
        assert (code, reason.split(": ", 1)[1].split(". ")[0]) == (
            2,
            f"no trusted plan for this session in {repo / '.planfence'}",
        )
        # A plan a person trusted without a session is every such session's plan.
        trust(repo, "theirs", "--target", "auth.ts")
        assert run_hook("claude", edit) == (0, "")


def test_post_tool_use_advances_only_what_the_same_sessions_pre_tool_use_let_through(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    pre, post = payload("claude-edit", repo), payload("claude-post-edit", repo)
    with served(repo):
        trust(repo, "fix", "--target", "auth.ts")
        write(repo, {"auth.ts": "export const timeout = 1;\n"})  # a foreign write
        expected = (
            2,
            f"PlanFence did not record Edit of {repo / 'auth.ts'} in plan 'fix': no "
            f"PreToolUse of this session let this call ({post['tool_use_id']}) through; the "
            "next call will see these files as changed.\n",
        )
        assert run_hook("claude", post) == expected  # no PreToolUse at all
        assert run_hook("claude", {**post, "session_id": "intruder"}) == expected
        code, reason = run_hook("claude", pre)
        assert (code, reason.splitlines()[0]) == (
            2,
            f"PlanFence blocked Edit of {repo / 'auth.ts'}: plan 'fix' is stale (critical drift).",
        )
        # The same write, announced by an allowed PreToolUse of this session, is recorded;
        # another session's PostToolUse with the same tool_use_id is not.
        write(repo, {"auth.ts": "export const timeout = 30;\n"})
        assert run_hook("claude", pre) == (0, "")
        write(repo, {"auth.ts": "export const timeout = 60;\n"})
        assert run_hook("claude", {**post, "session_id": "intruder"}) == expected
        assert run_hook("claude", post) == (0, "")
        assert run_hook("claude", pre) == (0, "")


def test_hook_install_keeps_the_hooks_deadline_below_the_handlers(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    for timeout in ("25", "30", "0", "-1"):
        code, out, err = run_cli(
            "hook", "install", "codex", "--project", repo, "--timeout", timeout
        )
        assert (code, out, err.splitlines()) == (
            1,
            "",
            [
                f"error: --timeout {float(timeout):g}: the hook's deadline must be more than 0 "
                "and at most 20 s, 10 s below the 30 s the agent waits for the handler (past "
                "that the agent runs the call)"
            ],
        ), timeout
    assert not (repo / ".codex").exists()
    code, out, err = run_cli(
        "hook", "install", "codex", "--project", repo, "--timeout", "15", "--json"
    )
    assert code == 0, out + err
    hooks = (repo / ".codex" / "hooks.json").read_text()
    assert f'"command": "{PLANFENCE} hook codex --mode auto --timeout 15",' in hooks


def test_a_session_bound_plan_is_retrusted_for_the_same_session(tmp_path: Path) -> None:
    """The block text's re-trust keeps a session's own plan its own (without `--session`
    the re-trust would share it with every session)."""
    repo = make_repo(tmp_path / "repo", FILES)
    edit = payload("claude-edit", repo)
    with served(repo):
        trust(repo, "mine", "--target", "auth.ts", "--session", edit["session_id"])
        write(repo, {"auth.ts": "export const timeout = 1;\n"})  # stale
        code, reason = run_hook("claude", edit)
        assert code == 2
        assert f"workspace trust mine --session {edit['session_id']} ..." in reason, reason
