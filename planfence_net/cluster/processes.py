"""A cluster folder and the owner processes running from it: creating the folder, starting
and stopping its owners, and the shapers in front of them with the addresses they give
(links). Pid files, liveness and spawning are pids.py; ports, ports.py.

DIR/cluster.toml        the roster
DIR/keys/NAME.key       each agent's Ed25519 seed (hex, mode 0600)
DIR/data/NAME.sqlite    each owner's store (NAME.sqlite.lock: held by the owner serving
                        it; NAME.sqlite.seq: the highest seq it acknowledged)
DIR/logs/NAME.jsonl     each owner's structured log
DIR/run/NAME.pid        pid of a running owner; NAME.out its stdout and stderr
DIR/.gitignore          keeps keys, stores, logs and pids out of git (the roster may be
                        committed: it holds public keys only)
"""

from __future__ import annotations

import os
import signal
import sys
import time
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomli_w

from ..core.errors import ConfigError
from ..core.identity import generate_key_file
from ..core.roster import Agent, Roster, check_name, parse_address, roster_from_dict
from ..defaults import data_dir
from .compose import (
    COMPOSE_CENTRAL,
    COMPOSE_HOST_BASE_PORT,
    check_compose_layout,
    write_compose_view,
)
from .folder import ClusterDir as ClusterDir  # where it lives: lean, for the hook
from .netns import exec_argv
from .pids import process_alive, read_pid, spawn
from .ports import check_port, free_port

DEFAULT_AGENTS = data_dir("owners") / "agents.toml"


def default_agents(count: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The cluster defaults and the first `count` agent templates from owners/agents.toml."""
    try:
        data = tomllib.loads(DEFAULT_AGENTS.read_text())
    except FileNotFoundError:
        raise ConfigError(f"default agents file missing: {DEFAULT_AGENTS}") from None
    templates = list(data["agents"])
    for i in range(len(templates) + 1, count + 1):
        templates.append({"name": f"agent{i}", "owns": [f"agent{i}/*"]})
    return data, templates[:count]


def init_cluster(
    root: Path,
    *,
    agents: int = 5,
    base_port: int | None = None,
    host: str | None = None,
    name: str | None = None,
    compose: bool = False,
    workspaces: tuple[tuple[str, Path], ...] = (),
) -> Roster:
    """Create a cluster folder with keys and a roster. Refuses to overwrite an existing one.

    `workspaces` adds a workspace owner per (NAME, PATH): it owns `NAME:*` and its roster
    entry records `workspace = PATH` (absolute). With `agents=0` the first one also owns
    `plan/*`, so a single worktree needs no other agent.

    `base_port` 0 picks a free port per agent; None takes the default from owners/agents.toml
    (7411 with `compose`). `compose` adds a member `central` owning no keys (the central store
    of the centralized baseline, which docker-compose.yml runs too) and lays the cluster out
    for docker-compose.yml: `compose/cluster.toml` is the roster as the containers see it (agent NAME at
    owner-NAME:7401) and `compose/links.toml` sends their sessions through shaper-NAME:7402;
    the containers mount both over the folder's own, whose addresses are the ports
    docker-compose.yml publishes on the host.
    """
    if agents < 1 and not workspaces:
        raise ConfigError("a cluster needs at least one agent")
    if compose:
        check_compose_layout(agents, base_port, workspaces)
    cdir = ClusterDir(root)
    if cdir.roster_path.exists():
        raise ConfigError(f"{cdir.roster_path} already exists; remove the folder or use another")
    defaults, templates = member_templates(agents, workspaces, compose=compose)
    existing = [str(cdir.key(t["name"])) for t in templates if cdir.key(t["name"]).exists()]
    if existing:
        raise ConfigError(
            f"key files already exist: {', '.join(existing)}; remove them or use another folder"
        )
    host = host or defaults.get("host", "127.0.0.1")
    default_base = COMPOSE_HOST_BASE_PORT if compose else defaults.get("base_port", 7401)
    base = default_base if base_port is None else base_port
    if base != 0 and not compose:  # refuse taken ports before writing anything
        for i, template in enumerate(templates):
            check_port(
                template["name"],
                host,
                base + i,
                "choose other ports with --base-port N (0 picks free ports)",
            )
    for sub in ("keys", "data", "logs", "run"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "keys", 0o700)
    write_gitignore(root)
    rows = roster_rows(cdir, templates, host, base)
    data = {"cluster": name or defaults.get("cluster", "planfence"), "agents": rows}
    roster = roster_from_dict(data)
    cdir.roster_path.write_text(tomli_w.dumps(data))
    if compose:
        write_compose_view(cdir.root, data)
    return roster


def member_templates(
    agents: int, workspaces: tuple[tuple[str, Path], ...], *, compose: bool
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """owners/agents.toml's defaults, and the members of a new cluster without keys or
    addresses (`init_cluster`): `agents` agents, a workspace owner per workspace and, with
    `compose`, the central store."""
    defaults, templates = default_agents(agents)
    templates = templates + [
        {
            "name": ws,
            "owns": [f"{ws}:*"] + (["plan/*"] if agents < 1 and i == 0 else []),
            "workspace": str(path.resolve()),
        }
        for i, (ws, path) in enumerate(workspaces)
    ]
    # the central store of the centralized baseline (bench/policies/central.py) owns nothing
    if compose:
        templates = templates + [{"name": COMPOSE_CENTRAL, "owns": []}]
    return defaults, templates


def roster_rows(
    cdir: ClusterDir, templates: list[dict[str, Any]], host: str, base: int
) -> list[dict[str, Any]]:
    """Write a fresh key file per member of `templates` and return their roster rows: member
    i listens on `host`:`base`+i, or on a free port of its own when `base` is 0."""
    rows = []
    taken: set[int] = set()
    for i, template in enumerate(templates):
        key = generate_key_file(cdir.key(template["name"]))
        port = free_port(host) if base == 0 else base + i
        while base == 0 and port in taken:  # two random draws may meet
            port = free_port(host)
        taken.add(port)
        rows.append(
            {
                "name": template["name"],
                "address": f"{host}:{port}",
                "public_key": bytes(key.verify_key).hex(),
                "owns": template["owns"],
                **({"workspace": template["workspace"]} if "workspace" in template else {}),
            }
        )
    return rows


def add_member(cdir: ClusterDir, name: str, owns: list[str]) -> Agent:
    """Add the member `name`, owning the key patterns `owns`, to the roster of `cdir`: a
    fresh key file, and a free port on the host of the first member. Owners already running
    learn of it when they restart. Raises ConfigError for a name the roster has or a key
    file that exists already (nothing is written then)."""
    roster = cdir.roster()
    check_name(name)
    if name in roster.names:
        raise ConfigError(f"{name!r} is already a member of {cdir.roster_path}")
    if cdir.key(name).exists():
        raise ConfigError(
            f"key file {cdir.key(name)} already exists; remove it or use another name"
        )
    data = tomllib.loads(cdir.roster_path.read_text())
    [row] = roster_rows(cdir, [{"name": name, "owns": list(owns)}], roster.agents[0].host, 0)
    data["agents"] = [*data.get("agents", []), row]
    roster_from_dict(data)  # the new roster must load before it is written
    tmp = cdir.roster_path.with_name("cluster.toml.planfence-tmp")
    tmp.write_text(tomli_w.dumps(data))
    tmp.replace(cdir.roster_path)
    return cdir.roster().agent(name)


GITIGNORE = ("keys/", "data/", "logs/", "run/", "*.key", "*.sqlite*")


def write_gitignore(root: Path) -> None:
    """Make git ignore the private parts of the cluster folder at `root` (a .gitignore in it;
    lines already there are kept, ours are added when missing)."""
    path = root / ".gitignore"
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        lines = ["# planfence: private keys, stores, logs and pids never belong in git"]
    lines += [line for line in GITIGNORE if line not in lines]
    path.write_text("\n".join(lines) + "\n")


def running_pid(cdir: ClusterDir, name: str, marker: str) -> int | None:
    pid = read_pid(cdir, name)
    return pid if pid is not None and process_alive(pid, marker) else None


def owner_marker(cdir: ClusterDir, agent: str) -> str:
    return f"--agent {agent}"


def owner_argv(cdir: ClusterDir, agent: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "planfence_net",
        "owner",
        "serve",
        str(cdir.root.resolve()),
        "--agent",
        agent,
    ]


def stop_process(cdir: ClusterDir, name: str, marker: str, grace: float = 10.0) -> bool:
    """SIGTERM a recorded process, SIGKILL it after `grace` s; True if one was running."""
    pid = running_pid(cdir, name, marker)
    if pid is None:
        cdir.pid_file(name).unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while process_alive(pid, marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    if process_alive(pid, marker):
        os.kill(pid, signal.SIGKILL)
        while process_alive(pid, marker):
            time.sleep(0.02)
    cdir.pid_file(name).unlink(missing_ok=True)
    return True


def start_owners(
    cdir: ClusterDir, only: list[str] | None = None, namespaces: Mapping[str, str] | None = None
) -> list[str]:
    """Start every owner of the roster (or of `only`) that is not running, each inside its
    network namespace in `namespaces` if it has one (default: the folder's packet links,
    `packetlinks`); returns the names started. Raises ConfigError, starting none, when the
    port of an owner to start is in use.
    """
    if namespaces is None:
        from .packetlinks import packet_namespaces  # it imports this module

        namespaces = packet_namespaces(cdir)
    roster = cdir.roster()
    to_start = [
        agent.name
        for agent in roster.agents
        if (only is None or agent.name in only)
        and running_pid(cdir, agent.name, owner_marker(cdir, agent.name)) is None
    ]
    for name in to_start:
        agent = roster.agent(name)
        if name in namespaces:  # a namespace of its own: nothing else listens there
            continue
        check_port(
            name,
            agent.host,
            agent.port,
            f"give this cluster other ports: edit {cdir.roster_path}, or make a new "
            f"cluster with `planfence cluster init NEWDIR --base-port 0` (free ports)",
        )
    for name in to_start:
        argv = owner_argv(cdir, name)
        spawn(cdir, name, exec_argv(namespaces[name], argv) if name in namespaces else argv)
    return to_start


def stop_owners(cdir: ClusterDir) -> list[str]:
    """Stop every running owner; returns the names stopped."""
    return [
        agent.name
        for agent in cdir.roster().agents
        if stop_process(cdir, agent.name, owner_marker(cdir, agent.name))
    ]


# ---- shapers: one trace-replaying relay in front of each owner --------------------------------


def shaper_name(agent: str) -> str:
    return f"shaper-{agent}"


def shaper_marker(upstream: str) -> str:
    return f"--upstream {upstream}"


def links_path(cdir: ClusterDir) -> Path:
    return cdir.root / "run" / "links.toml"


def read_links(cdir: ClusterDir) -> dict[str, Any]:
    """The recorded shaper links: {"profile": ..., "links": {agent: "host:port"}} or {}."""
    try:
        return tomllib.loads(links_path(cdir).read_text())
    except FileNotFoundError:
        return {}


def static_links_path(cdir: ClusterDir) -> Path:
    return cdir.root / "links.toml"


def link_addresses(cdir: ClusterDir) -> dict[str, tuple[str, int]]:
    """Where executors reach each owner: the static links.toml of the folder if it has one
    (shapers run elsewhere: docker-compose.yml mounts compose/links.toml there in its
    containers), else its running local shapers."""
    try:
        static = tomllib.loads(static_links_path(cdir).read_text())["links"]
        return {agent: parse_address(address) for agent, address in static.items()}
    except FileNotFoundError:
        pass
    links = read_links(cdir).get("links", {})
    addresses = {}
    for agent in cdir.roster().agents:
        if agent.name in links and running_pid(
            cdir, shaper_name(agent.name), shaper_marker(agent.address)
        ):
            host, port = parse_address(links[agent.name])
            addresses[agent.name] = (host, port)
    return addresses


def start_shapers(
    cdir: ClusterDir, profile: str, *, delay_ms: int | None = None, loss: float = 0.0, seed: int = 0
) -> dict[str, tuple[str, int]]:
    """Put a shaper replaying `profile` in front of every owner; returns agent -> address.

    Running shapers of the same profile are kept; a different profile replaces them.
    `loopback` means no shaping: every shaper is stopped and {} returned.
    """
    previous = read_links(cdir)
    if (
        previous.get("profile") != profile
        or previous.get("delay_ms") != delay_ms
        or previous.get("loss") != loss
    ):
        stop_shapers(cdir)
        previous = {}
    if profile == "loopback":
        return {}
    links: dict[str, str] = dict(previous.get("links", {}))
    for i, agent in enumerate(cdir.roster().agents):
        name, marker = shaper_name(agent.name), shaper_marker(agent.address)
        if agent.name in links and running_pid(cdir, name, marker):
            continue
        listen = f"{agent.host}:{free_port(agent.host)}"
        argv = [
            sys.executable,
            "-m",
            "planfence_net",
            "shape",
            "--listen",
            listen,
            "--upstream",
            agent.address,
            "--profile",
            profile,
            "--seed",
            str(seed + i),
        ]
        if delay_ms is not None:
            argv += ["--delay-ms", str(delay_ms)]
        if loss:
            argv += ["--loss", str(loss)]
        spawn(cdir, name, argv)
        links[agent.name] = listen
    record: dict[str, Any] = {"profile": profile, "loss": loss, "links": links}
    if delay_ms is not None:
        record["delay_ms"] = delay_ms
    links_path(cdir).write_text(tomli_w.dumps(record))
    return {agent: parse_address(address) for agent, address in links.items()}


def stop_shapers(cdir: ClusterDir) -> list[str]:
    """Stop every recorded shaper; returns the agents whose shaper was running."""
    stopped = [
        agent.name
        for agent in cdir.roster().agents
        if stop_process(cdir, shaper_name(agent.name), shaper_marker(agent.address))
    ]
    links_path(cdir).unlink(missing_ok=True)
    return stopped
