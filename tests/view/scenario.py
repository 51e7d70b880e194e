"""The team scenario the view's readers are tested on: two Claude Code sessions in two
worktrees of one repository (`served_team`: planner, workspace owners api and web, real
processes on 127.0.0.1), each calling the hook `hook install claude --command` installed in
its worktree, the way Claude Code runs it (the installed command and arguments, the payload
on stdin).

A, B         the two sessions (A in api, B in web)
C            a third session, in web, that only reads (`step_read_only`)
Team         the cluster handle, the worktrees and the installed hook of each
installed    `hook install claude --command` in both worktrees; yields a Team
step_reads   A reads api/src/lib.py and writes api/src/other.py; B reads web/src/other.py
step_drift   B writes api/src/lib.py (the file A read); A's next write is blocked
block_line   A's block line in the planner's log, as the hook wrote it, with `writers`
step_read_only  C reads web/src/lib.py and nothing more
end_session  Claude Code's SessionEnd of a session, through the installed hook, which logs
             its `session_end` line

executor_replans  on the five-owner cluster of `live_cluster`: executor `ops`, logging its
             decisions to the cluster folder, validates a plan whose requirement was
             revised after planning; it replans once and is authorized (`Replanned`)

The block's `writers` field (who changed each drifted file, and the diff) is the hook's own:
the readers are tested on the line it wrote, never on one this module makes; so are the
executor's `gate` line (its decision log's own) and the owners' put lines.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from planfence_net.bench.policies.writers import OwnerWriter
from planfence_net.core.gate import Action
from planfence_net.core.records import Record
from planfence_net.executor.decisionlog import DecisionLog
from planfence_net.executor.pool import SessionPool
from planfence_net.executor.replica import Replica
from planfence_net.executor.runner import GateRun, GateRunner
from support.cluster import PLANFENCE, ClusterHandle
from support.workspace import payload, run_cli, served_team, stop, write

A, B = "aaaaaaaa-1111-4111-8111-111111111111", "bbbbbbbb-2222-4222-8222-222222222222"
C = "cccccccc-3333-4333-8333-333333333333"
FILES = {"src/lib.py": "v = 1\n", "src/other.py": "w = 1\n"}


@dataclass
class Team:
    handle: ClusterHandle
    api: Path
    web: Path
    calls: int = 0

    @property
    def cluster(self) -> Path:
        return self.handle.path

    def hook(self, repo: Path, session: str, event: str, **fields: Any) -> tuple[int, str]:
        """Run the hook installed in `repo` for `event` as Claude Code does; (exit, stderr)."""
        settings = json.loads((repo / ".claude" / "settings.local.json").read_text())
        handler = settings["hooks"][event][0]["hooks"][0]
        self.calls += 1
        data = {
            **payload("claude-read", repo),
            "session_id": session,
            "hook_event_name": event,
            "tool_use_id": f"toolu_{self.calls:04}",
            **fields,
        }
        if event == "SessionEnd":
            data = {k: v for k, v in data.items() if not k.startswith("tool_")}
            data["reason"] = "prompt_input_exit"
        proc = subprocess.run(
            [handler["command"], *handler.get("args", [])],
            input=json.dumps(data).encode(),
            capture_output=True,
            cwd=repo,
            timeout=30,
        )
        return proc.returncode, proc.stderr.decode()

    def read(self, repo: Path, session: str, path: Path) -> None:
        got = self.hook(repo, session, "PostToolUse", tool_name="Read",
                        tool_input={"file_path": str(path)})  # fmt: skip
        assert got == (0, ""), got

    def write(self, repo: Path, session: str, path: Path, text: str) -> tuple[int, str]:
        """A Write of `path`: PreToolUse, and when it is let through the file and PostToolUse."""
        self.calls += 1
        call = {
            "tool_name": "Write",
            "tool_input": {"file_path": str(path), "content": text},
            "tool_use_id": f"toolu_w{self.calls:04}",  # one call: the same id before and after
        }
        got = self.hook(repo, session, "PreToolUse", **call)
        if got[0] == 0:
            path.write_text(text)
            after = self.hook(repo, session, "PostToolUse", **call)
            assert after == (0, ""), after
        return got


@contextmanager
def installed(tmp: Path) -> Iterator[Team]:
    """The served team with the hook installed (command handlers) in both worktrees."""
    with served_team(tmp, FILES) as (handle, api, web):
        for repo in (api, web):
            code, out, err = run_cli(
                "hook", "install", "claude", "--project", repo, "--cluster", handle.path,
                "--command",
            )  # fmt: skip
            assert code == 0, out + err
        yield Team(handle, api, web)


def step_reads(team: Team) -> None:
    """A reads api/src/lib.py and writes api/src/other.py; B reads web/src/other.py."""
    team.read(team.api, A, team.api / "src/lib.py")
    team.read(team.web, B, team.web / "src/other.py")
    assert team.write(team.api, A, team.api / "src/other.py", "w = 2\n") == (0, "")


def step_drift(team: Team) -> str:
    """B writes api/src/lib.py, which A read; A's next write is blocked: its reason."""
    assert team.write(team.web, B, team.api / "src/lib.py", "v = 2\n") == (0, "")
    code, reason = team.write(team.api, A, team.api / "src/other.py", "w = 3\n")
    assert code == 2, reason
    return reason


def block_line(team: Team) -> dict[str, Any]:
    """A's newest block line from the planner's log, exactly as the hook wrote it."""
    log = team.cluster / "logs" / "planner.jsonl"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    block = [e for e in lines if e.get("event") == "check" and e.get("exit") == 2][-1]
    assert (block["session"], block["client"]) == (A, "claude")
    (writer,) = block["writers"]  # who changed the one drifted file, as the hook found it
    assert {k: writer[k] for k in ("path", "session", "agent", "client", "worktree")} == {
        "path": "src/lib.py",
        "session": B,  # session B wrote the file A had read
        "agent": None,
        "client": "claude",
        "worktree": str(team.web),
    }, writer
    assert writer["writer"] == f"written by session {B} of claude in {team.web}"
    assert writer["diff"] == "@@ -1 +1 @@\n-v = 1\n+v = 2"  # the real change, B's write
    return block


def step_read_only(team: Team) -> None:
    """C reads web/src/lib.py, and nothing more (no write, no check line, no intent)."""
    team.read(team.web, C, team.web / "src/lib.py")


def end_session(team: Team, repo: Path, session: str) -> None:
    """The session's SessionEnd, through the hook installed in `repo`; asserts the hook
    logged its one `session_end` line in the planner's log."""
    assert team.hook(repo, session, "SessionEnd") == (0, "")
    log = team.cluster / "logs" / "planner.jsonl"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    ends = [e for e in lines if e.get("event") == "session_end" and e["session"] == session]
    assert [{k: v for k, v in e.items() if k != "ts"} for e in ends] == [
        {
            "agent": "planner",
            "event": "session_end",
            "session": session,
            "client": "claude",
            "worktree": str(repo),
        }
    ]


def drift_file(repo: Path) -> None:
    """A change outside any session (a person, a formatter): api/src/lib.py."""
    write(repo, {"src/lib.py": "v = 3\n"})


@contextmanager
def view_page(cluster: Path) -> Iterator[str]:
    """`planfence view --cluster CLUSTER` as a real process; yields the URL it printed (with
    its token); stopped (SIGTERM, then SIGKILL) when the block ends."""
    proc = subprocess.Popen(
        [str(PLANFENCE), "view", "--cluster", str(cluster)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("planfence view: http://127.0.0.1:"), line + proc.stdout.read()
        yield line.split(": ", 1)[1].strip()
    finally:
        stop(proc)


DEPS = ("req/order", "inv/stock")
GATE_TIMEOUT = 10.0  # seconds of coordination for the executor's decision (a busy machine)


@dataclass
class Replanned:
    """The records of `executor_replans` and the executor's run: r3 the requirement the plan
    read, r4 its revision, `plan` the stale plan, `new_plan` the replanned one."""

    r3: Record
    r4: Record
    fact: Record
    plan: Record
    new_plan: Record
    run: GateRun


async def executor_replans(cluster: ClusterHandle, action: str = "ship") -> Replanned:
    """Executor `ops`, with its decision log in the cluster folder, validates `plan/ship`
    (from r3 and a fact) after r3 was revised to r4: the gate finds the drift, `ops` replans
    once from r4 and the new plan is authorized. Asserts that much."""
    roster = cluster.roster
    async with anyio.create_task_group() as tg:
        writer = OwnerWriter(tg, roster, cluster.identity)
        pool = SessionPool(tg, roster, cluster.identity("ops"))
        log = DecisionLog.in_folder(cluster.path, "ops", roster.owner_of)
        runner = GateRunner(pool, await Replica.open(None), timeout=GATE_TIMEOUT, log=log)
        r3 = await writer.put("req/order", {"qty": 3})
        fact = await writer.put("inv/stock", {"on_hand": 40})
        plan = await writer.put("plan/ship", {"steps": ["ship 3"]}, (r3.id, fact.id), "plan")
        r4 = await writer.put("req/order", {"qty": 4})  # the revision the plan never saw
        replanned: list[Record] = []

        async def replan(action: Action, changed: tuple[Record, ...]) -> list[bytes]:
            assert [r.id for r in changed] == [r4.id]
            body = {"steps": ["ship 4"]}
            replanned.append(await writer.put("plan/ship", body, (r4.id, fact.id), "plan"))
            return [replanned[-1].id]

        run = await runner.wait_decision(Action(action, (plan.id,), DEPS), replan)
        log.close()
        await pool.aclose()
        await writer.aclose()
        tg.cancel_scope.cancel()
    assert (run.decision.outcome, run.decision.replanned) == ("authorized", True), run.decision
    assert run.decision.drift == {"req/order": (r3.id, r4.id)}
    return Replanned(r3, r4, fact, plan, replanned[0], run)
