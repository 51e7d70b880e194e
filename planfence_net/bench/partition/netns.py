"""Network namespaces joined by veth links, for partitions on separate network stacks.

`Topology` makes one namespace for the executors (the hub) and one per owner, each owner's
joined to the hub by its own veth pair with addresses in 198.18.0.0/15 (the range set aside
for network tests, RFC 2544), which exist only inside these namespaces. Cutting an owner's
link sets the hub's end down (`ip link set ... down`): packets are dropped and the route is
gone, as when a cable is pulled; healing sets it up again. Every name starts with a prefix
unique to the run (`pf` and six hex digits); `close` deletes every namespace (and with them
their veths), also after a failure. Needs root and iproute2 (`available` says why not).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Sequence

from ...cluster.netns import ip, namespaces

HUB = "hub"


def available() -> str | None:
    """None when namespaces can be made here, else one line saying why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "network namespaces need iproute2 (`ip`)"
    return None


class Topology:
    """The hub namespace and one namespace per owner in `owners` (module docstring)."""

    def __init__(self, owners: Sequence[str]) -> None:
        self.prefix = f"pf{secrets.token_hex(3)}"
        self.owners = list(owners)
        self.made: list[str] = []  # namespaces created, deleted by close()
        self.address = {o: f"198.18.{i + 1}.2" for i, o in enumerate(self.owners)}

    def namespace(self, node: str) -> str:
        return f"{self.prefix}-{node}"

    def hub_end(self, owner: str) -> str:
        return f"{self.prefix}h{self.owners.index(owner)}"

    def create(self) -> None:
        """Make the namespaces and links (raises RuntimeError; `close` cleans up)."""
        for node in (HUB, *self.owners):
            ip("netns", "add", self.namespace(node))
            self.made.append(self.namespace(node))
            ip("-n", self.namespace(node), "link", "set", "lo", "up")
        hub = self.namespace(HUB)
        for i, owner in enumerate(self.owners):
            near, far = self.hub_end(owner), f"{self.prefix}o{i}"
            ns = self.namespace(owner)
            ip("-n", hub, "link", "add", near, "type", "veth", "peer", "name", far, "netns", ns)
            ip("-n", hub, "addr", "add", f"198.18.{i + 1}.1/24", "dev", near)
            ip("-n", ns, "addr", "add", f"{self.address[owner]}/24", "dev", far)
            ip("-n", ns, "link", "set", far, "up")
            ip("-n", hub, "link", "set", near, "up")

    def cut(self, owner: str) -> None:
        ip("-n", self.namespace(HUB), "link", "set", self.hub_end(owner), "down")

    def heal(self, owner: str) -> None:
        ip("-n", self.namespace(HUB), "link", "set", self.hub_end(owner), "up")

    def command(self, node: str, argv: Sequence[str]) -> list[str]:
        """`argv` run inside `node`'s namespace."""
        return ["ip", "netns", "exec", self.namespace(node), *argv]

    def close(self) -> list[str]:
        """Delete every namespace made (their veths go with them); returns the errors."""
        errors = []
        for ns in reversed(self.made):
            try:
                ip("netns", "del", ns)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                errors.append(str(exc))
        self.made = []
        return errors


def leftovers(prefix: str) -> list[str]:
    """Namespaces still present whose name starts with `prefix`."""
    return namespaces(prefix)
