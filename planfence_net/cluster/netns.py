"""Network namespaces behind TUN devices, with iproute2: the plumbing of packet-level links.

An owner's namespace holds the far end of a TUN pair whose near end stays in the root
namespace; the packet forwarder (`traces/tunlink.py`, a process of its own) made both and
moves every packet between them. `join` gives the pair a /32 address each from
198.19.0.0/16 (RFC 2544's test range): the root namespace reaches the owner's address
through the near end, and the namespace's default route leaves through the far end, so an
owner reaches another owner through the root namespace (which forwards, `enable_forwarding`)
and both owners' links. Needs root, iproute2 and /dev/net/tun (`available` says why not).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

IP_TIMEOUT = 10.0
SUBNETS = "198.19"  # 198.19.S.1 (near, root namespace) and 198.19.S.2 (far, the owner's)
FORWARDING = Path("/proc/sys/net/ipv4/ip_forward")
TUN = Path("/dev/net/tun")


def available() -> str | None:
    """None when packet-level links can be made here, else one line saying why not."""
    if os.geteuid() != 0:
        return "packet-level links need root (network namespaces, TUN devices)"
    if shutil.which("ip") is None:
        return "packet-level links need iproute2 (`ip`)"
    if not TUN.exists():
        return "packet-level links need /dev/net/tun"
    return None


def ip(*args: str) -> str:
    """Run `ip ARGS` and return its output; raises RuntimeError with ip's own message."""
    done = subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def free_subnets(count: int) -> list[int]:
    """`count` values S whose 198.19.S.0/24 no address or route of the root namespace uses,
    lowest first. Raises RuntimeError when fewer are left."""
    used = ip("-4", "-o", "addr", "show") + ip("-4", "-o", "route", "show")
    free = [s for s in range(1, 255) if f"{SUBNETS}.{s}." not in used]
    if len(free) < count:
        raise RuntimeError(f"no {count} free /24s left in {SUBNETS}.0.0/16")
    return free[:count]


def addresses(subnet: int) -> tuple[str, str]:
    """(near, far): the root namespace's and the owner's address on subnet S."""
    return f"{SUBNETS}.{subnet}.1", f"{SUBNETS}.{subnet}.2"


def add_namespace(namespace: str) -> None:
    ip("netns", "add", namespace)
    ip("-n", namespace, "link", "set", "lo", "up")


def join(namespace: str, near: str, far: str, subnet: int) -> None:
    """Move TUN device `far` into `namespace` and address and route both ends (module doc)."""
    near_ip, far_ip = addresses(subnet)
    ip("link", "set", far, "netns", namespace)
    ip("addr", "add", f"{near_ip}/32", "dev", near)
    ip("link", "set", near, "up")
    ip("route", "add", f"{far_ip}/32", "dev", near, "src", near_ip)
    ip("-n", namespace, "addr", "add", f"{far_ip}/32", "dev", far)
    ip("-n", namespace, "link", "set", far, "up")
    ip("-n", namespace, "route", "add", "default", "dev", far, "src", far_ip)


def delete_namespace(namespace: str) -> None:
    """Delete `namespace` (nothing when it is gone already); raises RuntimeError."""
    if namespace in namespaces(namespace):
        ip("netns", "del", namespace)


def namespaces(prefix: str) -> list[str]:
    """The namespaces whose name starts with `prefix`."""
    listed = ip("netns", "list")
    return [line.split()[0] for line in listed.splitlines() if line.startswith(prefix)]


def exec_argv(namespace: str, argv: list[str]) -> list[str]:
    """`argv` run inside `namespace` (ip execs it: the pid is the command's own)."""
    return ["ip", "netns", "exec", namespace, *argv]


def enable_forwarding() -> str:
    """Make the root namespace forward IPv4 packets; returns the setting it had ("0"/"1")."""
    before = FORWARDING.read_text().strip()
    if before != "1":
        FORWARDING.write_text("1\n")
    return before


def restore_forwarding(before: str) -> None:
    if before in ("0", "1") and FORWARDING.read_text().strip() != before:
        FORWARDING.write_text(f"{before}\n")
