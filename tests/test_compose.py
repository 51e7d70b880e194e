"""docker-compose.yml: valid Compose, real `planfence` commands, and a stack that runs.

The file is validated against the Compose JSON schema shipped in `tests/data/compose/` (see
`tests/data/README.md`); each service's command and health check is parsed by the real CLI
(every option must exist, every required argument be present). What the stack relies on
(`ping`, `scenario --wait` and its verdict, the folder `cluster init --compose` writes, a key
a container cannot read) is tested here without containers. The slow test at the end runs
the stack when a container engine is present (Podman with podman-compose, or Docker with a
running daemon) and removes its containers, also when it fails.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
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

from planfence_net.bench.central import parser as central_parser
from planfence_net.bench.demo import verdict
from planfence_net.bench.scenario import Outcome
from planfence_net.cli.main import app
from planfence_net.cluster import processes as clusterlib
from planfence_net.core.identity import load_identity

ROOT = Path(__file__).resolve().parents[1]  # the project
SCHEMA = ROOT / "tests" / "data" / "compose" / "compose-spec.json"


AGENTS = ["planner", "reqs", "inventory", "ops", "audit", "central"]  # central: the store
CENTRAL_ENTRYPOINT = ["python", "-m", "planfence_net.bench.central"]
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


# -- the stack, on a real container engine ------------------------------------------------------


def container_engine() -> tuple[str, list[str]] | None:
    """(engine, compose command) when one can run the stack here: Podman with podman-compose,
    or Docker with a running daemon; None otherwise."""
    if shutil.which("podman") and shutil.which("podman-compose"):
        return "podman", ["podman-compose"]
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "info"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return "docker", ["docker", "compose"]
    return None


def run(
    args: list[str], env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def compose_stack(tmp_path: Path) -> Iterator[tuple[str, list[str], dict[str, str], Path]]:
    """(engine, compose command with project and file, environment, cluster folder) for a
    fresh compose cluster; every container, and the network, is removed in teardown."""
    with contextlib.ExitStack() as stack:
        yield from _compose_stack(tmp_path, stack)


def _compose_stack(
    tmp_path: Path, stack: contextlib.ExitStack
) -> Iterator[tuple[str, list[str], dict[str, str], Path]]:
    found = container_engine()
    if found is None:
        pytest.skip(
            "no container engine (podman with podman-compose, or docker with a running daemon)"
        )
    engine, compose_cmd = found
    if (
        run(
            [
                engine,
                "image",
                "exists" if engine == "podman" else "inspect",
                "planfence-net:latest",
            ],
            timeout=60,
        ).returncode
        != 0
    ):
        pytest.skip(
            f"no planfence-net:latest image: build it once with `{engine} build "
            "--network=host -t planfence-net:latest .`"
        )
    # One compose stack at a time on this machine (fixed ports, one image tag): wait for it.
    lock = stack.enter_context(open("/tmp/planfence-compose-test.lock", "w"))
    fcntl.flock(lock, fcntl.LOCK_EX)
    busy = [p for p in range(7411, 7416) if port_in_use(p)]
    if busy:
        pytest.skip(f"ports {busy} on 127.0.0.1 are in use (another compose stack?)")
    # Rebuild on the cached dependency stage: the image runs this checkout, offline. The
    # stage is cached only for this pyproject.toml; a changed one needs the network once.
    deps = run([engine, "build", "--network=none", "--target", "deps", "."])
    if deps.returncode != 0:
        pytest.skip(
            f"the image's dependency stage is not built for this pyproject.toml: "
            f"build it once with `{engine} build --network=host -t planfence-net:latest .`"
        )
    built = run([engine, "build", "--network=none", "-t", "planfence-net:latest", "."])
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    project = f"planfence-test-{os.getpid()}"
    path = tmp_path / "cluster"
    clusterlib.init_cluster(path, compose=True)
    env = {
        **os.environ,
        "PLANFENCE_CLUSTER": str(path),
        "PLANFENCE_UID": str(os.getuid()),
        "PLANFENCE_GID": str(os.getgid()),
    }
    command = [*compose_cmd, "-p", project, "-f", str(ROOT / "docker-compose.yml")]
    try:
        yield engine, command, env, path
    finally:
        run([*command, "down"], env=env, timeout=120)
        listed = run(
            [engine, "ps", "-a", "-q", "--filter", f"label=com.docker.compose.project={project}"],
            timeout=60,
        )
        leftovers = listed.stdout.split()
        if leftovers:
            run([engine, "rm", "-f", *leftovers], timeout=120)
        run(
            [
                engine,
                "network",
                "rm",
                "-f" if engine == "podman" else "--force",
                f"{project}_default",
            ],
            timeout=60,
        )


@pytest.mark.compose
@pytest.mark.timeout(600)
def test_the_compose_stack_runs_the_scenario_and_the_executor_exits_0(compose_stack) -> None:  # type: ignore[no-untyped-def]
    engine, command, env, path = compose_stack
    # Output to a file, not a pipe: podman-compose returns while the `podman start -a` it
    # spawned for the owners still hold its output open (until `down` stops them).
    log = path.parent / "compose-up.log"
    with log.open("w") as out:
        code = subprocess.run(
            [*command, "up", "--no-build", "--exit-code-from", "executor"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=ROOT,
            timeout=400,
        ).returncode
    output = log.read_text(errors="replace")
    assert code == 0, output[-4000:]
    assert "stale-plan scenario: 5 owners through shapers, 3 workflow families per policy" in output
    names = run([engine, "ps", "--format", "{{.Names}}"], timeout=60).stdout.split()
    for service in [f"{kind}-{a}" for kind in ("owner", "shaper") for a in AGENTS]:
        container = next(n for n in names if service in n and command[2] in n)
        if engine == "podman":  # without systemd Podman runs health checks only when asked
            # A service is unhealthy only after `retries` failed probes `interval` apart, as
            # the Compose file says: a probe through a shaped link can meet a trace outage
            # (three probes back to back failed once in a full-suite run under load).
            health = compose()["x-health"]
            for _ in range(health["retries"]):
                checked = run(["podman", "healthcheck", "run", container], timeout=60)
                if checked.returncode == 0:
                    break
                time.sleep(float(health["interval"].removesuffix("s")))
            assert checked.returncode == 0, (container, checked.stdout, checked.stderr)
        else:
            state = run(
                ["docker", "inspect", "--format", "{{.State.Health.Status}}", container], timeout=60
            )
            assert state.stdout.strip() == "healthy", container
    # the host's planfence uses the published ports of the folder's own roster
    result = runner.invoke(app, ["heads", str(path), "req/reservation-42/planfence", "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)[0]["owner"] == "reqs"
    # what the containers wrote belongs to us
    written = [*(path / "data").iterdir(), *(path / "logs").iterdir()]
    assert len(written) >= 10 and {p.stat().st_uid for p in written} == {os.getuid()}
