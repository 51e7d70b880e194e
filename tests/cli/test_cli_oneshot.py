"""The one-shot `planfence authorize` (cli/oneshot.py): which arguments it reads itself, and
that a fresh process prints, and exits with, exactly what the click command does.

Each case runs the installed `planfence` (the one-shot path) and the click command in-process
on the same cluster, and compares them: decisions field by field (all but the time and the
byte counts), errors and usage errors character by character.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from click.testing import CliRunner

from planfence_net.cli.main import app
from planfence_net.cli.oneshot import AuthorizeArgs, parse_authorize
from support.cluster import COMMAND_TIMEOUT, PLANFENCE, ClusterHandle

ROOT = "ab" * 32
MEASURED = ("elapsed", "bytes_sent", "bytes_received")


def fresh(*args: str) -> tuple[int, str, str]:
    """`planfence ARGS` in a new process: (exit code, stdout, stderr)."""
    proc = subprocess.run(
        [str(PLANFENCE), *args],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    return proc.returncode, proc.stdout, proc.stderr


def in_click(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def decided(*args: str) -> tuple[int, dict[str, Any]]:
    """Run `authorize ARGS --json` both ways (the fresh one on the one-shot path); check that
    they agree and return (exit code, decision without its time and byte counts)."""
    argv = ["authorize", *args, "--json"]
    assert parse_authorize(argv[1:]) is not None  # the fresh process decides without click
    results = []
    for run in (fresh, in_click):
        code, out, err = run(*argv)
        assert err == "", (run.__name__, err)
        decision = json.loads(out)
        assert decision["elapsed"] > 0 and decision["bytes_sent"] > 0
        results.append((code, {k: v for k, v in decision.items() if k not in MEASURED}))
    assert results[0] == results[1]
    return results[0]


def unmeasured(text: str) -> str:
    """`text` with the byte counts and the time of a decision's last line blanked."""
    return re.sub(r"\d+ B ", "N B ", re.sub(r"[\d.]+ ms$", "T ms", text, flags=re.M))


def put(path: str, key: str, body: str, *parents: str, command: str = "put") -> str:
    code, out, err = in_click(
        command, path, key, "--body", body, "--json", *[a for p in parents for a in ("--parent", p)]
    )
    assert code == 0, err
    return str(json.loads(out)["id"])


@contextmanager
def links(cluster: ClusterHandle, addresses: dict[str, tuple[str, int]]) -> Iterator[None]:
    """A static links.toml sending AGENT's traffic to ADDRESS, for the block."""
    path = cluster.path / "links.toml"
    lines = [f'{agent} = "{host}:{port}"' for agent, (host, port) in addresses.items()]
    path.write_text("[links]\n" + "\n".join(lines) + "\n")
    try:
        yield
    finally:
        path.unlink()


@contextmanager
def silent_listener() -> Iterator[tuple[str, int]]:
    """A loopback port whose connections are accepted (by the kernel) and never answered."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()


@contextmanager
def closed_port() -> Iterator[tuple[str, int]]:
    """A loopback port that refuses connections: bound, never listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()


# ---- what the one-shot path reads itself --------------------------------------------------


def test_plain_arguments_are_read_as_click_reads_them() -> None:
    rid = bytes.fromhex(ROOT)
    assert parse_authorize(["c", "--root", ROOT, "--dep", "k"]) == AuthorizeArgs(
        "c", (rid,), ("k",), None, "action", 5.0, False
    )
    assert parse_authorize(
        ["--json", f"--root={ROOT}", "--dep", "a", "c", "--dep=b", "--root", ROOT.upper()]
        + ["--as", "ops", "--name", "ship", "--timeout", "2.5"]
    ) == AuthorizeArgs("c", (rid, rid), ("a", "b"), "ops", "ship", 2.5, True)
    # the hidden old name wins over --timeout, as in click's command
    assert parse_authorize(
        ["c", "--root", ROOT, "--dep", "k", "--deadline", "1", "--timeout", "3"]
    ) == AuthorizeArgs("c", (rid,), ("k",), None, "action", 1.0, False)


@pytest.mark.parametrize(
    "args",
    [
        ["c", "--root", ROOT, "--dep", "k", "--help"],
        ["c", "--root", ROOT, "--dep", "k", "-h"],
        ["c", "--root", ROOT, "--dep", "k", "--no-such-option"],
        ["c", "--root", ROOT, "--dep"],  # a value missing
        ["c", "--root", ROOT],  # no --dep
        ["c", "--dep", "k"],  # no --root
        ["--root", ROOT, "--dep", "k"],  # no DIR
        ["c", "d", "--root", ROOT, "--dep", "k"],  # two
        ["", "--root", ROOT, "--dep", "k"],
        ["c", "--root", ROOT, "--dep", "k", "--as", "a", "--as", "b"],  # repeated
        ["c", "--root", ROOT, "--dep", "k", "--json", "--json"],
        ["c", "--root", ROOT, "--dep", "k", "--json=yes"],
        ["c", "--root", ROOT, "--dep", "-k"],  # a value that looks like an option
        ["c", "--root", ROOT, "--dep="],
        ["c", "--root", ROOT, "--dep", "k", "--", "d"],
        ["c", "--root", "abc", "--dep", "k"],  # no id
        ["c", "--root", "abababab", "--dep", "k"],  # a prefix, looked up in the stores
        ["c", "--root", "zz" * 32, "--dep", "k"],
        ["c", "--root", "ab " * 21 + "a", "--dep", "k"],  # 64 characters, 21 bytes
        ["c", "--root", ROOT, "--dep", "k", "--timeout", "0"],  # below min
        ["c", "--root", ROOT, "--dep", "k", "--timeout", "soon"],
        ["c", "--root", ROOT, "--dep", "k", "--timeout", "inf"],
        ["c", "--root", ROOT, "--dep", "k", "--deadline", "nan"],
    ],
)
def test_anything_else_goes_to_click(args: list[str]) -> None:
    assert parse_authorize(args) is None


def test_links_are_looked_up_wherever_the_cluster_has_them(
    cluster_dir: ClusterHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without either links file every owner is at its roster address; with either, the
    addresses are `link_addresses`' (the shortcut only skips importing it)."""
    from planfence_net.cli.oneshot import _link_addresses
    from planfence_net.cluster import processes

    cdir = cluster_dir.cdir
    assert _link_addresses(cdir) == processes.link_addresses(cdir) == {}
    sentinel = {"reqs": ("127.0.0.1", 1)}
    monkeypatch.setattr(processes, "link_addresses", lambda _: sentinel)
    for path in (processes.static_links_path(cdir), processes.links_path(cdir)):
        path.parent.mkdir(exist_ok=True)
        path.write_text("")
        assert _link_addresses(cdir) is sentinel
        path.unlink()
    assert _link_addresses(cdir) == {}


# ---- a fresh process decides as the click command does ------------------------------------


def test_decisions_and_exit_codes_match_the_click_command(live_cluster: ClusterHandle) -> None:
    path = str(live_cluster.path)
    r3 = put(path, "req/order-5", '{"qty": 3}')
    fact = put(path, "inv/stock-5", '{"on_hand": 40}')
    plan = put(path, "plan/ship-5", '{"steps": ["ship 3"]}', r3, fact, command="plan")
    deps = ["--dep", "req/order-5", "--dep", "inv/stock-5"]

    code, decision = decided(path, "--root", plan, *deps, "--as", "ops", "--name", "ship")
    assert (code, decision["action"], decision["outcome"]) == (0, "ship", "authorized")
    assert decision["frontier"] == {"req/order-5": r3, "inv/stock-5": fact}
    code, out, err = fresh("authorize", path, "--root", plan, *deps)
    assert (code, err) == (0, "")
    assert unmeasured(out) == (
        "action: authorized\n"
        "  all 2 declared keys match their owners' heads\n"
        "  3 round trips, N B sent, N B received, T ms\n"
    )
    assert unmeasured(in_click("authorize", path, "--root", plan, *deps)[1]) == unmeasured(out)

    r4 = put(path, "req/order-5", '{"qty": 4}')
    code, decision = decided(path, "--root", plan, *deps)
    assert (code, decision["reason"]) == (2, "stale_plan")
    assert decision["drift"] == {"req/order-5": {"from": r3, "to": r4}}
    code, out, err = fresh("authorize", path, "--root", plan, *deps)
    assert (code, err) == (2, "")
    assert unmeasured(out) == (
        "action: stale plan: a declared key changed since the plan was made; replan from the "
        "owners' heads and retry\n"
        "  plan is stale and replanning is disabled: req/order-5\n"
        f"  req/order-5: {r3[:12]} -> {r4[:12]}\n"
        "  3 round trips, N B sent, N B received, T ms\n"
        f"next: planfence heads {path} req/order-5  (the versions that replaced the plan's; "
        f"make the plan again from them: planfence plan {path} KEY --body JSON --parent ID ..., "
        "then authorize the new plan's id)\n"
    )
    assert unmeasured(in_click("authorize", path, "--root", plan, *deps)[1]) == unmeasured(out)

    code, decision = decided(path, "--root", plan, "--dep", "req/order-5", "--dep", "audit/x")
    assert (code, decision["reason"]) == (3, "incomplete_declaration")

    code, decision = decided(path, "--root", ROOT, "--dep", "req/order-5", "--timeout", "2")
    assert (code, decision["reason"]) == (3, "missing_lineage")

    live_cluster.kill9("inventory")
    code, decision = decided(path, "--root", plan, *deps, "--timeout", "2")
    assert (code, decision["reason"]) == (3, "owner_unavailable")


def test_errors_and_usage_errors_are_the_click_command_s(live_cluster: ClusterHandle) -> None:
    """One line and exit 1 for what PlanfenceError reports; click's usage errors (exit 64)
    for malformed arguments, which the one-shot path leaves to click."""
    path = str(live_cluster.path)
    dep = ["--dep", "req/x"]
    for args in (
        [path, "--root", ROOT, *dep, "--as", "nobody"],  # not in the roster
        [str(live_cluster.path / "nowhere"), "--root", ROOT, *dep],  # no cluster folder
    ):
        assert parse_authorize(args) is not None
        code, out, err = fresh("authorize", *args)
        assert (code, out) == (1, "") and err.startswith("error: ") and err.count("\n") == 1
        assert (code, out, err) == in_click("authorize", *args)
    for args in (
        [path, "--root", "abc", *dep],
        [path, "--root", ROOT, *dep, "--timeout", "0"],
        [path, "--root", ROOT],
        [path, "--root", ROOT, *dep, "--no-such-option"],
    ):
        code, out, err = fresh("authorize", *args)
        assert (code, out) == (64, "") and "Traceback" not in err
        assert (code, out, err) == in_click("authorize", *args)
        assert err.startswith("Usage: planfence authorize [OPTIONS] DIR\n")


def test_an_unreachable_owner_blocks_as_in_the_click_command(live_cluster: ClusterHandle) -> None:
    """links.toml is read: an owner reached at a port that refuses connections, or one that
    never answers, blocks the decision as the click command blocks it; an owner the plan
    does not need that never answers does not hold the decision up (the fetch settles
    without it)."""
    path = str(live_cluster.path)
    fact = put(path, "req/order-6", '{"qty": 1}')
    plan = put(path, "plan/ship-6", '{"steps": ["ship 1"]}', fact, command="plan")
    args = [path, "--root", plan, "--dep", "req/order-6"]
    with closed_port() as address, links(live_cluster, {"reqs": address}):
        code, decision = decided(*args, "--timeout", "5")
        assert (code, decision["reason"]) == (3, "owner_unavailable")
    assert decided(*args)[0] == 0  # through the roster's address again
    with silent_listener() as address, links(live_cluster, {"reqs": address}):
        code, decision = decided(*args, "--timeout", "1")
        assert (code, decision["reason"]) == (3, "owner_unavailable")
    with silent_listener() as address, links(live_cluster, {"audit": address}):
        code, out, err = fresh("authorize", *args, "--timeout", "20", "--json")
        assert (code, err) == (0, "")
        assert json.loads(out)["elapsed"] < 10  # settled without audit, long before 20 s
