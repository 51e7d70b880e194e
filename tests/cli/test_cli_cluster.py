"""The cluster and record commands, run in-process with CliRunner against real owners.

`cluster up` run here spawns the owners as children of the test process; the `cluster_dir`
fixture stops them in teardown whatever happens.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import stat
import tomllib
from pathlib import Path

import anyio
import pytest
from anyio.abc import SocketAttribute
from click.testing import CliRunner, Result
from nacl.bindings import crypto_sign_ed25519_pk_to_curve25519
from nacl.signing import SigningKey

from planfence_net.cli.main import app
from planfence_net.cluster.ports import FREE_PORTS_FROM
from planfence_net.core.identity import Identity, load_identity
from planfence_net.protocol.framing import encode_frame
from planfence_net.protocol.noise import HandshakeState
from support.cluster import ClusterHandle, owner_processes

NAMES = ["planner", "reqs", "inventory", "ops", "audit"]
OWNS = {
    "planner": ["plan/*"],
    "reqs": ["req/*"],
    "inventory": ["inv/*"],
    "ops": ["ops/*"],
    "audit": ["audit/*"],
}
HEX64 = re.compile(r"^[0-9a-f]{64}$")
STAMP = r"\d\d:\d\d:\d\d\.\d{3}"


def run(*args: str) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def ok(*args: str) -> str:
    """Run a command that must succeed silently on stderr; returns its stdout."""
    result = run(*args)
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    assert result.stderr == ""
    return result.stdout


def fails(*args: str) -> str:
    """Run a command that must fail as a user error: exit 1, one line on stderr, no
    traceback, nothing on stdout. Returns that line without its newline."""
    result = run(*args)
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.endswith("\n"), result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr[:-1]


def table(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()]


# -- cluster init ------------------------------------------------------------------------------


def free_base(count: int) -> int:
    """The first of `count` consecutive free ports, from 7401 up (init refuses taken ones)."""
    from planfence_net.cluster.ports import port_in_use

    return next(
        base
        for base in range(7401, 9401, 10)
        if not any(port_in_use("127.0.0.1", base + i) for i in range(count))
    )


def test_cluster_init_writes_roster_and_0600_keys(tmp_path: Path) -> None:
    path = tmp_path / "c"
    base = free_base(5)
    out = ok("cluster", "init", path, "--base-port", str(base), "--name", "mine")
    lines = out.splitlines()
    assert lines[0] == f"cluster 'mine' with 5 agents in {path}"
    assert table("\n".join(lines[1:])) == [["agent", "address", "owns"]] + [
        [name, f"127.0.0.1:{base + i}", OWNS[name][0]] for i, name in enumerate(NAMES)
    ]

    assert sorted(p.name for p in path.iterdir()) == [
        ".gitignore",
        "cluster.toml",
        "data",
        "keys",
        "logs",
        "run",
    ]
    assert stat.S_IMODE((path / "keys").stat().st_mode) == 0o700
    roster = tomllib.loads((path / "cluster.toml").read_text())
    assert roster["cluster"] == "mine"
    assert [a["name"] for a in roster["agents"]] == NAMES
    for i, agent in enumerate(roster["agents"]):
        key = path / "keys" / f"{agent['name']}.key"
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        identity = load_identity(agent["name"], key)
        assert agent == {
            "name": agent["name"],
            "address": f"127.0.0.1:{base + i}",
            "public_key": identity.public_key.hex(),
            "owns": OWNS[agent["name"]],
        }

    again = fails("cluster", "init", path)
    assert again == (f"error: {path}/cluster.toml already exists; remove the folder or use another")


def test_cluster_init_never_overwrites_a_leftover_key(tmp_path: Path) -> None:
    path = tmp_path / "c"
    (path / "keys").mkdir(parents=True)
    leftover = path / "keys" / "planner.key"
    leftover.write_text("keep me\n")
    assert fails("cluster", "init", path, "--base-port", "0") == (
        f"error: key files already exist: {leftover}; remove them or use another folder"
    )
    assert leftover.read_text() == "keep me\n"
    assert sorted(p.name for p in (path / "keys").iterdir()) == ["planner.key"]  # nothing half-made
    assert not (path / "cluster.toml").exists()


def test_cluster_init_json_with_free_ports_and_extra_agents(tmp_path: Path) -> None:
    path = tmp_path / "c"
    data = json.loads(ok("cluster", "init", path, "--base-port", "0", "--agents", "7", "--json"))
    assert data["cluster"] == "planfence-demo"
    assert [a["name"] for a in data["agents"]] == NAMES + ["agent6", "agent7"]
    assert data["agents"][6]["owns"] == ["agent7/*"]
    ports = [int(a["address"].removeprefix("127.0.0.1:")) for a in data["agents"]]
    # Not ephemeral ports: an outgoing connection could take one before its owner starts.
    first_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert len(set(ports)) == 7 and all(FREE_PORTS_FROM <= p < first_ephemeral for p in ports)
    for agent in data["agents"]:
        assert HEX64.match(agent["public_key"])
        assert (
            load_identity(agent["name"], path / "keys" / f"{agent['name']}.key").public_key.hex()
            == agent["public_key"]
        )


# -- cluster up / status / down ----------------------------------------------------------------


def status(h: ClusterHandle) -> list[dict[str, object]]:
    """`cluster status --json`'s rows; its exit code says whether every owner is alive."""
    result = run("cluster", "status", h.path, "--json")
    rows: list[dict[str, object]] = json.loads(result.stdout)
    alive = all(r["alive"] for r in rows)
    assert (result.exit_code, result.stderr == "") == (0 if alive else 1, alive), result.stderr
    return rows


def test_cluster_status_table_shows_pid_liveness_and_shaper(cluster_dir: ClusterHandle) -> None:
    h = cluster_dir
    (h.path / "links.toml").write_text('[links]\nreqs = "127.0.0.1:7001"\n')
    (h.path / "run").mkdir(exist_ok=True)
    (h.path / "run" / "links.toml").write_text('profile = "verizon-lte"\n')
    result = run("cluster", "status", h.path)
    assert result.exit_code == 1
    assert result.stderr == (
        "error: 5 of 5 owner(s) not alive: "
        + "; ".join(f"{a.name}: not running" for a in h.roster.agents)
        + "\n"
    )
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows == [["agent", "address", "pid", "alive", "owns", "shaper"]] + [
        [
            a.name,
            a.address,
            "-",
            "no",
            *a.owns,
            *(["127.0.0.1:7001", "(verizon-lte)"] if a.name == "reqs" else ["-"]),
        ]
        for a in h.roster.agents
    ]


def test_cluster_lifecycle_up_idempotent_restart_crashed_down(cluster_dir: ClusterHandle) -> None:
    h = cluster_dir
    assert status(h) == [
        {
            "name": a.name,
            "address": a.address,
            "pid": None,
            "alive": False,
            "owns": list(a.owns),
            "shaper": None,
        }
        for a in h.roster.agents
    ]

    assert ok("cluster", "up", h.path) == (
        "started 5 owner(s): planner, reqs, inventory, ops, audit; 5 running\n"
    )
    pids = {name: h.owner_pid(name) for name in NAMES}
    assert status(h) == [
        {
            "name": a.name,
            "address": a.address,
            "pid": pids[a.name],
            "alive": True,
            "owns": list(a.owns),
            "shaper": None,
        }
        for a in h.roster.agents
    ]
    assert set(owner_processes(str(h.path.resolve()))) == set(pids.values())

    # Idempotent: nothing started, the same processes keep running.
    assert ok("cluster", "up", h.path) == "started 0 owner(s): -; 5 running\n"
    assert {name: h.owner_pid(name) for name in NAMES} == pids

    # A crashed owner is restarted, and only that one.
    h.kill9("reqs")
    rows = {r["name"]: r for r in status(h)}
    assert (rows["reqs"]["alive"], rows["reqs"]["pid"]) == (False, pids["reqs"])
    assert json.loads(ok("cluster", "up", h.path, "--json")) == {
        "started": ["reqs"],
        "running": NAMES,
        "profile": "loopback",
        "links": {},
    }
    restarted = h.owner_pid("reqs")
    assert restarted != pids["reqs"]
    assert {name: h.owner_pid(name) for name in NAMES} == {**pids, "reqs": restarted}
    assert len(h.events("reqs", "listening")) == 2

    assert ok("cluster", "down", h.path) == (
        "stopped 5 owner(s): planner, reqs, inventory, ops, audit\n"
    )
    assert owner_processes(str(h.path.resolve())) == {}
    assert sorted(p.name for p in (h.path / "run").glob("*.pid")) == []
    assert [r["alive"] for r in status(h)] == [False] * 5
    for name in NAMES:  # every owner stopped cleanly, on SIGTERM
        assert [e["event"] for e in h.events(name)][-1] == "stopped"
    assert ok("cluster", "down", h.path) == "stopped 0 owner(s): -\n"


def test_cluster_status_pings_each_owner_a_stopped_one_is_not_alive(
    cluster_dir: ClusterHandle,
) -> None:
    """The process of a SIGSTOPped owner still exists, but it answers nothing: not alive, and
    the status exits 1 naming it."""
    h = cluster_dir
    h.up()
    pids = {name: h.owner_pid(name) for name in NAMES}
    os.kill(pids["reqs"], signal.SIGSTOP)
    try:
        stopped = [(r["name"], r["pid"], r["alive"]) for r in status(h)]
        result = run("cluster", "status", h.path, "--timeout", "0.5")
    finally:
        os.kill(pids["reqs"], signal.SIGCONT)
    assert stopped == [(name, pids[name], name != "reqs") for name in NAMES]
    table = result.stdout.splitlines()[2].split()
    assert table[:4] == ["reqs", h.roster.agent("reqs").address, str(pids["reqs"]), "no"]
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: 1 of 5 owner(s) not alive: reqs: process {pids['reqs']} runs but does not "
        "answer (stopped or frozen)\n",
    )
    assert [(r["pid"], r["alive"]) for r in status(h)] == [(pids[n], True) for n in NAMES]


def test_cluster_status_names_a_killed_owner_and_owner_start_brings_it_back(
    cluster_dir: ClusterHandle,
) -> None:
    h = cluster_dir
    h.up()
    assert run("cluster", "status", h.path).exit_code == 0
    killed = h.kill9("audit")
    result = run("cluster", "status", h.path)
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: 1 of 5 owner(s) not alive: audit: not running (process {killed} is gone)\n",
    )
    assert table(result.stdout)[5][:4] == [
        "audit",
        h.roster.agent("audit").address,
        str(killed),
        "no",
    ]
    started = json.loads(ok("owner", "start", h.path, "audit", "--json"))
    assert started == {"agent": "audit", "pid": h.owner_pid("audit"), "started": True}
    assert started["pid"] != killed
    assert (
        ok("owner", "start", h.path, "audit") == f"already running: audit (pid {started['pid']})\n"
    )
    assert [r["alive"] for r in status(h)] == [True] * 5


def test_owner_stop_stops_one_owner_and_the_others_keep_serving(
    cluster_dir: ClusterHandle,
) -> None:
    h = cluster_dir
    h.up()
    pids = {name: h.owner_pid(name) for name in NAMES}
    assert (
        ok("owner", "stop", h.path, "inventory") == f"stopped inventory (pid {pids['inventory']})\n"
    )
    assert set(owner_processes(str(h.path.resolve()))) == set(pids.values()) - {pids["inventory"]}
    assert [e["event"] for e in h.events("inventory")][-1] == "stopped"  # on SIGTERM, cleanly
    assert [(r["name"], r["alive"]) for r in status(h)] == [(n, n != "inventory") for n in NAMES]
    assert json.loads(ok("owner", "stop", h.path, "inventory", "--json")) == {
        "agent": "inventory",
        "pid": None,
        "was_running": False,
    }
    assert fails("owner", "stop", h.path, "nobody").startswith("error: ")


def test_cluster_status_watch_prints_a_round_per_interval_until_ctrl_c(
    live_cluster: ClusterHandle,
) -> None:
    import subprocess

    from support.cluster import PLANFENCE, interruptible_popen

    h = live_cluster
    watcher = interruptible_popen(
        [str(PLANFENCE), "cluster", "status", str(h.path), "--watch", "--interval", "0.05"]
        + ["--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert watcher.stdout is not None
        first = json.loads(watcher.stdout.readline())
        assert [r["alive"] for r in first] == [True] * 5
        h.kill9("ops")
        while True:  # rounds keep coming; one of them sees ops gone
            rows = json.loads(watcher.stdout.readline())
            if not rows[3]["alive"]:
                break
        watcher.send_signal(signal.SIGINT)
        _, err = watcher.communicate(timeout=30)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.communicate()
    assert watcher.returncode == 1
    assert err.startswith("error: 1 of 5 owner(s) not alive: ops: not running"), err


def test_owner_serve_refuses_a_key_file_others_can_read(cluster_dir: ClusterHandle) -> None:
    key = cluster_dir.cdir.key("reqs")
    key.chmod(0o640)
    assert fails("owner", "serve", cluster_dir.path, "--agent", "reqs") == (
        f"error: key file {key} is accessible by group or others (mode 640); run: chmod 600 {key}"
    )
    assert fails("owner", "serve", cluster_dir.path, "--agent", "mallory") == (
        f"error: no key file for agent 'mallory' at {cluster_dir.cdir.key('mallory')}"
    )


# -- records -----------------------------------------------------------------------------------


def test_put_heads_get_json_with_lowercase_hex_ids(live_cluster: ClusterHandle) -> None:
    h = live_cluster
    first = json.loads(
        ok("put", h.path, "req/a", "--body", '{"x": 1, "a": [true, null]}', "--json")
    )
    assert set(first) == {"key", "owner", "id", "seq"}
    assert (first["key"], first["owner"], first["seq"]) == ("req/a", "reqs", 1)
    assert HEX64.match(first["id"])

    text = ok("put", h.path, "req/a", "--body", '"v2"', "--parent", first["id"])
    second_id = text.split()[4]
    assert text == f"req/a seq 2 id {second_id} (owner reqs)\n" and HEX64.match(second_id)
    plan = json.loads(
        ok(
            "put",
            h.path,
            "plan/p",
            "--kind",
            "plan",
            "--body",
            "{}",
            "--parent",
            second_id,
            "--json",
        )
    )
    assert (plan["owner"], plan["seq"]) == ("planner", 1)

    assert json.loads(ok("heads", h.path, "req/a", "plan/p", "inv/none", "--json")) == [
        {"key": "req/a", "owner": "reqs", "id": second_id, "seq": 2},
        {"key": "plan/p", "owner": "planner", "id": plan["id"], "seq": 1},
        {"key": "inv/none", "owner": "inventory", "id": None, "seq": 0},
    ]
    assert table(ok("heads", h.path, "req/a", "inv/none", "--as", "ops")) == [
        ["key", "owner", "seq", "id"],
        ["req/a", "reqs", "2", second_id],
        ["inv/none", "inventory", "0", "-"],
    ]

    records = json.loads(ok("get", h.path, first["id"], plan["id"], "--json"))
    assert [r["id"] for r in records] == [first["id"], plan["id"]]
    assert records[0] == {
        "id": first["id"],
        "key": "req/a",
        "owner": "reqs",
        "seq": 1,
        "parents": [],
        "kind": "fact",
        "body": {"x": 1, "a": [True, None]},
        "size": records[0]["size"],
        "signature": records[0]["signature"],
    }
    assert list(records[0]["body"]) == ["x", "a"]
    assert records[0]["size"] == 9  # 82 a1 78 01 a1 61 92 c3 c0
    assert re.fullmatch(r"[0-9a-f]{128}", records[0]["signature"])
    assert records[1]["parents"] == [second_id] and records[1]["kind"] == "plan"

    assert ok("get", h.path, second_id) == (
        f'{second_id} req/a seq 2 fact by reqs parents [{first["id"][:16]}] body "v2"\n'
    )


def test_record_commands_fail_with_one_clear_line(live_cluster: ClusterHandle) -> None:
    h = live_cluster
    assert fails("put", h.path, "zzz/a", "--body", "1") == (
        "error: no agent owns 'zzz/a' in the roster"
    )
    assert fails("heads", h.path, "req/a", "zzz/b") == "error: no agent owns 'zzz/b' in the roster"
    missing = "ab" * 32
    assert fails("get", h.path, missing) == f"error: not_found: no owner has record {missing}"
    assert fails("heads", h.path, "req/a", "--as", "mallory") == (
        f"error: no key file for agent 'mallory' at {h.cdir.key('mallory')}"
    )
    bad_id = run("get", h.path, "xyz")
    assert bad_id.exit_code == 64 and (
        "'xyz' is not a record id (64 hex characters, or a unique prefix of at least 8)"
    ) in " ".join(bad_id.stderr.replace("│", " ").split())

    h.kill9("reqs")
    assert fails("put", h.path, "req/a", "--body", "1") == (
        f"error: owner reqs: cannot connect to 127.0.0.1:{h.port('reqs')}: Connection refused"
    )
    assert fails("ping", h.path, "reqs") == fails("put", h.path, "req/a", "--body", "1")


# -- logs --------------------------------------------------------------------------------------


async def stranger_knocks(h: ClusterHandle, key: SigningKey) -> int:
    """Open a handshake to reqs with a key outside the roster; returns our local port once
    the owner has hung up."""
    stream = await anyio.connect_tcp("127.0.0.1", h.port("reqs"))
    async with stream:
        port = int(stream.extra(SocketAttribute.local_port))
        state = HandshakeState(
            "IK",
            True,
            b"planfence-net/1\x00" + h.roster.cluster.encode(),
            s=Identity("stranger", key).noise_private,
            rs=h.roster.agent("reqs").noise_key,
        )
        await stream.send(encode_frame(state.write_message(b"")))
        with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            await stream.receive()
    return port


def test_logs_show_puts_and_the_refused_peer(live_cluster: ClusterHandle) -> None:
    h = live_cluster
    first = json.loads(ok("put", h.path, "req/a", "--body", "1", "--json"))["id"]
    second = json.loads(ok("put", h.path, "req/b", "--body", "2", "--parent", first, "--json"))[
        "id"
    ]
    stranger = SigningKey.generate()
    port = anyio.run(stranger_knocks, h, stranger)
    fingerprint = hashlib.blake2b(
        crypto_sign_ed25519_pk_to_curve25519(bytes(stranger.verify_key)), digest_size=8
    ).hexdigest()

    puts = ok("logs", h.path, "reqs", "--event", "put").splitlines()
    assert len(puts) == 2
    assert re.fullmatch(
        rf"{STAMP} put {{15}}key=req/a id={first[:16]} seq=1 kind=fact "
        r"parents=\[\]",
        puts[0],
    ), puts[0]
    assert re.fullmatch(
        rf"{STAMP} put {{15}}key=req/b id={second[:16]} seq=2 kind=fact "
        rf"parents=\[{first[:16]}\]",
        puts[1],
    ), puts[1]

    everything = ok("logs", h.path, "reqs").splitlines()
    refused = [line for line in everything if " handshake_refused " in line]
    assert len(refused) == 1
    assert re.fullmatch(
        rf"{STAMP} handshake_refused remote=127\.0\.0\.1:{port} "
        rf"fingerprint={fingerprint} reason=not in roster",
        refused[0],
    ), refused
    assert any(
        re.fullmatch(
            rf"{STAMP} request {{11}}peer=reqs op=put keys=\[req/b\] "
            r"outcome=ok latency_ms=[\d.]+",
            line,
        )
        for line in everything
    )

    as_json = [
        json.loads(line)
        for line in ok(
            "logs", h.path, "reqs", "--event", "handshake_refused", "--json"
        ).splitlines()
    ]
    assert [{k: v for k, v in e.items() if k != "ts"} for e in as_json] == [
        {
            "agent": "reqs",
            "event": "handshake_refused",
            "remote": f"127.0.0.1:{port}",
            "fingerprint": fingerprint,
            "reason": "not in roster",
        }
    ]

    assert fails("logs", h.path, "nobody") == (
        "error: no agent 'nobody' in the roster (agents: planner, reqs, inventory, ops, audit)"
    )


def test_logs_before_an_owner_ever_ran(cluster_dir: ClusterHandle) -> None:
    assert fails("logs", cluster_dir.path, "reqs") == (
        f"error: no log for reqs yet at {cluster_dir.cdir.log('reqs')}"
    )


def test_logs_follow_prints_new_puts_as_they_happen(live_cluster: ClusterHandle) -> None:
    import json
    import selectors
    import subprocess
    import time as clock

    from support.cluster import PLANFENCE, run_planfence

    follower = subprocess.Popen(
        [
            str(PLANFENCE),
            "logs",
            str(live_cluster.path),
            "reqs",
            "--follow",
            "--event",
            "put",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        run_planfence("put", str(live_cluster.path), "req/followed", "--body", "1")
        selector = selectors.DefaultSelector()
        selector.register(follower.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
        deadline = clock.monotonic() + 10
        line = ""
        while not line and clock.monotonic() < deadline:
            if selector.select(timeout=deadline - clock.monotonic()):
                line = follower.stdout.readline()  # type: ignore[union-attr]
        entry = json.loads(line)
        assert (entry["event"], entry["key"], entry["seq"]) == ("put", "req/followed", 1)
        assert follower.poll() is None  # still following
    finally:
        follower.terminate()
        follower.wait(timeout=10)
        follower.stdout.close()  # type: ignore[union-attr]


def test_logs_without_an_agent_merge_every_owner_by_time(live_cluster: ClusterHandle) -> None:
    h = live_cluster
    ok("put", h.path, "req/merged", "--body", "1")
    ok("put", h.path, "inv/merged", "--body", "2")
    ok("put", h.path, "req/merged", "--body", "3")
    entries = [
        json.loads(line) for line in ok("logs", h.path, "--event", "put", "--json").splitlines()
    ]
    assert [(e["agent"], e["key"], e["seq"]) for e in entries] == [
        ("reqs", "req/merged", 1),
        ("inventory", "inv/merged", 1),
        ("reqs", "req/merged", 2),
    ]
    assert [e["ts"] for e in entries] == sorted(e["ts"] for e in entries)
    lines = ok("logs", h.path, "--event", "put").splitlines()
    assert [line.split()[:3] for line in lines] == [
        ["reqs", lines[0].split()[1], "put"],
        ["inventory", lines[1].split()[1], "put"],
        ["reqs", lines[2].split()[1], "put"],
    ]
    assert all(re.fullmatch(STAMP, line.split()[1]) for line in lines)
    listening = [
        e["agent"]
        for e in map(json.loads, ok("logs", h.path, "--event", "listening", "--json").splitlines())
    ]
    assert sorted(listening) == sorted(NAMES)
    usage = run("logs", h.path, "--shaper")
    assert usage.exit_code == 64 and "--shaper needs an AGENT" in usage.stderr, usage.stderr


def test_logs_follow_without_an_agent_prints_every_owners_new_lines(
    live_cluster: ClusterHandle,
) -> None:
    import select
    import subprocess
    import time as clock

    from support.cluster import PLANFENCE, run_planfence

    h = live_cluster
    follower = subprocess.Popen(
        [str(PLANFENCE), "logs", str(h.path), "--follow", "--event", "put", "--json"],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        run_planfence("put", str(h.path), "req/followed", "--body", "1")
        run_planfence("put", str(h.path), "audit/followed", "--body", "2")
        assert follower.stdout is not None
        fd, received = follower.stdout.fileno(), b""
        deadline = clock.monotonic() + 20
        while received.count(b"\n") < 2 and clock.monotonic() < deadline:
            if select.select([fd], [], [], deadline - clock.monotonic())[0]:
                received += os.read(fd, 65536)  # raw reads: no line buffered out of select's view
        seen = [json.loads(line) for line in received.splitlines()]
        assert sorted((e["agent"], e["key"]) for e in seen) == [
            ("audit", "audit/followed"),
            ("reqs", "req/followed"),
        ]
        assert follower.poll() is None  # still following
    finally:
        follower.terminate()
        follower.wait(timeout=10)
        if follower.stdout is not None:
            follower.stdout.close()


def test_cluster_add_writes_a_key_and_a_roster_entry_once(cluster_dir: ClusterHandle) -> None:
    h = cluster_dir
    added = json.loads(ok("cluster", "add", h.path, "db", "--owns", "db:*", "--json"))
    roster = h.cdir.roster()
    assert roster.names == [*NAMES, "db"]
    assert added == roster.agent("db").to_json()
    assert roster.owner_of("db:resource/x") == "db"
    assert stat.S_IMODE(h.cdir.key("db").stat().st_mode) == 0o600
    assert load_identity("db", h.cdir.key("db")).public_key.hex() == added["public_key"]
    assert fails("cluster", "add", h.path, "db", "--owns", "x:*") == (
        f"error: 'db' is already a member of {h.cdir.roster_path}"
    )
    assert h.cdir.roster().names == [*NAMES, "db"]
