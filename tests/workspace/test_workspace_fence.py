"""The agent cannot lower its own fence (issue 17, item 3), each attack against a real
`planfence workspace serve` process and, for the hook, a real `planfence hook` process:
a bare trust, a narrower re-trust, `--fresh`/`--narrow`/`--make-current` from the agent, a
declared file that does not exist, another plan taking over the current one, a non-UTF-8 name.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from support.cluster import PLANFENCE
from support.workspace import make_repo, payload, quiet, run_cli, run_hook, served, write
from support.writers import without_writers

FILES = {
    "auth.ts": "export const timeout = 30;\n",
    "src/db.ts": "export const pool = 4;\n",
    "README.md": "# app\n",
}
CREATE = "(--read FILE, --target FILE, or --new FILE for one it will create)"


def trust(repo: Path, plan: str, *args: str) -> tuple[int, str]:
    code, out, err = run_cli("workspace", "trust", plan, *args, cwd=repo)
    return code, out + quiet(err)


def check(repo: Path, *args: str) -> tuple[int, str]:
    code, out, err = run_cli("workspace", "check", *args, cwd=repo)
    return code, without_writers(out) + quiet(err)


def test_a_plan_that_declares_no_file_is_refused(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert trust(repo, "auth-fix") == (
            1,
            f"error: plan 'auth-fix' declares no file: a trusted state must name what the "
            f"plan depends on {CREATE}\n",
        )
        assert trust(repo, "auth-fix", "--evidence", "true", "--lockfiles", "none")[0] == 1
        assert trust(repo, "auth-fix", "--read", "auth.ts")[0] == 0
        write(repo, {"auth.ts": "export const timeout = 5;\n"})
        # the bare re-trust the block message once led to: still refused, the plan still stale
        assert trust(repo, "auth-fix")[0] == 1
        assert check(repo, "auth-fix")[0] == 2


def test_a_re_trust_declares_at_least_what_the_trusted_state_declared(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert trust(repo, "auth-fix", "--read", "auth.ts", "--target", "src/db.ts")[0] == 0
        write(repo, {"auth.ts": "export const timeout = 5;\n"})
        assert trust(repo, "auth-fix", "--read", "README.md") == (
            1,
            "error: trusting auth-fix again would declare less than its trusted state: "
            "ws:auth.ts (read), ws:src/db.ts (target) no longer declared; declare them again "
            "(dropping them is the user's decision: `--narrow`, which the hook never lets an "
            "agent run)\n",
        )
        # a target demoted to a read drops its role
        code, out = trust(repo, "auth-fix", "--read", "auth.ts", "--read", "src/db.ts")
        assert (code, out.splitlines()[0].split(": ", 1)[1]) == (
            1,
            "trusting auth-fix again would declare less than its trusted state: "
            "ws:src/db.ts (target) no longer declared; declare them again (dropping them is "
            "the user's decision: `--narrow`, which the hook never lets an agent run)",
        )
        code, out = trust(repo, "auth-fix", "--read", "auth.ts", "--target", "src/db.ts")
        assert (code, out.split(":")[0]) == (0, "trusted auth-fix (trust 2)")
        code, out = trust(repo, "auth-fix", "--read", "README.md", "--narrow")
        assert (code, out.split(":")[0]) == (0, "trusted auth-fix (trust 3)")


def test_a_declared_file_must_exist_unless_declared_new(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert trust(repo, "auth-fix", "--read", "auht.ts") == (
            1,
            "error: declared file does not exist: ws:auht.ts; check the path, or declare a "
            "file the plan will create with --new\n",
        )
        assert trust(repo, "auth-fix", "--read", "src") == (
            1,
            "error: declared file does not exist: ws:src (not a regular file); check the "
            "path, or declare a file the plan will create with --new\n",
        )
        assert trust(repo, "auth-fix", "--new", "auth.ts") == (
            1,
            "error: --new file already exists: ws:auth.ts; declare it with --target\n",
        )
        code, out = trust(repo, "auth-fix", "--read", "auth.ts", "--new", "src/session.ts")
        assert (code, out.split(";")[0]) == (
            0,
            "trusted auth-fix (trust 1): 1 read, 0 target, 0 lockfile, 0 evidence",
        )
        assert check(repo, "auth-fix")[0] == 0
        write(repo, {"src/session.ts": "// someone else made it\n"})
        assert check(repo, "auth-fix") == (
            2,
            "Workspace drift detected since the previous trusted state:\n"
            "- 1 file the plan will modify changed: src/session.ts\n"
            "Drift class: critical\n",
        )


def test_trusting_another_plan_keeps_the_current_plan(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    selection = repo / ".planfence" / "workspace.json"
    with served(repo):
        assert trust(repo, "auth-fix", "--read", "auth.ts")[0] == 0
        write(repo, {"auth.ts": "export const timeout = 5;\n"})
        code, out = trust(repo, "other", "--read", "README.md")
        assert (code, out.splitlines()[1:]) == (
            0,
            [
                "the current plan stays auth-fix (sessions without a plan of their own are "
                "checked against it); other is bound to no session"
            ],
        )
        # Both were trusted without a session: any session without its own plan may use them.
        assert json.loads(selection.read_text()) == {
            "current": "auth-fix",
            "shared": ["auth-fix", "other"],
        }
        assert check(repo)[0] == 2  # still the stale auth-fix, not the fresh other
        code, out = trust(repo, "third", "--read", "README.md", "--session", "s1")
        assert out.splitlines()[1:] == [
            "the current plan stays auth-fix (sessions without a plan of their own are "
            "checked against it)"
        ]
        assert trust(repo, "other", "--read", "README.md", "--make-current")[0] == 0
        assert json.loads(selection.read_text()) == {
            "current": "other",
            "shared": ["auth-fix", "other"],
            "sessions": {"s1": "third"},
        }
        assert check(repo)[0] == 0


AGENT_COMMANDS = [
    ("planfence workspace trust auth-fix --read auth.ts --fresh", "--fresh"),
    ("planfence workspace trust auth-fix --read README.md --narrow", "--narrow"),
    ("planfence workspace trust other --read README.md --make-current", "--make-current"),
    ("planfence workspace trust auth-fix --read auth.ts '--fr''esh'", "--fresh"),
    ("planfence workspace trust auth-fix --read auth.ts --fresh=1", "--fresh"),
    ("cd src && /opt/x/pf workspace trust auth-fix --read ../auth.ts --narrow", "--narrow"),
]


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_the_hook_never_lets_an_agent_pass_a_person_flag(tmp_path: Path, agent: str) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        assert trust(repo, "auth-fix", "--read", "auth.ts")[0] == 0
        assert run_hook(agent, payload(f"{agent}-bash", repo, command="ls"))[0] == 0  # fresh
        for command, flag in AGENT_COMMANDS:
            shown = command if len(command) <= 60 else command[:57] + "..."
            assert run_hook(agent, payload(f"{agent}-bash", repo, command=command)) == (
                2,
                f"PlanFence blocked Bash `{shown}`: {flag} lowers the plan's fence and is the "
                f"user's decision, never the agent's. Do not try another way; ask the user.\n",
            )


def test_a_name_that_is_not_utf8_gives_one_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    (repo / "caf\xe9.ts".encode("latin-1").decode(errors="surrogateescape")).write_text("x\n")
    with served(repo):
        proc = subprocess.run(
            [PLANFENCE, "workspace", "trust", "p", "--read", b"caf\xe9.ts"],
            cwd=repo,
            capture_output=True,
            timeout=60,
        )
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        1,
        b"",
        b"error: 'caf\\\\xe9.ts': file names must be UTF-8 (keys are UTF-8 text)\n",
    )


def test_moving_a_session_off_a_stale_plan_is_a_re_trust_of_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    edit = payload("claude-edit", repo)
    session = edit["session_id"]
    with served(repo):
        assert trust(repo, "a", "--read", "auth.ts", "--session", session)[0] == 0
        # a is fresh: the session may move to a plan about something else
        assert trust(repo, "b", "--read", "README.md", "--session", session)[0] == 0
        write(repo, {"README.md": "# app, edited by someone else\n"})
        assert run_hook("claude", edit)[0] == 2  # b is stale
        assert trust(repo, "c", "--read", "auth.ts", "--session", session) == (
            1,
            f"error: trusting c for session {session} would replace the stale plan b and "
            f"would declare less than its trusted state: ws:README.md (read) no longer "
            f"declared; declare them again (dropping them is the user's decision: "
            f"`--narrow`, which the hook never lets an agent run)\n",
        )
        assert run_hook("claude", edit)[0] == 2  # still checked against the stale b
        assert (
            trust(repo, "c", "--read", "auth.ts", "--read", "README.md", "--session", session)[0]
            == 0
        )
        assert run_hook("claude", edit) == (0, "")
