"""docker-compose.yml: valid Compose, real `planfence` commands, and a stack that runs.

The file is validated against the Compose JSON schema shipped in `tests/data/compose/` (see
`tests/data/README.md`); each service's command and health check is parsed by the real CLI
(every option must exist, every required argument be present). What the stack relies on
(`ping`, `scenario --wait` and its verdict, the folder `cluster init --compose` writes, a key
a container cannot read) is tested here without containers. The `compose` test at the end
builds the image and runs the stack when a container engine is present (Podman with
podman-compose, or Docker with a running daemon; tests/support/compose_engine.py), checks
its verdict, the owners' logs, health, the host's CLI and `down`, and removes its containers
and network also when it fails; without an engine it skips with one line.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from planfence_net.bench.paper.demo import verdict
from planfence_net.bench.paper.scenario import Outcome
from planfence_net.bench.policies.central import parser as central_parser
from planfence_net.cli.main import app
from planfence_net.cluster import processes as clusterlib
from planfence_net.core.identity import load_identity
from support.compose_engine import (
    ENGINE_TIMEOUT,
    Engine,
    build_image,
    compose_project,
    find_engine,
    run,
    stack_env,
)

ROOT = Path(__file__).resolve().parents[1]  # the project
SCHEMA = ROOT / "tests" / "data" / "compose" / "compose-spec.json"


AGENTS = ["planner", "reqs", "inventory", "ops", "audit", "central"]  # central: the store
CENTRAL_ENTRYPOINT = ["python", "-m", "planfence_net.bench.policies.central"]
runner = CliRunner()


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def expand(arg: str) -> str:
    """Compose's ${VAR:-default} interpolation, with every variable unset."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", arg)


def parse_command(args: list[str]) -> list[str]:
    """Parse `planfence ARGS` without running it; returns the command path. Raises
    click.UsageError for an unknown command or option or a missing argument. (Our groups
    take no options of their own: a group's first argument names its subcommand.)"""
    command: click.Command = app
    ctx = command.make_context("planfence", args[:1])  # a group parses only its own options
    path, rest = [], list(args)
    while isinstance(command, click.Group):
        name, sub, rest = command.resolve_command(ctx, rest)
        assert sub is not None and name is not None
        path.append(name)
        group = isinstance(sub, click.Group)
        command, ctx = sub, sub.make_context(name, rest[:1] if group else rest, parent=ctx)
    return path


def test_compose_file_matches_the_compose_schema() -> None:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(compose()), key=str)
    assert errors == []


def health_command(service: dict[str, Any]) -> list[str]:
    """The `planfence` arguments of a service's CMD-SHELL health check."""
    kind, line = service["healthcheck"]["test"]
    assert kind == "CMD-SHELL"
    words = shlex.split(line)
    assert words[0] == "planfence"
    return words[1:]


# -- the file -----------------------------------------------------------------------------------


def test_compose_has_five_owners_the_central_store_a_shaper_each_and_an_executor() -> None:
    services = compose()["services"]
    assert sorted(services) == sorted(
        [f"owner-{a}" for a in AGENTS] + [f"shaper-{a}" for a in AGENTS] + ["executor"]
    )
    for a in AGENTS:
        assert services[f"shaper-{a}"]["command"][3:5] == ["--upstream", f"owner-{a}:7401"]
    assert all(s["image"] == "planfence-net:latest" for s in services.values())


@pytest.mark.parametrize("service", sorted(compose()["services"]))
def test_every_service_command_is_a_real_planfence_command(service: str) -> None:
    found = compose()["services"][service]
    args = [expand(a) for a in found["command"]]
    if "entrypoint" in found:  # only the central store runs something else than planfence
        assert (service, found["entrypoint"]) == ("owner-central", CENTRAL_ENTRYPOINT)
        parsed = central_parser().parse_args(args)
        assert (parsed.agent, parsed.listen) == ("central", ("0.0.0.0", 7401))
        return
    path = parse_command(args)
    assert path[0] in {"owner", "shape", "scenario"}


def test_owners_and_shapers_are_healthy_only_when_they_accept_a_session() -> None:
    services = compose()["services"]
    for a in AGENTS:
        owner, shaper = (
            health_command(services[f"owner-{a}"]),
            health_command(services[f"shaper-{a}"]),
        )
        assert owner == ["ping", "/cluster", a, "--address", "127.0.0.1:7401", "--timeout", "3"]
        assert shaper == ["ping", "/cluster", a, "--address", "127.0.0.1:7402", "--timeout", "3"]
        assert parse_command(owner) == parse_command(shaper) == ["ping"]
        assert services[f"shaper-{a}"]["depends_on"] == {
            f"owner-{a}": {"condition": "service_healthy"}
        }
    assert services["executor"]["depends_on"] == {
        f"shaper-{a}": {"condition": "service_healthy"} for a in AGENTS
    }


def test_the_executor_waits_and_nothing_restarts_in_a_loop() -> None:
    services = compose()["services"]
    assert services["executor"]["command"] == ["scenario", "/cluster", "--wait", "60"]
    assert [name for name, s in services.items() if "restart" in s] == []


def test_owner_ports_are_published_where_the_host_roster_points(tmp_path: Path) -> None:
    services = compose()["services"]
    roster = clusterlib.init_cluster(tmp_path / "c", compose=True)
    for agent in roster.agents:
        assert services[f"owner-{agent.name}"]["ports"] == [f"{agent.address}:7401"]
    assert [a.address for a in roster.agents] == [f"127.0.0.1:{7411 + i}" for i in range(6)]
    assert roster.agent("central").owns == ()  # the store owns no key
    assert [s for s in services if "ports" in services[s]] == [f"owner-{a}" for a in AGENTS]


def test_services_run_as_the_configured_user_and_mount_what_init_made(tmp_path: Path) -> None:
    clusterlib.init_cluster(tmp_path / "cluster", compose=True)
    for name, service in compose()["services"].items():
        assert service["user"] == "${PLANFENCE_UID:-1000}:${PLANFENCE_GID:-1000}", name
        sources = [expand(v).split(":")[0] for v in service["volumes"]]
        for source in sources[:-1]:  # the last one is the traces folder
            assert (tmp_path / source).exists(), f"{name}: {source} is not made by init"
        assert sources[-1] == "./traces"


def test_the_checker_rejects_a_command_that_does_not_exist() -> None:
    with pytest.raises(click.UsageError):
        parse_command(["owner", "serve", "/cluster", "--agent", "x", "--no-such-flag"])
    with pytest.raises(click.UsageError):
        parse_command(["ownr", "serve"])


def test_dockerfile_runs_planfence_as_a_user_and_keys_stay_out_of_git_and_images() -> None:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    assert 'ENTRYPOINT ["planfence"]' in lines
    assert "USER planfence" in lines
    assert "RUN useradd --uid 1000 --user-group --create-home planfence" in lines
    assert "/cluster/" in (ROOT / ".gitignore").read_text().splitlines()
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert ignored[1] == "*" and "!planfence_net/" in ignored and "!cluster/" not in ignored


# -- what the stack relies on -------------------------------------------------------------------


def test_compose_cluster_folder_layout(tmp_path: Path) -> None:
    roster = clusterlib.init_cluster(tmp_path / "c", compose=True)
    inside = tomllib.loads((tmp_path / "c" / "compose" / "cluster.toml").read_text())
    outside = tomllib.loads((tmp_path / "c" / "cluster.toml").read_text())
    assert [a["address"] for a in inside["agents"]] == [f"owner-{a}:7401" for a in AGENTS]
    assert {**inside, "agents": [{**a, "address": ""} for a in inside["agents"]]} == {
        **outside,
        "agents": [{**a, "address": ""} for a in outside["agents"]],
    }
    links = tomllib.loads((tmp_path / "c" / "compose" / "links.toml").read_text())
    assert links == {"links": {a: f"shaper-{a}:7402" for a in AGENTS}}
    # the host reaches the owners directly at the roster's addresses: no links file
    assert clusterlib.link_addresses(clusterlib.ClusterDir(tmp_path / "c")) == {}
    assert roster.agent("reqs").address == "127.0.0.1:7412"


@pytest.mark.parametrize(
    "options",
    [["--agents", "3"], ["--base-port", "9000"], ["--base-port", "0"], ["--workspace", "w=."]],
)
def test_init_compose_refuses_a_cluster_the_compose_file_does_not_run(
    tmp_path: Path, options: list[str]
) -> None:
    result = runner.invoke(app, ["cluster", "init", str(tmp_path / "c"), "--compose", *options])
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (
        "error: --compose makes the cluster docker-compose.yml runs (5 agents, ports "
        "7411-7416); leave out --agents, --base-port and --workspace\n"
    )
    assert not (tmp_path / "c").exists()


def test_init_compose_says_what_the_compose_file_reads(tmp_path: Path) -> None:
    result = runner.invoke(app, ["cluster", "init", str(tmp_path / "c"), "--compose"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[-1] == (
        f"docker-compose.yml: PLANFENCE_CLUSTER={tmp_path / 'c'} "
        f"PLANFENCE_UID={os.getuid()} PLANFENCE_GID={os.getgid()}"
    )
    plain = runner.invoke(app, ["cluster", "init", str(tmp_path / "d"), "--base-port", "0"])
    assert plain.exit_code == 0 and "docker-compose.yml" not in plain.stdout


def test_ping_answers_through_the_roster_and_an_explicit_address(live_cluster) -> None:  # type: ignore[no-untyped-def]
    port = live_cluster.port("reqs")
    result = runner.invoke(app, ["ping", str(live_cluster.path), "reqs"])
    assert result.exit_code == 0, result.stderr
    assert re.fullmatch(rf"reqs at 127\.0\.0\.1:{port} answered in \d+\.\d ms\n", result.stdout)
    result = runner.invoke(
        app,
        [
            "ping",
            str(live_cluster.path),
            "ops",
            "--as",
            "reqs",
            "--json",
            "--address",
            f"127.0.0.1:{live_cluster.port('ops')}",
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["address"] == f"127.0.0.1:{live_cluster.port('ops')}"


def test_ping_of_a_stopped_owner_is_one_line_and_exit_1(cluster_dir) -> None:  # type: ignore[no-untyped-def]
    port = cluster_dir.port("audit")
    result = runner.invoke(app, ["ping", str(cluster_dir.path), "audit", "--timeout", "2"])
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert f"127.0.0.1:{port}" in result.stderr or "audit" in result.stderr


def test_scenario_wait_gives_up_with_one_line(cluster_dir) -> None:  # type: ignore[no-untyped-def]
    result = runner.invoke(app, ["scenario", str(cluster_dir.path), "--wait", "0.5"])
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.startswith("error: owner ") and result.stderr.count("\n") == 1
    assert "did not accept a session in time" in result.stderr


def outcome(
    policy: str, invalid: bool | None, issued: bool = True, blocked: str | None = None
) -> Outcome:
    return Outcome(
        "reservation",
        policy,
        issued,
        b"\1" * 32 if issued else None,
        ("req/x",),
        blocked=blocked,
        invalid=invalid,
    )


def test_the_verdict_holds_only_when_the_race_happened_and_only_freshness_fell_for_it() -> None:
    assert verdict([outcome("freshness", True), outcome("planfence", False)]) == []
    assert verdict(
        [
            outcome("freshness", False),
            outcome("planfence", True),
            outcome("sync", None),
            outcome("allkeys", False, False, "timeout"),
        ]
    ) == [
        "freshness issued no invalid action, so the race did not happen",
        "planfence issued an invalid reservation action",
        "sync: the reservation action could not be judged (the owners' logs are not readable here)",
        "allkeys did not issue the reservation action (timeout)",
    ]


def load_as(user: int | None, name: str, path: Path) -> str:
    """load_identity in a forked child running as `user` (None: as we are); returns the
    outcome as 'ok' or 'ErrorClass message'."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to `user`, try, report, exit without pytest's cleanup
        try:
            if user is not None:
                os.setgid(user)
                os.setuid(user)
            try:
                load_identity(name, path)
                os.write(write_end, b"ok")
            except Exception as exc:
                os.write(write_end, f"{type(exc).__name__} {exc}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        answer = pipe.read().decode()
    os.waitpid(pid, 0)
    return answer


def test_a_key_the_container_user_cannot_read_is_one_clear_error(tmp_path: Path) -> None:
    clusterlib.init_cluster(tmp_path / "c", compose=True)
    key = tmp_path / "c" / "keys" / "reqs.key"
    user = 65534 if os.getuid() == 0 else None  # root reads anything: try it as nobody
    if user is None:
        key.chmod(0)
    uid = os.getuid() if user is None else user
    assert load_as(user, "reqs", key) == (
        f"ConfigError cannot read key file {key}: permission denied for uid {uid}; run as the "
        "user who made the cluster (in docker-compose.yml: PLANFENCE_UID and PLANFENCE_GID)"
    )
    key.chmod(0o600)
    assert load_as(None, "reqs", key) == "ok"


def test_the_central_store_without_its_key_is_one_line_and_exit_1(tmp_path: Path) -> None:
    clusterlib.init_cluster(tmp_path / "c", compose=True)
    key = tmp_path / "c" / "keys" / "central.key"
    key.unlink()
    store = subprocess.run(
        [sys.executable, "-m", "planfence_net.bench.policies.central", str(tmp_path / "c")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (store.returncode, store.stdout) == (1, "")
    assert store.stderr == f"error: no key file for agent 'central' at {key}\n"


# -- the stack, on a real container engine ------------------------------------------------------

STACK_UID = 4321  # as root: the stack runs as a user the image does not know, as yours would
OWNERS = AGENTS[:-1]
SCENARIO_LINE = (
    "stale-plan scenario: 5 owners and a central store through shapers, "
    "3 workflow families per policy"
)


@pytest.fixture
def stack_engine() -> Iterator[Engine]:
    """A container engine with planfence-net:latest built from this checkout, held for this
    test alone (fixed ports, one image tag); skips with one line when no engine runs here."""
    engine = find_engine()
    if engine is None:
        pytest.skip(
            "no container engine (podman with podman-compose, or docker with a running daemon)"
        )
    with open("/tmp/planfence-compose-test.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one compose stack at a time on this machine
        busy = [p for p in range(7411, 7417) if port_in_use(p)]
        assert busy == [], f"ports {busy} on 127.0.0.1 are in use (another compose stack?)"
        problem = build_image(engine)
        assert problem == "", problem
        yield engine


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def summary_rows(output: str) -> dict[str, list[str]]:
    """The scenario's table: policy -> its cells."""
    policies = ("freshness", "central", "sync", "allkeys", "planfence")
    rows = [line.split() for line in output.splitlines()]
    return {row[0]: row[1:] for row in rows if row and row[0] in policies and len(row) == 7}


def check_health(engine: Engine, container: str) -> bool:
    """The container's health check, as the Compose file judges it: healthy unless
    `retries` probes `interval` apart all fail (a probe through a shaped link can meet a
    trace outage). Podman without systemd runs health checks only when asked."""
    if engine.name == "docker":
        state = engine.run("inspect", "--format", "{{.State.Health.Status}}", container)
        return state.stdout.strip() == "healthy"
    health = compose()["x-health"]
    for _ in range(health["retries"]):
        if engine.run("healthcheck", "run", container).returncode == 0:
            return True
        time.sleep(float(health["interval"].removesuffix("s")))
    return False


# Who came to each owner in the scenario, and how: (peer, "shaper" or "direct") of every
# handshake, and what the executor (`ops`) asked. The executor plays the owners' own writes
# too, directly (a write on one's own daemon is local, not coordination), and the sync
# baseline's subscriptions between owners; everything the executor asks goes through the
# owner's shaper, as does the wait's ping (each owner pings itself through its link) and
# every write to the central store.
VISITS: dict[str, tuple[set[tuple[str, str]], set[str]]] = {
    "planner": ({("planner", "direct"), ("planner", "shaper")}, set()),
    "reqs": (
        {("inventory", "direct"), ("ops", "shaper"), ("reqs", "direct"), ("reqs", "shaper")},
        {"ack", "get", "heads", "subscribe"},
    ),
    "inventory": (
        {("inventory", "direct"), ("inventory", "shaper"), ("ops", "shaper"), ("reqs", "direct")},
        {"ack", "heads", "subscribe"},
    ),
    "ops": ({("ops", "direct"), ("ops", "shaper")}, {"ping", "put"}),
    "audit": ({("audit", "shaper")}, set()),
    "central": (
        {(a, "shaper") for a in ["central", "inventory", "ops", "planner", "reqs"]},
        {"put", "stats", "validate"},
    ),
}


def visits(
    engine: Engine, project: str, path: Path, agent: str
) -> tuple[set[tuple[str, str]], set[str]]:
    """What `agent`'s log says about its visitors, as VISITS states it."""
    shaper = engine.address(engine.container(project, f"shaper-{agent}"))
    lines = (path / "logs" / f"{agent}.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    came = {
        (e["peer"], "shaper" if e["remote"].rpartition(":")[0] == shaper else "direct")
        for e in events
        if e["event"] == "handshake"
    }
    asked = {e["op"] for e in events if e["event"] == "request" and e["peer"] == "ops"}
    return came, asked


@pytest.mark.compose
@pytest.mark.timeout(900)
def test_the_compose_stack_runs_the_scenario_and_down_removes_it(
    stack_engine: Engine, tmp_path: Path
) -> None:
    engine, project = stack_engine, f"planfence-test-{os.getpid()}"
    path = tmp_path / "cluster"
    clusterlib.init_cluster(path, compose=True)
    uid = gid = STACK_UID if os.getuid() == 0 else None
    if uid is not None:  # root: the folder is someone else's, as on a user's machine
        for item in [path, *path.rglob("*")]:
            os.chown(item, uid, uid, follow_symlinks=False)
    uid, gid = (uid, gid) if uid is not None else (os.getuid(), os.getgid())
    env = stack_env(path, uid, gid)
    log = tmp_path / "compose.log"  # a file, not a pipe: `podman start -a` children hold it
    with compose_project(engine, project, env, log) as command:
        with log.open("w") as out:
            code = subprocess.run(
                [*command, "up", "--no-build", "--exit-code-from", "executor"],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=ROOT,
                timeout=420,
            ).returncode
        output = log.read_text(errors="replace")
        # the executor's verdict: the race happened, only freshness fell for it
        assert code == 0, output[-4000:]
        assert SCENARIO_LINE in output
        rows = summary_rows(output)
        assert {p: r[:4] for p, r in rows.items()} == {
            "freshness": ["3", "3", "0", "0"],
            **{p: ["3", "0", "3", "0"] for p in ("central", "sync", "allkeys", "planfence")},
        }
        # the owners' logs: the executor (`ops`) reached every owner through its shaper
        assert {a: visits(engine, project, path, a) for a in AGENTS} == VISITS
        for service in [f"{kind}-{a}" for kind in ("owner", "shaper") for a in AGENTS]:
            assert check_health(engine, engine.container(project, service)), service
        # the host's planfence uses the published ports of the folder's own roster
        result = runner.invoke(app, ["heads", str(path), "req/reservation-42/planfence", "--json"])
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout)[0]["owner"] == "reqs"
        # what the containers wrote belongs to the stack's user
        written = [*(path / "data").iterdir(), *(path / "logs").iterdir()]
        assert len(written) >= 12 and {p.stat().st_uid for p in written} == {uid}
        # down: every container gone; the network too (podman-compose 1.0.3 leaves it)
        down = run([*command, "down"], env=env, timeout=ENGINE_TIMEOUT)
        assert down.returncode == 0, down.stdout[-2000:] + down.stderr[-2000:]
        assert engine.project_containers(project) == []
        assert not any(port_in_use(p) for p in range(7411, 7417))
        networks = engine.project_networks(project)
        left = [f"{project}_default"] if engine.name == "podman" else []
        assert networks in ([], left)
