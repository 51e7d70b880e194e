"""Exclusivity across worktrees: two plans ask for one file (same repository, same relative
path) in two worktrees at once, and at most one holds it; a Codex SessionEnd ends within
Codex's limit. Real owners on 127.0.0.1 (`served_team`: planner, workspace owners api, web)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from planfence_net.core.errors import ConfigError
from planfence_net.net.syncclient import SyncSessions
from planfence_net.workspace.installers.clients import END_TIMEOUT
from planfence_net.workspace.model.facts import file_key
from planfence_net.workspace.plans.intentclient import Collected, before_trust, collect
from planfence_net.workspace.plans.intentgrant import (
    TrustIntents,
    after_trust,
    plan_sessions,
    publish_trust,
    second_look,
)
from support.cluster import PLANFENCE, ClusterHandle
from support.workspace import payload, run_cli, run_hook_output, served_team

A, B = "aaaaaaaa-1111-4111-8111-111111111111", "bbbbbbbb-2222-4222-8222-222222222222"
REL = "src/lib.py"


@pytest.fixture
def team(tmp_path: Path) -> Iterator[tuple[ClusterHandle, Path, Path]]:
    with served_team(tmp_path, {REL: "v = 1\n", "src/other.py": "w = 1\n"}) as team:
        yield team


def holders(handle: ClusterHandle) -> list[tuple[str, str, str]]:
    """(owner, plan, file) of every live exclusive intent on REL, asking both owners."""
    sessions = SyncSessions(handle.roster, handle.identity("planner"))
    try:
        got = collect(sessions, handle.roster, ["api", "web"], [REL], time.monotonic() + 10)
    finally:
        sessions.close()
    assert got.unreachable == {}
    return sorted((i.owner, i.plan, i.file) for i in got.intents if i.exclusive)


def plan_id(plan: str) -> bytes:
    return hashlib.sha256(plan.encode()).digest()  # stands for the plan record's id


def exclusive(plan: str, key: str) -> TrustIntents:
    """Plan `plan` (no session's) intends the file `key` exclusively for 600 s."""
    return TrustIntents(plan, plan_id(plan), [key], [key], None, None, 600.0)


def publish(
    handle: ClusterHandle, plan: str, key: str, got: Collected
) -> tuple[list[str], list[tuple[str, str]]]:
    """`publish_trust` alone (no second look), over sessions of its own."""
    sessions = plan_sessions(handle.cdir, handle.roster, plan)
    try:
        return publish_trust(exclusive(plan, key), got, sessions)
    finally:
        sessions.close()


def test_a_plan_that_looked_before_the_other_published_is_refused_at_its_second_look(
    team: tuple[ClusterHandle, Path, Path],
) -> None:
    """Both look (nobody intends the file), then both publish and confirm in turn: without
    the second look both would hold it (as on main)."""
    handle, api, web = team
    cdir, roster = handle.cdir, handle.roster
    keys = {"parser": file_key("api", REL), "lexer": file_key("web", REL)}
    seen = {p: before_trust(cdir, roster, p, [k], [k]) for p, k in keys.items()}
    got = {}
    for plan, key in keys.items():
        try:
            got[plan] = after_trust(cdir, roster, exclusive(plan, key), seen[plan])
        except ConfigError as exc:
            got[plan] = [str(exc)]
    assert got["parser"][0].startswith("intent published (exclusive): api:src/lib.py until ")
    assert got["lexer"] == [
        f"trusted lexer, but --exclusive web:src/lib.py was refused: plan 'parser' in {api} "
        f"holds it exclusively (until {got['parser'][0].rsplit(' until ', 1)[1].split(' (in ')[0]}); this "
        f"plan's intent there was withdrawn"
    ]
    assert holders(handle) == [("api", "parser", REL)]


@pytest.mark.parametrize("first_look", ["parser", "lexer"])
def test_two_plans_that_published_in_the_same_instant_keep_one_holder(
    team: tuple[ClusterHandle, Path, Path], first_look: str
) -> None:
    """Both look, both publish, then both take the second look (in either order): each sees
    both exclusive intents and the same order decides, so the earlier one keeps it."""
    handle, api, web = team
    cdir, roster = handle.cdir, handle.roster
    keys = {"parser": file_key("api", REL), "lexer": file_key("web", REL)}
    seen = {p: before_trust(cdir, roster, p, [k], [k]) for p, k in keys.items()}
    held = {}
    for plan, key in keys.items():  # parser publishes first: its `since` is earlier
        lines, held[plan] = publish(handle, plan, key, seen[plan])
        assert lines[0].startswith(f"intent published (exclusive): {key.split(':')[0]}:{REL}")
    assert holders(handle) == [("api", "parser", REL), ("web", "lexer", REL)]
    order = [first_look, *(p for p in keys if p != first_look)]
    refused = {}
    for plan in order:
        try:
            sessions = plan_sessions(cdir, roster, plan)
            try:
                second_look(cdir, roster, plan, held[plan], sessions)
            finally:
                sessions.close()
        except ConfigError as exc:
            refused[plan] = str(exc)
    assert list(refused) == ["lexer"]
    assert refused["lexer"].startswith(
        f"trusted lexer, but --exclusive web:src/lib.py was refused: plan 'parser' in {api} "
        f"holds it exclusively (until "
    ), refused
    assert holders(handle) == [("api", "parser", REL)]


ROUNDS = 8


def start_trust(handle: ClusterHandle, plan: str, cwd: Path) -> subprocess.Popen[str]:
    """`planfence workspace trust PLAN --exclusive src/lib.py` as a process, in `cwd`."""
    args = ["--cluster", str(handle.path), "--lockfiles", "none", "--exclusive", REL]
    return subprocess.Popen(
        [str(PLANFENCE), "workspace", "trust", plan, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_trusts_racing_for_one_file_leave_exactly_one_holder_every_time(
    team: tuple[ClusterHandle, Path, Path],
) -> None:
    """`workspace trust --exclusive src/lib.py` from api and from web, as two processes
    started together, ROUNDS times: each time exactly one succeeds and holds the file; the
    other is refused at its first look (the winner's intent was there) or at its second."""
    handle, api, web = team
    for n in range(ROUNDS):
        procs = {f"p{n}api": start_trust(handle, f"p{n}api", api)}
        procs[f"p{n}web"] = start_trust(handle, f"p{n}web", web)
        outcomes = {
            plan: (*proc.communicate(timeout=60), proc.returncode) for plan, proc in procs.items()
        }
        codes = {plan: code for plan, (_, _, code) in outcomes.items()}
        assert sorted(codes.values()) == [0, 1], outcomes
        won, lost = sorted(procs, key=lambda p: codes[p])
        where = f"{lost[len(f'p{n}') :]}:{REL}"
        assert outcomes[lost][1].startswith(
            (
                f"error: --exclusive {where}: plan '{won}' in ",
                f"error: trusted {lost}, but --exclusive {where} was refused: plan '{won}' in ",
            )
        ), outcomes
        assert holders(handle) == [(won[len(f"p{n}") :], won, REL)]
        end(handle, list(procs))  # the next round starts from no intents
        assert holders(handle) == []


def end(handle: ClusterHandle, plans: list[str]) -> None:
    sessions = SyncSessions(handle.roster, handle.identity("planner"))
    try:
        for owner in ("api", "web"):
            sessions.request(owner, "unintend", {"plans": plans}, time.monotonic() + 10)
    finally:
        sessions.close()


def test_a_codex_session_end_with_an_owner_that_does_not_answer_ends_within_codex_limit(
    team: tuple[ClusterHandle, Path, Path],
) -> None:
    """Codex kills a SessionEnd hook after END_TIMEOUT s: with the `web` owner stopped
    (SIGSTOP: it accepts connections and never answers), the hook returns before that, having
    ended the session's intents at `api`."""
    handle, api, _ = team
    code, out, err = run_cli(
        "workspace", "trust", "parser", "--cluster", handle.path, "--session", A,
        "--lockfiles", "none", "--target", REL, cwd=api,
    )  # fmt: skip
    assert code == 0, out + err
    pid = handle.owner_pid("web")
    os.kill(pid, signal.SIGSTOP)
    try:
        end_call = {"session_id": A, "cwd": str(api), "hook_event_name": "SessionEnd"}
        started = time.monotonic()
        got = run_hook_output(
            "codex", {**end_call, "reason": "other"}, "--cluster", str(handle.path)
        )
        took = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
    assert got == (
        0,
        "",
        "PlanFence could not end this session's intents at web; their lease ends them\n",
    )
    assert took < END_TIMEOUT, took
    puts = [e for e in handle.events("api", "put") if "intent/" in e["key"]]
    assert len(puts) == 2 and puts[1]["parents"] == [puts[0]["id"]]  # ended at api


def test_a_later_exclusive_intent_left_behind_does_not_block_the_holder(
    team: tuple[ClusterHandle, Path, Path],
) -> None:
    """`lexer` looked, `parser` was granted the file, then lexer's exclusive intent was
    written and its `trust` died before its second look (it never withdrew): the hook
    applies the same order, so parser's writes go on (told of lexer's intent)."""
    handle, api, web = team
    cdir, roster, key = handle.cdir, handle.roster, file_key("web", REL)
    seen = before_trust(cdir, roster, "lexer", [key], [key])  # nobody intends it yet
    code, out, err = run_cli(
        "workspace", "trust", "parser", "--cluster", handle.path, "--session", A,
        "--lockfiles", "none", "--exclusive", REL, cwd=api,
    )  # fmt: skip
    assert code == 0, out + err
    publish(handle, "lexer", key, seen)
    assert holders(handle) == [("api", "parser", REL), ("web", "lexer", REL)]
    call = payload("claude-write", api, file_path=str(api / REL))
    call["session_id"] = A
    code, out, err = run_hook_output("claude", call, "--cluster", str(handle.path))
    assert (code, err) == (0, "")
    text = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert text.startswith(
        f"PlanFence: plan 'lexer' in {web} also intends to change {api}/src/lib.py exclusively "
        f"(intent until "
    ), text
