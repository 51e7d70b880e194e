"""The fold under every reader (`view.team`) and the lineage graph (`view.graph`), fed log
lines of the shapes the owners and the hook write (docs/VIEW.md), no I/O."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from planfence_net.view.graph import lineage, svg, text
from planfence_net.view.team import RECENT, Team

A, B = "aaaaaaaa-1111", "bbbbbbbb-2222"


def put(key: str, rid: str, seq: int, parents: list[str] | None = None, ts: float = 1.0) -> dict[str, Any]:  # fmt: skip
    owner = "planner" if key.startswith("plan/") else key.split(":")[0]
    return {"ts": ts, "agent": owner, "event": "put", "key": key, "id": rid, "seq": seq,
            "kind": "fact", "parents": parents or []}  # fmt: skip


def check(plan: str, session: str, exit: int, ts: float, **more: Any) -> dict[str, Any]:
    return {"ts": ts, "agent": "planner", "event": "check", "plan": plan, "source": "hook",
            "class": "relevant" if exit else "none", "exit": exit, "trust": 1,
            "changed_again": False, "record": "p1", "session": session, "subagent": None,
            "tool": "Write", "files": ["src/other.py"], **more}  # fmt: skip


def team_with_a_plan() -> Team:
    team = Team()
    team.feed({"ts": 0.5, "agent": "api", "event": "workspace", "root": "/w/api", "git": True})
    for line in (
        put("api:file/src/lib.py", "f1", 1),
        put("api:file/src/other.py", "o1", 2),
        put("api:status", "s1", 3),
        put("api:branch", "b1", 4),
        put("plan/alpha", "p1", 1, ["f1", "o1", "s1", "b1"]),
    ):
        team.feed(line)
    team.body("b1", {"branch": "main"})
    team.body(
        "p1",
        {
            "session": A,
            "agent": None,
            "worktree": "/w/api",
            "trust": 1,
            "declaration": {
                "api:file/src/lib.py": ["read"],
                "api:file/src/other.py": ["target"],
                "api:status": ["status"],
                "api:branch": ["branch"],
            },
        },
    )
    return team


def by_type(rows: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in rows if r["type"] == kind}


def test_a_plan_its_session_and_their_files() -> None:
    team = team_with_a_plan()
    rows = team.rows()
    plan = by_type(rows, "plan")["alpha"]
    assert (plan["reads"], plan["targets"], plan["stale"]) == (
        ["api:file/src/lib.py"],
        ["api:file/src/other.py"],
        [],
    )
    session = by_type(rows, "session")[A]
    assert {k: session[k] for k in ("worktree", "path", "branch", "state", "plan")} == {
        "worktree": "api",
        "path": "/w/api",
        "branch": "main",
        "state": "working",
        "plan": "alpha",
    }
    assert team.status()["text"] == "fence ok · 1 plan · 0 stale"


def test_a_newer_head_makes_the_plan_stale_but_a_status_change_does_not() -> None:
    team = team_with_a_plan()
    team.take()
    team.feed(put("api:status", "s2", 5))
    assert team.stale_keys("alpha") == []
    team.feed(put("api:file/src/lib.py", "f2", 6))
    changed = team.take()
    assert [(r["type"], r["id"]) for r in changed if r["type"] in ("plan", "session")] == [
        ("plan", "alpha"),
        ("session", A),
    ]
    assert by_type(changed, "plan")["alpha"]["stale"] == ["api:file/src/lib.py"]
    assert by_type(changed, "session")[A]["state"] == "stale"
    assert team.status()["text"] == "fence ok · 1 plan · 1 stale"


def test_a_block_carries_its_writers_and_blocks_the_session() -> None:
    team = team_with_a_plan()
    team.feed(put("api:file/src/lib.py", "f2", 6))
    writer = {"path": "src/lib.py", "writer": f"session {B[:8]}", "session": B, "diff": "-a\n+b"}
    team.feed(check("alpha", A, 2, 7.0, lines=["drift"], writers=[writer]))
    team.feed(check("alpha", A, 2, 7.0, lines=["drift"], writers=[writer, writer]))  # again
    blocks = by_type(team.rows(), "block")
    assert list(blocks) == ["alpha@7.0"]  # written again: one row, the newer
    assert blocks["alpha@7.0"]["writers"] == [writer, writer]
    assert by_type(team.rows(), "session")[A]["state"] == "blocked"
    assert team.status()["text"] == "fence BLOCKED · 1 plan · 1 stale · 1 blocked"
    team.feed(check("alpha", A, 0, 8.0))
    assert by_type(team.rows(), "session")[A]["state"] == "stale"


def test_a_session_whose_intents_all_ended_is_ended() -> None:
    team = team_with_a_plan()
    team.feed(put("api:intent/d/src/other.py", "i1", 7, ["p1"]))
    intent = {"plan": "alpha", "file": "src/other.py", "session": A, "agent": "claude",
              "subagent": None, "exclusive": True, "expires": 99.0, "ended": False}  # fmt: skip
    team.body("i1", intent)
    session = by_type(team.rows(), "session")[A]
    assert (session["client"], session["state"]) == ("claude", "working")
    assert by_type(team.rows(), "plan")["alpha"]["intents"] == [
        {"file": "src/other.py", "exclusive": True, "expires": 99.0, "ended": False}
    ]
    team.feed(put("api:intent/d/src/other.py", "i2", 8, ["i1", "p1"]))
    team.body("i2", {**intent, "ended": True})
    assert by_type(team.rows(), "session")[A]["state"] == "ended"
    assert team.status()["sessions"] == 0


def test_a_session_that_only_read_is_ended_by_its_session_end_line() -> None:
    team = team_with_a_plan()  # session A's plan: it read, it never wrote (no intent, no check)
    session = by_type(team.rows(), "session")[A]
    assert (session["client"], session["state"]) == (None, "working")
    end = {"ts": 9.0, "agent": "planner", "event": "session_end", "session": A,
           "client": "claude", "worktree": "/w/api"}  # fmt: skip
    team.feed(end)
    session = by_type(team.take(), "session")[A]
    assert (session["client"], session["state"], session["last"]) == ("claude", "ended", 9.0)
    assert team.status()["sessions"] == 0
    team.feed(check("alpha", A, 0, 10.0, client="claude"))  # resumed: a call after its end
    assert by_type(team.take(), "session")[A]["state"] == "working"


def test_a_session_end_alone_gives_an_ended_row_in_its_worktree() -> None:
    team = Team()
    team.feed({"ts": 0.5, "agent": "web", "event": "workspace", "root": "/w/web", "git": True})
    team.feed({"ts": 9.0, "agent": "planner", "event": "session_end", "session": B,
               "client": "codex", "worktree": "/w/web"})  # fmt: skip
    session = by_type(team.rows(), "session")[B]
    assert {k: session[k] for k in ("state", "client", "worktree", "path", "plan")} == {
        "state": "ended",
        "client": "codex",
        "worktree": "web",
        "path": "/w/web",
        "plan": "",
    }


def test_a_check_line_fills_the_client_column() -> None:
    team = team_with_a_plan()
    team.feed(check("alpha", A, 0, 7.0, client="codex"))
    assert by_type(team.take(), "session")[A]["client"] == "codex"


def test_an_executors_validations_show_the_drift_it_was_shown() -> None:
    team = team_with_a_plan()

    def heads(ts: float, *keys: str) -> dict[str, Any]:
        return {"ts": ts, "agent": "api", "event": "request", "peer": "ops", "op": "heads",
                "keys": list(keys), "outcome": "ok", "latency_ms": 0.3}  # fmt: skip

    team.feed(heads(2.0, "api:file/src/lib.py", "api:branch"))
    team.feed(put("api:file/src/lib.py", "f2", 6))  # lib.py moves between two looks of ops
    team.feed(heads(3.0, "api:file/src/lib.py", "api:branch"))
    team.feed(heads(4.0, "api:file/src/lib.py"))  # the same head again: no drift
    ops = by_type(team.take(), "executor")["ops"]
    assert (ops["validations"], ops["drifted"]) == (3, 1)
    assert [(v["ts"], v["owner"], v["keys"], v["moved"]) for v in ops["recent"]] == [
        (2.0, "api", 2, []),
        (3.0, "api", 2, [{"key": "api:file/src/lib.py", "from": 1, "to": 6}]),
        (4.0, "api", 1, []),
    ]
    assert ops["last_moved"] == [{"key": "api:file/src/lib.py", "from": 1, "to": 6}]
    # Found by the suite: the TUI's "last drift" was looked for among the recent
    # validations only, so quiet looks after it (a hook's second look) emptied the cell.
    for n in range(RECENT + 1):
        team.feed(heads(5.0 + n, "api:file/src/lib.py"))
    ops = by_type(team.take(), "executor")["ops"]
    assert all(not v["moved"] for v in ops["recent"])
    assert ops["last_moved"] == [{"key": "api:file/src/lib.py", "from": 1, "to": 6}]


def test_an_executors_decision_lines_show_what_it_decided_and_who_wrote_the_drift() -> None:
    team = team_with_a_plan()
    team.feed(put("api:file/src/lib.py", "f2", 6))
    team.take()

    def gate(ts: float, outcome: str, reason: str | None, **more: Any) -> dict[str, Any]:
        return {"ts": ts, "agent": "ops", "event": "gate", "action": "ship", "outcome": outcome,
                "reason": reason, "detail": "", "drift": [], "replanned": False,
                "roots": ["p1"], "new_roots": [], "rounds": 1, "stall_ms": 0.5, "bytes": 300,
                **more}  # fmt: skip

    drift = [{"key": "api:file/src/lib.py", "from": "f1", "to": "f2", "owner": "api"}]
    team.feed(gate(2.0, "authorized", None, drift=drift, replanned=True, new_roots=["p2"],
                   rounds=3, stall_ms=4.25))  # fmt: skip
    team.feed(gate(3.0, "blocked", "changed_again", drift=[{"key": "k", "from": "x", "to": "y"}],
                   replanned=True, new_roots=["p3"]))  # fmt: skip
    team.feed(gate(4.0, "authorized", None, stall_ms=0.75))
    changed = team.take()
    assert [(r["type"], r["id"]) for r in changed] == [("executor", "ops")]  # no owner row
    ops = by_type(changed, "executor")["ops"]
    counts = ("decisions", "authorized", "blocked", "replanned", "validations", "last_stall_ms")
    assert {k: ops[k] for k in counts} == {
        "decisions": 3,
        "authorized": 2,
        "blocked": 1,
        "replanned": 2,
        "validations": 0,
        "last_stall_ms": 0.75,
    }
    assert [(d["outcome"], d["reason"], d["new_roots"]) for d in ops["decided"]] == [
        ("authorized", None, ["p2"]),
        ("blocked", "changed_again", ["p3"]),
        ("authorized", None, []),
    ]
    # the last drift found: ids the owners' puts never named keep no seqs and no writer
    assert ops["last_drift"]["ts"] == 3.0
    assert ops["last_drift"]["drift"] == [
        {"key": "k", "from": "x", "to": "y", "owner": None, "from_seq": None, "to_seq": None}
    ]
    assert ops["decided"][0]["drift"] == [
        {"key": "api:file/src/lib.py", "from": "f1", "to": "f2", "owner": "api",
         "from_seq": 1, "to_seq": 6}
    ]  # fmt: skip
    assert "ops" not in team.owners
    team.feed({"event": "gate", "agent": "ops", "drift": 7, "new_roots": "p9", "replanned": 1,
               "stall_ms": "9 ms", "rounds": True})  # fmt: skip
    ops = by_type(team.take(), "executor")["ops"]  # a malformed line only counts
    assert (ops["decisions"], ops["replanned"], ops["last_stall_ms"]) == (4, 2, None)
    assert ops["decided"][-1] == {"replanned": False, "new_roots": [], "drift": []}


def test_the_overlap_names_the_files_two_plans_share() -> None:
    team = team_with_a_plan()
    team.feed(put("web:file/src/lib.py", "w1", 1))
    team.feed(put("plan/beta", "p2", 2, ["w1"]))
    team.body("p2", {"session": B, "declaration": {"web:file/src/lib.py": ["target"]}})
    overlap = by_type(team.take(), "overlap")["overlap"]
    assert overlap["plans"] == ["alpha", "beta"]
    assert overlap["cells"] == [[0, 1, ["src/lib.py"]]]


def test_the_lineage_graph_shows_the_head_the_plan_did_not_see() -> None:
    team = team_with_a_plan()
    team.feed(put("api:file/src/lib.py", "f2", 6))
    graph = lineage(team, "alpha")
    kinds = {n["id"]: (n["kind"], n["drift"]) for n in graph["nodes"]}
    assert kinds["p1"] == ("plan", False)
    assert kinds["f1"] == ("parent", True)
    assert kinds["f2"] == ("head", False)
    assert ["f1", "f2", "head"] in graph["edges"]
    assert 'class="node node-head"' in svg(graph) and "head now: api seq 6" in svg(graph)
    assert text(graph)[0] == "plan/alpha  (planner seq 1, p1)"
    assert "  api:file/src/lib.py  (api seq 1, f1)  STALE" in text(graph)
    assert "    head now: api:file/src/lib.py  (api seq 6, f2)" in text(graph)
    assert text(lineage(team, "nothing")) == ["no record of plan nothing in the logs yet"]


def test_an_owner_row_is_its_live_log() -> None:
    team = team_with_a_plan()
    team.feed({"ts": 2.0, "agent": "api", "event": "request", "peer": "planner", "op": "heads",
               "keys": ["api:head"], "outcome": "ok", "latency_ms": 0.4})  # fmt: skip
    team.feed({"ts": 3.0, "agent": "central", "event": "decision", "action": "ship",
               "peer": "executor", "keys": ["k"]})  # fmt: skip
    owners = by_type(team.rows(), "owner")
    assert owners["api"]["keys"] == 4
    assert [p["key"] for p in owners["api"]["puts"]][-1] == "api:branch"
    assert owners["api"]["requests"] == [
        {"ts": 2.0, "peer": "planner", "op": "heads", "outcome": "ok", "latency_ms": 0.4}
    ]
    assert owners["central"]["decisions"] == [{"ts": 3.0, "action": "ship", "keys": ["k"]}]


def test_the_collector_reads_whole_lines_and_a_replaced_log_from_its_start(tmp_path: Path) -> None:
    from planfence_net.cluster.folder import ClusterDir
    from planfence_net.view.collect import Collector

    (tmp_path / "logs").mkdir()
    log = tmp_path / "logs" / "planner.jsonl"
    line = json.dumps(put("plan/alpha", "p1", 1))
    log.write_text(line[:20])  # half a line: not read yet
    collector = Collector(ClusterDir(tmp_path), fetch=False)
    assert collector.round() == []
    with open(log, "a") as f:
        f.write(line[20:] + "\n")
    assert [r["id"] for r in collector.round() if r["type"] == "plan"] == ["alpha"]
    log.write_text(json.dumps(put("plan/beta", "p2", 2)) + "\n")  # shorter: a new file
    assert [r["id"] for r in collector.round() if r["type"] == "plan"] == ["beta"]
    assert json.loads((tmp_path / "view" / "status.json").read_text())["plans"] == 2
