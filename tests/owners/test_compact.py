"""`planfence owner compact`: old versions go, every live lineage stays.

A real cluster (owners as processes on 127.0.0.1): records and plans are written, the owners
stopped, one store compacted, the owners started again; every live plan is still authorized
and a plan that was no longer live is refused for its missing lineage.
"""

from __future__ import annotations

import json
import sqlite3

from click.testing import CliRunner

from planfence_net.cli.main import app
from support.cluster import ClusterHandle

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def put(path: str, key: str, *parents: str, command: str = "put") -> str:
    args = [command, path, key, "--body", '{"v": 1}', "--json"]
    for parent in parents:
        args += ["--parent", parent]
    code, out, err = invoke(*args)
    assert code == 0, err
    return str(json.loads(out)["id"])


def decision(path: str, plan: str, *deps: str) -> dict[str, object]:
    args = ["authorize", path, "--root", plan, "--json", "--as", "ops"]
    for dep in deps:
        args += ["--dep", dep]
    _, out, _ = invoke(*args)
    result: dict[str, object] = json.loads(out)
    return result


def records(cluster: ClusterHandle, agent: str) -> set[str]:
    with sqlite3.connect(cluster.cdir.db(agent)) as db:
        return {rid.hex() for (rid,) in db.execute("SELECT id FROM records")}


def test_compaction_keeps_every_live_lineage(live_cluster: ClusterHandle) -> None:
    path = str(live_cluster.path)
    r1, r2, r3 = (put(path, "req/a") for _ in range(3))  # three versions of req/a
    b1, b2 = put(path, "req/b"), put(path, "req/b")
    fact = put(path, "inv/s")
    old_plan = put(path, "plan/x", r2, fact, command="plan")
    live_plan = put(path, "plan/x", r3, fact, command="plan")  # replanned: old_plan is not live
    side_plan = put(path, "plan/y", r1, fact, command="plan")  # live, names the old r1
    assert decision(path, old_plan, "req/a", "inv/s")["reason"] == "stale_plan"

    code, _, err = invoke("owner", "compact", path, "--agent", "reqs", "--keep", "1")
    assert code == 1
    assert err.startswith("error: store ") and "is in use by pid" in err  # owner running
    assert err.count("\n") == 1

    live_cluster.stop()
    code, _, err = invoke("owner", "compact", path, "--agent", "reqs", "--keep", "0")
    assert (code, err) == (
        1,
        "error: --keep must be at least 1 (every key keeps its head), got 0\n",
    )
    assert records(live_cluster, "reqs") == {r1, r2, r3, b1, b2}
    code, out, err = invoke("owner", "compact", path, "--agent", "reqs", "--keep", "1", "--json")
    assert code == 0, err
    done = json.loads(out)
    assert (done["records_before"], done["removed"], done["records_after"]) == (5, 2, 3)
    assert done["kept_for_lineage"] == 1  # r1: the live plan/y names it
    # r2 only old_plan named; b1 nothing; heads and what live lineages name stay
    assert records(live_cluster, "reqs") == {r1, r3, b2}

    live_cluster.up()
    authorized = decision(path, live_plan, "req/a", "inv/s")
    assert authorized["outcome"] == "authorized", authorized
    assert decision(path, side_plan, "inv/s")["outcome"] == "authorized"
    refused = decision(path, old_plan, "req/a", "inv/s")
    assert (refused["outcome"], refused["reason"]) == ("blocked", "missing_lineage"), refused
    code, out, _ = invoke("get", path, r3, b2, "--json")
    assert code == 0 and [r["key"] for r in json.loads(out)] == ["req/a", "req/b"]
