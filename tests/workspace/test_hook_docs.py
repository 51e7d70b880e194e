"""docs/HOOKS.md cannot drift from the code: every `<!-- example: NAME -->` block in it is
rebuilt here from the recorded payloads, the installer and the hook's own message."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from planfence_net.cluster.command import executable
from planfence_net.workspace.hook import auto as autohook
from planfence_net.workspace.hook.text import block_message, join_message
from planfence_net.workspace.installers import clients as install
from planfence_net.workspace.installers import gitgate
from planfence_net.workspace.installers.codexapp import LABELS, codex_hash
from planfence_net.workspace.model.classify import DriftReport, TrustedState, classify, summary
from planfence_net.workspace.model.intents import Intent, held_message, notice
from planfence_net.workspace.model.machine import Verdict
from planfence_net.workspace.model.payload import parse_payload
from planfence_net.workspace.model.writers import (
    Commit,
    Drifted,
    Write,
    Writer,
    file_writer,
    head_writer,
)
from planfence_net.workspace.plans.intentclient import context_output
from support.cluster import REPO
from support.plans_docs import plans_examples
from support.workspace import payload

DOC = REPO / "docs" / "HOOKS.md"
README = REPO / "README.md"
README_EXAMPLES = ("readme-claude-pre", "blocked")  # the README's agent section
PROJECT = Path("/home/dev/app")
_BLOCK = re.compile(r"<!-- example: (\S+) -->\n```\w*\n(.*?)```", re.S)


def examples() -> dict[str, str]:
    """Each example's exact text, built by the code."""
    out = plans_examples(PROJECT)  # trust --from, the recovery policy, plans, show
    for name in ("claude-edit", "claude-bash", "codex-apply-patch"):
        out[f"payload-{name}"] = json.dumps(payload(name, PROJECT), indent=2) + "\n"
    theirs = {
        "hooks": {
            "PreToolUse": [
                {
                    "matcher": "Bash",
                    "hooks": [{"type": "command", "command": ".claude/hooks/guard.sh"}],
                }
            ]
        }
    }
    claude = install.handler("claude", PROJECT, command="/home/dev/.venv/bin/planfence")
    readme = install.handler("claude", PROJECT, command="/path/to/.venv/bin/planfence")
    out["readme-claude-pre"] = (
        json.dumps(install.our_group("claude", readme, "PreToolUse"), indent=2) + "\n"
    )
    out["claude-settings"] = install.dump(
        Path("settings.local.json"), install.merged(theirs, "claude", claude)
    )
    shared = install.handler("claude", PROJECT, shared=True)
    out["claude-shared"] = json.dumps(shared, indent=2) + "\n"
    ours = install.handler("codex", command="planfence hook codex --mode auto")
    out["codex-hooks-json"] = install.dump(Path("hooks.json"), install.merged({}, "codex", ours))
    out["codex-config-toml"] = "".join(
        install.toml_block(event, install.our_group("codex", ours, event))
        for event in install.events("codex")
    ).lstrip("\n")
    codex_groups = {e: install.our_group("codex", ours, e) for e in install.events("codex")}
    out["codex-trust"] = (
        "".join(
            f"[{table}]\n{line}\n\n"
            for table, line in (
                ('projects."/home/dev/app"', 'trust_level = "trusted"'),
                *(
                    (
                        f'hooks.state."/home/dev/app/.codex/hooks.json:{label}:0:0"',
                        f'trusted_hash = "{codex_hash(label, codex_groups[event].get("matcher"), ours["command"], codex_groups[event]["hooks"][0]["timeout"])}"',
                    )
                    for event, label in LABELS.items()
                ),
            )
        ).rstrip("\n")
        + "\n"
    )
    call = parse_payload("claude", json.dumps(payload("claude-edit", PROJECT)).encode())
    out["blocked"] = block_message(call, sample_verdict()).replace(executable(), "planfence") + "\n"
    tree = Path("/home/dev/wt")
    write = parse_payload("claude", json.dumps(payload("claude-write", tree)).encode())
    out["unserved"] = join_message(write, tree).replace(executable(), "planfence") + "\n"
    sub = dataclasses.replace(call, agent_id="a81f3c", agent_type="Explore")
    out["blocked-subagent"] = (
        block_message(sub, subagent_verdict()).replace(executable(), "planfence") + "\n"
    )
    lib = "/home/dev/app/src/lib.py"
    other = sample_intent(exclusive=False)
    out["intent-notice"] = json.dumps(
        json.loads(context_output(notice(lib, [other], {}))), indent=2
    )
    out["intent-notice"] += "\n"
    held = sample_intent(exclusive=True)
    blocked = f"PlanFence blocked Edit of {lib}"
    out["intent-held"] = held_message(blocked, lib, [held]) + "\n"
    out["git-pre-commit"] = gitgate.script().replace(executable(), "/home/dev/.venv/bin/planfence")
    out["commit-refused"] = (
        gitgate.refusal(gitgate.stale_lines("auth-fix", "auth.ts", sample_verdict())) + "\n"
    )
    write = parse_payload("claude", json.dumps(payload("claude-write", PROJECT)).encode())
    for name, verdict in (("blocked-auto", auto_verdict()), ("blocked-auto-branch", branch())):
        text = autohook.block_message(write, verdict).replace(executable(), "planfence")
        out[name] = text + "\n"
    start = autohook.session_start_answer("")
    out["session-start"] = json.dumps(json.loads(start.stdout), indent=2) + "\n"
    return out


def sample_intent(exclusive: bool) -> Intent:
    """A Codex session's plan in another worktree of the repository, intending src/lib.py."""
    return Intent(
        "wt",
        "wt:intent/5c1e0f2a9b3d/src/lib.py",
        "lexer",
        "src/lib.py",
        "0199a7c4-5e2b-7f31-8d6a-3c9e1b2f4a58",
        "codex",
        None,
        "/home/dev/wt",
        "/home/dev/app/.git",
        exclusive,
        1796142600.0,  # 16:30:00 UTC
    )


AUTO = "auto-131f059605068eca"  # session.auto_plan of the recorded payloads' session


def verdict_of(plan: str, report: DriftReport, writers: tuple[Writer, ...] = ()) -> Verdict:
    return Verdict(
        plan,
        report.level,
        tuple(summary(report)),
        report.reread,
        report.changed_again,
        1,
        None,
        "",
        None,
        writers=writers,
    )


CODEX = "0199a7c4-5e2b-7f31-8d6a-3c9e1b2f4a58"  # a Codex session in the same worktree
MERGE = Commit(
    "d09b34a71c2e8f04b6a95d3e1c7f20a8b4e6d913",
    "Dana Lee <dana@example.com>",
    1796141820.0,  # 16:17:00 UTC
    "Merge branch 'release/2.4'",
)
AUTH_READ = (
    b"export function login(user: User) {\n"
    b'  const token = sign(user.id, { expiresIn: "1h" });\n'
    b"  return { token };\n"
    b"}\n"
)
AUTH_NOW = AUTH_READ.replace(b'"1h"', b'"15m"').replace(
    b"  return { token };", b"  audit(user.id);\n  return { token };"
)


def head_change() -> Writer:
    """The merge HEAD moved to, by a person, and what it changed."""
    return head_writer(MERGE, ["M auth.ts", "M package-lock.json", "A src/session.ts"], MERGE.sha)


def sample_writers() -> tuple[Writer, ...]:
    """Who changed what in the Codex-tracker drift: the merge, a Codex session's edit of
    auth.ts (its recorded write left exactly the content now), and package-lock.json
    rewritten by `npm install`, outside any session (too large to keep)."""
    auth = Drifted("ws:file/auth.ts", {"hash": "git:1", "size": 96}, {"hash": "git:2"})
    codex = Write(("git:2",), CODEX, None, None, "codex", "/home/dev/app", 1796142600.0)
    lock = Drifted(
        "ws:file/package-lock.json",
        {"hash": "git:3", "size": 212480},
        {"hash": "git:4", "size": 213112},
    )
    return (
        head_change(),
        file_writer("auth.ts", auth, [codex], 1796142600.0, (AUTH_READ, AUTH_NOW)),
        file_writer("package-lock.json", lock, [codex], 1796142660.0, None),
    )


SESSION = "9f2c6a1e-4b7d-4e0a-9c55-2f1d8e7b3a10"  # the recorded Claude Code payloads' session


def subagent_verdict() -> Verdict:
    """A subagent's plan read auth.ts; its session's main agent then edited it."""
    roles = {"ws:branch": ("branch",), "ws:file/auth.ts": ("read",)}
    drift = {"ws:file/auth.ts": ({"hash": "git:1", "size": 96}, {"hash": "git:5"})}
    auth = Drifted("ws:file/auth.ts", *drift["ws:file/auth.ts"])
    main = Write(("git:5",), SESSION, None, None, "claude", "/home/dev/app", 1796142720.0)
    now = AUTH_READ.replace(b'"1h"', b'"2h"')
    edit = file_writer("auth.ts", auth, [main], 1796142720.0, (AUTH_READ, now))
    report = classify(TrustedState("auth-fix", 1, roles, {}), drift)
    return verdict_of("auth-fix", report, (edit,))


def auto_verdict() -> Verdict:
    """A session read lib.py and ran pytest; another agent changed lib.py."""
    roles = {
        "ws:branch": ("branch",),
        "ws:file/lib.py": ("read", "input"),
        "ws:evidence/4be1": ("evidence",),
    }
    evidence = {"ws:evidence/4be1": {"command": "pytest", "exit": 0, "inputs": ["ws:file/lib.py"]}}
    drift = {"ws:file/lib.py": ({"hash": "git:1"}, {"hash": "git:2"})}
    lib = Drifted("ws:file/lib.py", *drift["ws:file/lib.py"])
    read, now = b"def area(r):\n    return 3.14 * r*r\n", b"def area(r):\n    return 3.14 * r * r\n"
    formatter = file_writer("lib.py", lib, [], 1796142480.0, (read, now))  # 16:28:00 UTC
    report = classify(TrustedState(AUTO, 1, roles, evidence), drift)
    return verdict_of(AUTO, report, (formatter,))


def branch() -> Verdict:
    """The same session, after the branch was switched under it."""
    roles = {"ws:branch": ("branch",), "ws:head": ("head",), "ws:file/lib.py": ("read",)}
    drift = {
        "ws:branch": ({"branch": "feature/auth"}, {"branch": "main"}),
        "ws:head": ({"head": "a17c92f5e0"}, {"head": "d09b34a71c"}),
    }
    report = classify(TrustedState(AUTO, 1, roles, {}), drift)
    return verdict_of(AUTO, report, (head_change(),))


def sample_verdict() -> Verdict:
    """The Codex-tracker drift: branch switch, another agent's edit, a lockfile update."""
    roles = {
        "ws:branch": ("branch",),
        "ws:head": ("head",),
        "ws:file/auth.ts": ("read",),
        "ws:file/package-lock.json": ("lockfile",),
        "ws:evidence/9c1f": ("evidence",),
    }
    evidence = {
        "ws:evidence/9c1f": {"command": "npm test", "exit": 0, "inputs": ["ws:file/auth.ts"]}
    }
    report = classify(
        TrustedState("auth-fix", 1, roles, evidence),
        {
            "ws:branch": ({"branch": "feature/auth"}, {"branch": "main"}),
            "ws:head": ({"head": "a17c92f5e0"}, {"head": "d09b34a71c"}),
            "ws:file/auth.ts": ({"hash": "git:1"}, {"hash": "git:2"}),
            "ws:file/package-lock.json": ({"hash": "git:3"}, {"hash": "git:4"}),
        },
    )
    return verdict_of("auth-fix", report, sample_writers())


def test_every_example_in_the_doc_is_what_the_code_makes() -> None:
    documented = dict(_BLOCK.findall(DOC.read_text()))
    built = examples()
    assert sorted(documented) == sorted(set(built) - {"readme-claude-pre"})
    for name, text in documented.items():
        assert text == built[name], name


def test_every_example_in_the_readmes_agent_section_is_what_the_code_makes() -> None:
    section = README.read_text().split("## Use with Codex and Claude Code", 1)[1].split("\n## ")[0]
    documented = dict(_BLOCK.findall(section))
    built = examples()
    assert sorted(documented) == sorted(README_EXAMPLES)
    for name, text in documented.items():
        assert text == built[name], name


if __name__ == "__main__":  # print the examples, to paste into the doc
    for name, text in examples().items():
        print(f"<!-- example: {name} -->\n```\n{text}```\n")
