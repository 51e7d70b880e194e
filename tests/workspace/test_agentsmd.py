"""`workspace trust PLAN --from AGENTS.md`: the dependency lists people already write, read
and checked against a real workspace owner on 127.0.0.1 before anything is recorded."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import anyio
import pytest

from planfence_net.cluster.folder import ClusterDir
from planfence_net.core.errors import ConfigError
from planfence_net.workspace.model.depslist import git_blob_id
from planfence_net.workspace.plans.agentsmd import Section, choose, sections, slug
from planfence_net.workspace.plans.trust import TrustSpec, wait_trust
from support.workspace import make_repo, payload, quiet, run_cli, run_hook, served, write

SCHEMA = "create table t (id int);\n"
TYPES = "export type T = {id: number};\n"
FILES = {"schema.sql": SCHEMA, "src/types.ts": TYPES, "main.py": "print(1)\n", "a.md": "a\n"}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def git_id(text: str) -> str:
    return git_blob_id(text.encode())


def agents_md(schema: str = SCHEMA) -> str:
    return (
        "# Agents\n"
        "\n"
        "## Plan: add-audit-column\n"
        "Steps, then the inputs.\n"
        "### Record dependencies\n"
        f"- schema.sql @ sha256:{sha(schema)[:7]} (owner: db-migration-agent)\n"
        f"- `src/types.ts` @ git:{git_id(TYPES)[:10]}\n"
        "\n"
        "## Plan: drop-legacy\n"
        "Record dependencies:\n"
        f"- main.py @ {git_id('print(1)' + chr(10))[:8]}\n"
    )


def history(repo: Path, plan: str) -> tuple[int, str]:
    code, out, err = run_cli("history", repo / ".planfence", f"plan/{plan}", "--json")
    return code, out + err


def test_a_matching_list_is_declared_as_reads_and_its_drift_blocks(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {**FILES, "AGENTS.md": agents_md()})
    with served(repo):
        code, out, err = run_cli(
            "workspace",
            "trust",
            "add-audit-column",
            "--from",
            "AGENTS.md",
            "--target",
            "main.py",
            "--lockfiles",
            "none",
            "--json",
            cwd=repo,
        )
        assert (code, quiet(err)) == (0, "")
        record = json.loads(out)
        assert record["declaration"] == {
            "ws:file/schema.sql": ["read"],
            "ws:file/src/types.ts": ["read"],
            "ws:file/main.py": ["target"],
            "ws:repo": ["repo"],
            "ws:branch": ["branch"],
            "ws:head": ["head"],
            "ws:status": ["status"],
        }
        write(repo, {"schema.sql": "create table t (id int, at int);\n"})
        code, reason = run_hook(
            "claude", payload("claude-write", repo, file_path=str(repo / "main.py"))
        )
        assert code == 2
        assert reason.splitlines()[:3] == [
            f"PlanFence blocked Write of {repo}/main.py: plan 'add-audit-column' is stale "
            f"(relevant drift).",
            "Workspace drift detected since the previous trusted state:",
            "- 1 previously inspected file changed: schema.sql",
        ]


def test_the_plan_record_keeps_the_list_it_came_from(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {**FILES, "AGENTS.md": agents_md()})
    with served(repo):
        code, out, err = run_cli(
            "workspace",
            "trust",
            "drop-legacy",
            "--from",
            "AGENTS.md",
            "--lockfiles",
            "none",
            cwd=repo,
        )
        assert code == 0, out + err
        assert out.startswith("trusted drop-legacy (trust 1): 1 read, 0 target, 0 lockfile")
        code, out, err = run_cli("workspace", "plans", "--json", cwd=repo)
        assert code == 0, out + err
        (plan,) = json.loads(out)["plans"]
        assert plan["from"] == {
            "file": str(repo / "AGENTS.md"),
            "section": "drop-legacy",
            "owners": {},
        }


def test_a_listed_hash_that_no_longer_matches_refuses_and_records_nothing(
    tmp_path: Path,
) -> None:
    old = "create table t (x int);\n"
    repo = make_repo(tmp_path / "repo", {**FILES, "AGENTS.md": agents_md(old)})
    with served(repo):
        code, out, err = run_cli(
            "workspace", "trust", "add-audit-column", "--from", "AGENTS.md", cwd=repo
        )
        assert (code, out) == (1, "")
        assert quiet(err).splitlines() == [
            f"error: AGENTS.md: line 6: schema.sql: no longer matches sha256:{sha(old)[:7]} "
            f"(now sha256:{sha(SCHEMA)[:12]}, git:{git_id(SCHEMA)[:12]})",
            "error: nothing was recorded for add-audit-column",
        ]
        code, text = history(repo, "add-audit-column")
        assert (code, text) == (1, "error: ws holds no record of 'plan/add-audit-column'\n")


@pytest.mark.parametrize(
    ("lines", "errors"),
    [
        (
            ["- gone.sql @ sha256:abcdef0", "- ../outside.txt @ git:abcdef0"],
            [
                "AGENTS.md: line 3: gone.sql: does not exist",
                "AGENTS.md: line 4: ../outside.txt: ../outside.txt is not inside a served "
                "worktree (ws={repo})",
            ],
        ),
        (
            [f"- schema.sql @ sha256:{sha(SCHEMA)}0", f"- a.md @ git:{git_id('a' + chr(10))}ab"],
            [
                "AGENTS.md: line 3: schema.sql: 65 hex digits, more than a sha256 has (64)",
                "AGENTS.md: line 4: a.md: 42 hex digits, more than a git has (40)",
            ],
        ),
        (
            [f"- a.md @ {sha('a' + chr(10))[:7]}", f"- a.md @ {git_id('a' + chr(10))[:7]}"],
            ["AGENTS.md: line 4: a.md: listed again with another hash (line 3)"],
        ),
        (
            ["- a.md @ abc", "- a.md", "- a.md @ sha256:xyz1234"],
            [
                f"AGENTS.md: line {n}: expected '- PATH @ sha256:HEX (owner: NAME)' with at "
                f"least 7 hex digits, got {got!r}"
                for n, got in ((3, "- a.md @ abc"), (4, "- a.md"), (5, "- a.md @ sha256:xyz1234"))
            ],
        ),
        (["- src @ abcdef0"], ["AGENTS.md: line 3: src: is not a regular file"]),
    ],
)
def test_every_bad_line_is_named_and_nothing_is_recorded(
    tmp_path: Path, lines: list[str], errors: list[str]
) -> None:
    text = "# Plan: p\nRecord dependencies:\n" + "\n".join(lines) + "\n"
    repo = make_repo(tmp_path / "repo", {**FILES, "AGENTS.md": text})
    with served(repo):
        code, out, err = run_cli("workspace", "trust", "p", "--from", "AGENTS.md", cwd=repo)
        assert (code, out) == (1, "")
        assert quiet(err).splitlines() == [
            *(f"error: {e.format(repo=repo)}" for e in errors),
            "error: nothing was recorded for p",
        ]
        assert history(repo, "p")[0] == 1


def test_several_plan_sections_are_picked_by_plan_name_or_section(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {**FILES, "AGENTS.md": agents_md()})
    with served(repo):
        code, out, err = run_cli("workspace", "trust", "other", "--from", "AGENTS.md", cwd=repo)
        assert (code, out, quiet(err)) == (
            1,
            "",
            "error: AGENTS.md has 2 'Record dependencies' lists: line 5 (add-audit-column), "
            "line 10 (drop-legacy); none is in a section named 'other': pick one with "
            "--section NAME\n",
        )
        code, out, err = run_cli(
            "workspace",
            "trust",
            "other",
            "--from",
            "AGENTS.md",
            "--section",
            "Drop legacy",
            "--lockfiles",
            "none",
            "--json",
            cwd=repo,
        )
        assert code == 0, out + err
        assert [k for k, r in json.loads(out)["declaration"].items() if "read" in r] == [
            "ws:file/main.py"
        ]
        code, out, err = run_cli(
            "workspace", "trust", "x", "--from", "AGENTS.md", "--section", "nope", cwd=repo
        )
        assert (code, quiet(err)) == (
            1,
            "error: AGENTS.md: no 'Record dependencies' list in a section named 'nope'; "
            "lists: line 5 (add-audit-column), line 10 (drop-legacy)\n",
        )
        code, out, err = run_cli("workspace", "trust", "x", "--section", "nope", cwd=repo)
        assert (code, quiet(err).splitlines()[-1]) == (
            64,
            "Error: Invalid value: --section needs --from FILE",
        )
        code, out, err = run_cli("workspace", "trust", "x", "--from", "NOPE.md", cwd=repo)
        assert (code, quiet(err)) == (1, "error: cannot read NOPE.md: No such file or directory\n")


def test_sections_are_named_by_the_heading_above_their_list() -> None:
    text = (
        "Record dependencies:\n- a @ abcdef0\n"  # before any heading
        "# Plan — `Add` the column\n## Record dependencies\n- a @ abcdef0\n"
        "## Notes\n**Record dependencies**\n- a @ abcdef0\n"
        "### Record dependencies\n- a @ abcdef0\n"
    )
    found = sections(text)
    assert found == [
        Section(0, ""),
        Section(3, "Add the column"),
        Section(6, "Notes"),
        Section(8, "Notes"),
    ]
    assert slug("Plan: Add the `audit` column!") == "plan-add-the-audit-column"
    assert choose("F", found, "add-the-column", None) == Section(3, "Add the column")
    assert choose("F", found[:1], "anything", None) == Section(0, "")
    with pytest.raises(ConfigError) as exc:
        choose("F", found, "x", "notes")
    assert str(exc.value) == (
        "F: 2 lists are in sections named 'Notes' (line 7 (Notes), line 9 (Notes)); rename one"
    )
    with pytest.raises(ConfigError) as exc:
        choose("F", [], "x", None)
    assert str(exc.value) == "F: no 'Record dependencies' list found"


def test_a_file_changed_after_the_comparison_is_not_trusted(tmp_path: Path) -> None:
    """The owner's observation must be the content the list was compared with: another
    hash means the file changed in between, and the trust writes nothing."""
    repo = make_repo(tmp_path / "repo", FILES)
    cdir = ClusterDir(repo / ".planfence")
    with served(repo):
        spec = TrustSpec(
            "p",
            ("ws:file/schema.sql",),
            expect={"ws:file/schema.sql": ("git:" + git_id("something else"),)},
        )
        with pytest.raises(ConfigError) as exc:
            anyio.run(wait_trust, cdir, cdir.roster(), spec)
        assert str(exc.value) == (
            "changed since it was compared with its listed hash: ws:schema.sql; "
            "nothing was recorded"
        )
        assert history(repo, "p")[0] == 1
        good = TrustSpec(
            "p", ("ws:file/schema.sql",), expect={"ws:file/schema.sql": ("git:" + git_id(SCHEMA),)}
        )
        assert anyio.run(wait_trust, cdir, cdir.roster(), good)["trust"] == 1


def test_a_listed_file_over_the_owners_cap_is_never_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from planfence_net.workspace.plans import agentsmd

    monkeypatch.setattr(agentsmd, "MAX_FILE_BYTES", 4)
    (tmp_path / "big.txt").write_text("0123456789")
    (tmp_path / "AGENTS.md").write_text("Record dependencies:\n- big.txt @ abcdef0\n")
    with pytest.raises(agentsmd.ListProblems) as exc:
        agentsmd.declared_reads(Path("AGENTS.md"), "p", None, {"ws": tmp_path}, tmp_path)
    assert exc.value.problems == ["AGENTS.md: line 2: big.txt: 10 bytes, over the cap of 4"]
