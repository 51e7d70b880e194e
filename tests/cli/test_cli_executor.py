"""`planfence authorize`, `planfence plan` and `planfence demo`, run in-process."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from planfence_net.cli.main import app
from planfence_net.cli.text import LEGEND

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def put(path: str, key: str, body: str, *parents: str, command: str = "put") -> str:
    args = [command, path, key, "--body", body, "--json"]
    for parent in parents:
        args += ["--parent", parent]
    code, out, err = invoke(*args)
    assert code == 0, err
    rid = json.loads(out)["id"]
    assert re.fullmatch(r"[0-9a-f]{64}", rid)
    return rid


def test_authorize_exit_codes(live_cluster) -> None:  # type: ignore[no-untyped-def]
    path = str(live_cluster.path)
    r3 = put(path, "req/order-17", '{"qty": 3}')
    fact = put(path, "inv/stock-17", '{"on_hand": 40}')
    plan = put(path, "plan/ship-17", '{"steps": ["ship 3"]}', r3, fact, command="plan")
    code, out, err = invoke("get", path, plan, "--json")
    assert code == 0 and json.loads(out)[0]["kind"] == "plan"
    deps = ["--dep", "req/order-17", "--dep", "inv/stock-17"]

    code, out, _ = invoke("authorize", path, "--root", plan, *deps, "--as", "ops")
    assert code == 0
    assert out.splitlines()[0] == "action: authorized"

    r4 = put(path, "req/order-17", '{"qty": 4}')
    code, out, _ = invoke("authorize", path, "--root", plan, *deps, "--json")
    assert code == 2
    decision = json.loads(out)
    assert (decision["outcome"], decision["reason"]) == ("blocked", "stale_plan")
    assert decision["drift"] == {"req/order-17": {"from": r3, "to": r4}}

    code, out, _ = invoke(
        "authorize",
        path,
        "--root",
        plan,
        "--dep",
        "req/order-17",
        "--dep",
        "audit/unread",
        "--json",
    )
    assert code == 3
    assert json.loads(out)["reason"] == "incomplete_declaration"

    live_cluster.kill9("inventory")
    code, out, _ = invoke("authorize", path, "--root", plan, *deps, "--timeout", "1", "--json")
    assert code == 3
    assert json.loads(out)["reason"] == "owner_unavailable"
    # the old name still works, hidden
    code, out, _ = invoke("authorize", path, "--root", plan, *deps, "--deadline", "1", "--json")
    assert code == 3
    assert json.loads(out)["reason"] == "owner_unavailable"


def test_authorize_timeout_is_one_positive_duration(cluster_dir) -> None:  # type: ignore[no-untyped-def]
    path = str(cluster_dir.path)
    code, _, err = invoke(
        "authorize", path, "--root", "ab" * 32, "--dep", "req/x", "--timeout", "0"
    )
    assert code == 64
    assert "Invalid value for '--timeout': 0.0 is not in the range x>=0.01." in err
    code, out, _ = invoke("authorize", "--help")
    text = " ".join(out.replace("│", " ").split())
    assert code == 0 and "--timeout" in text and "--deadline" not in text
    assert "How long the whole decision may take (every round, every owner)" in text


def test_authorize_rejects_a_bad_root_id(cluster_dir) -> None:  # type: ignore[no-untyped-def]
    code, _, err = invoke("authorize", str(cluster_dir.path), "--root", "abc", "--dep", "req/x")
    assert code == 64  # a usage error (EX_USAGE), never 2 (stale)
    assert (
        "'abc' is not a record id (64 hex characters, or a unique prefix of at least 8)"
    ) in " ".join(err.replace("│", " ").split())


def test_demo_shows_freshness_invalid_and_planfence_valid(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from support.cluster import owner_processes

    code, out, err = invoke("demo", "--dir", tmp_path / "demo", "--json")
    assert code == 0, err
    summary = {row["policy"]: row for row in json.loads(out)["summary"]}
    assert list(summary) == ["freshness", "central", "sync", "allkeys", "planfence"]
    assert summary["freshness"]["issued"] == summary["freshness"]["invalid"] == 3
    for safe in ("central", "sync", "allkeys", "planfence"):
        row = summary[safe]
        assert (row["issued"], row["invalid"], row["replans"], row["blocked"]) == (3, 0, 3, 0)
        assert row["kib_per_action"] > 0
    assert owner_processes(str(tmp_path)) == {}
    assert processes_mentioning(str(tmp_path)) == []  # the central store too


def processes_mentioning(fragment: str) -> list[str]:
    found = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            cmdline = path.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited meanwhile
        if fragment in cmdline:
            found.append(cmdline)
    return found


def test_put_as_another_agent_is_refused_with_one_clear_line(live_cluster) -> None:  # type: ignore[no-untyped-def]
    code, out, err = invoke("put", live_cluster.path, "req/order-17", "--body", "1", "--as", "ops")
    assert (code, out) == (1, "")
    assert err == "error: forbidden: only reqs may write 'req/order-17'; this session is ops\n"


def test_demo_over_synthetic_lte_shapers_pays_the_link_delay(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from planfence_net.traces import load_profile

    code, out, err = invoke(
        "demo", "--dir", tmp_path / "demo", "--profile", "synthetic-lte", "--json"
    )
    assert code == 0, err
    summary = {row["policy"]: row for row in json.loads(out)["summary"]}
    assert summary["freshness"]["invalid"] == 3
    assert all(
        summary[p]["invalid"] == 0 and summary[p]["issued"] == 3
        for p in ("central", "sync", "allkeys", "planfence")
    )
    # PlanFence needs at least one round trip through a shaper per action
    delay_ms = load_profile("synthetic-lte").delay_ms
    assert summary["planfence"]["stall_ms_per_action"] >= 2 * delay_ms
    assert processes_mentioning(str(tmp_path)) == []


def test_scenario_runs_on_a_running_cluster_without_a_central_store(live_cluster) -> None:  # type: ignore[no-untyped-def]
    code, out, err = invoke("scenario", live_cluster.path, "--json")
    assert code == 0, err
    summary = {row["policy"]: row for row in json.loads(out)["summary"]}
    assert list(summary) == ["freshness", "sync", "allkeys", "planfence"]  # no central store
    why = (
        "the roster has no agent `central`, the central store the centralized baseline "
        "writes to (`planfence demo` starts one)"
    )
    assert json.loads(out)["skipped"] == {"central": why}
    code, text, _ = invoke("scenario", live_cluster.path)
    assert code == 0 and f"\nno central row: {why}\n" in text
    assert text.startswith("stale-plan scenario: 5 owners, 3 workflow families per policy\n")
    assert f"\n{LEGEND}\nno central row" in text  # the legend right under the table
    assert summary["freshness"]["invalid"] == 3
    assert [summary[p]["invalid"] for p in ("sync", "allkeys", "planfence")] == [0, 0, 0]
    # the owners' own logs show the executor (`ops`) asking for heads
    assert any(
        e["peer"] == "ops" and e["op"] == "heads" for e in live_cluster.events("reqs", "request")
    )
    # and its own decision log what it decided: each gated action replanned once, authorized
    log = live_cluster.path / "logs" / "executors" / "ops.jsonl"
    gates = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(gates) == 2 * 2 * 3  # two runs, allkeys and planfence, three families each
    assert {g["action"].rsplit("/", 1)[1] for g in gates} == {"allkeys", "planfence"}
    assert {(g["outcome"], g["replanned"], len(g["new_roots"])) for g in gates} == {
        ("authorized", True, 1)
    }
    assert all(d["owner"] == "reqs" for g in gates for d in g["drift"]) and gates[0]["drift"]
