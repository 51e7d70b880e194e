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
        block_message(sub, sample_verdict()).replace(executable(), "planfence").splitlines()[0]
        + "\n"
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


def verdict_of(plan: str, report: DriftReport) -> Verdict:
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
    )


def auto_verdict() -> Verdict:
    """A session read lib.py and ran pytest; another agent changed lib.py."""
    roles = {
        "ws:branch": ("branch",),
        "ws:file/lib.py": ("read", "input"),
        "ws:evidence/4be1": ("evidence",),
    }
    evidence = {"ws:evidence/4be1": {"command": "pytest", "exit": 0, "inputs": ["ws:file/lib.py"]}}
    drift = {"ws:file/lib.py": ({"hash": "git:1"}, {"hash": "git:2"})}
    return verdict_of(AUTO, classify(TrustedState(AUTO, 1, roles, evidence), drift))


def branch() -> Verdict:
    """The same session, after the branch was switched under it."""
    roles = {"ws:branch": ("branch",), "ws:head": ("head",), "ws:file/lib.py": ("read",)}
    drift = {
        "ws:branch": ({"branch": "feature/auth"}, {"branch": "main"}),
        "ws:head": ({"head": "a17c92f5e0"}, {"head": "d09b34a71c"}),
    }
    return verdict_of(AUTO, classify(TrustedState(AUTO, 1, roles, {}), drift))


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
    return Verdict(
        "auth-fix",
        report.level,
        tuple(summary(report)),
        report.reread,
        report.changed_again,
        1,
        None,
        "",
        None,
    )


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
