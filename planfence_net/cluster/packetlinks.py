"""A cluster's packet-level links (`cluster up --links packet`): every owner in a network
namespace of its own behind a packet forwarder replaying the profile's traces.

Per agent: a namespace `PREFIX-NAME`, a TUN pair `PREFIXIn` (root namespace) / `PREFIXIf`
(the owner's), and the forwarder `link-NAME` (`traces/tunlink.py --detach`, a process of its
own with a pid file like an owner's) moving packets between them; PREFIX is `pfl` and four
hex digits of the folder's path. The roster's addresses become the owners' namespace
addresses (same ports), so every command that reads the roster (executors, `authorize`,
`logs`, `cluster status`) reaches them from the root namespace through their links, and an
owner reaches another through both links (`netns`). `stop_packet_links` puts the roster's
addresses back.

One forwarder per owner rather than one for all: each is a link with a pid file of its own
that `cluster status` checks and `cluster down` stops, the kernel schedules the links apart
(one busy link never delays another's packets), and they cost little: during the stale-plan
scenario on five owners each used under 0.1 s of CPU in 14 s, and each holds about 30 MB.

DIR/run/packets.toml records what was made (profile, delay, loss, the forwarding setting
found, and per agent its namespace, devices, subnet and roster address before), written
before each step, so a failed or interrupted `cluster up` and `cluster down` remove it all.
"""

from __future__ import annotations

import hashlib
import sys
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from ..core.errors import ConfigError, PlanfenceError, StartError
from ..core.roster import roster_from_dict
from . import netns
from .folder import ClusterDir
from .pids import last_error_line, spawn_ready
from .processes import running_pid, stop_process

READY_TIMEOUT = 10.0  # seconds a forwarder has to make its devices
PREFIX = "pfl"


def link_prefix(cdir: ClusterDir) -> str:
    digest = hashlib.blake2b(str(cdir.root.resolve()).encode(), digest_size=2).hexdigest()
    return f"{PREFIX}{digest}"


def forwarder_name(agent: str) -> str:
    return f"link-{agent}"


def forwarder_marker(near: str) -> str:
    return f"planfence_net.traces.tunlink {near}"


def record_path(cdir: ClusterDir) -> Path:
    return cdir.root / "run" / "packets.toml"


def read_packet_links(cdir: ClusterDir) -> dict[str, Any]:
    """The recorded packet links ({} when the folder has none): {"profile", "loss",
    ["delay_ms"], "forwarding", "links": {agent: {"namespace", "near", "far", "subnet",
    "original"}}}."""
    try:
        return tomllib.loads(record_path(cdir).read_text())
    except FileNotFoundError:
        return {}


def packet_namespaces(cdir: ClusterDir) -> dict[str, str]:
    """agent -> the namespace its owner runs in ({} without packet links)."""
    links = read_packet_links(cdir).get("links", {})
    return {agent: link["namespace"] for agent, link in links.items()}


def forwarder_pid(cdir: ClusterDir, agent: str) -> int | None:
    """The pid of `agent`'s running forwarder, else None."""
    link = read_packet_links(cdir).get("links", {}).get(agent)
    if link is None:
        return None
    return running_pid(cdir, forwarder_name(agent), forwarder_marker(link["near"]))


def start_packet_links(
    cdir: ClusterDir, profile: str, *, delay_ms: int | None = None, loss: float = 0.0
) -> dict[str, str]:
    """Make every agent's namespace, devices and forwarder and point the roster at the
    namespaces (module docstring); returns agent -> namespace. Links this folder already
    runs with the same settings are kept. Raises ConfigError when links cannot be made here
    (not root, no /dev/net/tun) or the folder runs other links, StartError when a forwarder
    does not start, PlanfenceError when iproute2 refuses a step; `stop_packet_links` then
    removes what was made."""
    why = netns.available()
    if why is not None:
        raise ConfigError(why)
    record = read_packet_links(cdir)
    wanted: dict[str, Any] = {"profile": profile, "loss": loss}
    if delay_ms is not None:
        wanted["delay_ms"] = delay_ms
    if record:
        same = all(record.get(k) == wanted.get(k) for k in ("profile", "loss", "delay_ms"))
        if same and all(forwarder_pid(cdir, agent) for agent in record["links"]):
            return packet_namespaces(cdir)
        why = "one of its forwarders stopped" if same else f"not {profile}"
        raise ConfigError(
            f"{cdir.root} runs packet links with {record['profile']} ({why}): "
            f"`planfence cluster down {cdir.root}` first"
        )
    try:
        return _make_links(cdir, wanted, delay_ms, loss)
    except RuntimeError as exc:  # iproute2's own message
        raise PlanfenceError(f"packet links: {exc}") from None


def _make_links(
    cdir: ClusterDir, record: dict[str, Any], delay_ms: int | None, loss: float
) -> dict[str, str]:
    roster, prefix = cdir.roster(), link_prefix(cdir)
    record["forwarding"] = netns.enable_forwarding()
    record["links"] = {}
    subnets = netns.free_subnets(len(roster.agents))
    for i, (agent, subnet) in enumerate(zip(roster.agents, subnets, strict=True)):
        link: dict[str, Any] = {
            "namespace": f"{prefix}-{agent.name}",
            "near": f"{prefix}{i}n",
            "far": f"{prefix}{i}f",
            "subnet": subnet,
            "original": agent.address,
        }
        record["links"][agent.name] = link
        _write_record(cdir, record)  # before the step: a clean-up finds what it made
        netns.add_namespace(link["namespace"])
        argv = [sys.executable, "-m", "planfence_net.traces.tunlink", link["near"], link["far"]]
        argv += ["--profile", record["profile"], "--seed", str(i), "--detach"]
        argv += ["--loss", str(loss)] + ([] if delay_ms is None else ["--delay-ms", str(delay_ms)])
        name = forwarder_name(agent.name)
        line = spawn_ready(cdir, name, argv, READY_TIMEOUT)
        if not line.startswith("ready "):
            said = last_error_line(cdir.out(name)) or "it said nothing"
            raise StartError(name, f"the packet forwarder of {agent.name} failed to start: {said}")
        netns.join(link["namespace"], link["near"], link["far"], subnet)
    _set_addresses(
        cdir,
        {
            a.name: f"{netns.addresses(record['links'][a.name]['subnet'])[1]}:{a.port}"
            for a in roster.agents
        },
    )
    return packet_namespaces(cdir)


def stop_packet_links(cdir: ClusterDir) -> list[str]:
    """Stop every forwarder of the folder, delete its namespaces (stop their owners first)
    and put the roster's addresses back; returns the agents whose forwarder ran. Does
    nothing without packet links. Raises PlanfenceError when iproute2 refuses (not root)."""
    record = read_packet_links(cdir)
    if not record:
        return []
    links: dict[str, Any] = record.get("links", {})
    stopped = [
        agent
        for agent, link in links.items()
        if stop_process(cdir, forwarder_name(agent), forwarder_marker(link["near"]))
    ]
    try:
        for namespace in netns.namespaces(f"{link_prefix(cdir)}-"):
            netns.delete_namespace(namespace)
        if not netns.namespaces(PREFIX):  # another folder's links may still need it
            netns.restore_forwarding(record.get("forwarding", "1"))
    except RuntimeError as exc:
        raise PlanfenceError(f"packet links: {exc}") from None
    _set_addresses(cdir, {agent: link["original"] for agent, link in links.items()})
    record_path(cdir).unlink(missing_ok=True)
    return stopped


def _write_record(cdir: ClusterDir, record: dict[str, Any]) -> None:
    tmp = record_path(cdir).with_name("packets.toml.planfence-tmp")
    tmp.write_text(tomli_w.dumps(record))
    tmp.replace(record_path(cdir))


def _set_addresses(cdir: ClusterDir, addresses: dict[str, str]) -> None:
    """Give the roster's agents the `addresses` named (the others keep theirs)."""
    data = tomllib.loads(cdir.roster_path.read_text())
    for agent in data.get("agents", []):
        agent["address"] = addresses.get(agent["name"], agent["address"])
    roster_from_dict(data)  # the new roster must load before it is written
    tmp = cdir.roster_path.with_name("cluster.toml.planfence-tmp")
    tmp.write_text(tomli_w.dumps(data))
    tmp.replace(cdir.roster_path)
