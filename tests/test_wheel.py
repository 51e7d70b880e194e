"""The wheel is the product: built from the checkout, installed (not editable) into a fresh
virtualenv outside it, and used from a folder outside it as a new user would.

The virtualenv reuses the dependencies this test environment already installed (one .pth
line naming their site-packages; that folder's own .pth files, the editable install's
among them, are not read), so the test needs no network: what it checks is the wheel itself,
its data files, its entry point and its declared dependencies. About 15 s, so it runs in the
default suite.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

from support.cluster import REPO, kill_all
from support.workspace import FIXTURES, make_repo, stop, write

TIMEOUT = 240
FILES = {"auth.ts": "export const timeout = 30;\n", "README.md": "# app\n"}


def run(argv: list[str | Path], cwd: Path, env: dict[str, str], stdin: str = "") -> str:
    """Run a command; returns stdout, raises AssertionError with its output on failure."""
    proc = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


class Installed:
    """A virtualenv holding the wheel, and a working folder outside the checkout."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "venv" / "bin"
        self.work = root / "work"
        self.work.mkdir()
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        self.env["PATH"] = f"{self.bin}{os.pathsep}{os.environ['PATH']}"

    def planfence(self, *args: str | Path, cwd: Path | None = None, stdin: str = "") -> str:
        return run([self.bin / "planfence", *args], cwd or self.work, self.env, stdin)

    def hook(self, data: dict[str, object], cwd: Path) -> tuple[int, str]:
        proc = subprocess.run(
            [self.bin / "planfence", "hook", "claude"],
            cwd=cwd,
            env=self.env,
            input=json.dumps(data),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        return proc.returncode, proc.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("wheel")
    assert not root.resolve().is_relative_to(REPO)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    env = dict(os.environ)
    run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", root / "dist", REPO], root, env)
    [wheel] = (root / "dist").glob("planfence_net-*.whl")
    run([sys.executable, "-m", "venv", "--without-pip", root / "venv"], root, env)
    python = root / "venv" / "bin" / "python"
    site = run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], root, env)
    (Path(site.strip()) / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    run([*pip, "--python", python, "install", "--no-deps", wheel], root, env)
    box = Installed(root)
    try:
        yield box
    finally:
        kill_all(str(root))  # any owner or workspace server a failed step left running


def test_the_wheel_runs_from_its_own_files_and_plots_only_with_the_bench_extra(
    installed: Installed,
) -> None:
    assert installed.planfence("--version") == f"planfence-net {version('planfence-net')}\n"
    code = (
        "import importlib.metadata as m, re, planfence_net\n"
        "print(planfence_net.__file__)\n"
        "for r in m.requires('planfence-net'):\n"
        "    name, _, marker = r.partition(';')\n"
        "    extra = re.search(r'extra == .(\\w+).', marker)\n"
        "    print(re.match(r'[\\w.-]+', name).group(), extra.group(1) if extra else '-')\n"
    )
    where, *requires = run(
        [installed.bin / "python", "-c", code], installed.work, installed.env
    ).splitlines()
    assert Path(where).is_relative_to(installed.root / "venv")
    base = sorted(line.split()[0] for line in requires if line.endswith(" -"))
    assert base == [
        "PyNaCl", "aiosqlite", "anyio", "click", "cryptography", "h11", "msgpack", "rich", "tomli-w",
        "uvloop",
    ]  # fmt: skip
    assert "matplotlib bench" in requires


def test_cluster_init_up_status_down_and_profiles_outside_the_checkout(
    installed: Installed,
) -> None:
    assert "synthetic-lte" in installed.planfence("profiles")
    init = installed.planfence("cluster", "init", "c1", "--base-port", "0")
    assert init.splitlines()[0] == "cluster 'planfence-demo' with 5 agents in c1"
    try:
        assert installed.planfence("cluster", "up", "c1") == (
            "started 5 owner(s): planner, reqs, inventory, ops, audit; 5 running\n"
        )
        status = json.loads(installed.planfence("cluster", "status", "c1", "--json"))
        assert [row["alive"] for row in status] == [True] * 5
        put = installed.planfence("put", "c1", "req/x", "--body", '{"qty": 3}')
        assert put.startswith("req/x seq 1 id ")
    finally:
        down = installed.planfence("cluster", "down", "c1")
    assert down == "stopped 5 owner(s): planner, reqs, inventory, ops, audit\n"


def test_demo_outside_the_checkout(installed: Installed) -> None:
    out = installed.planfence("demo")
    assert out.startswith("stale-plan scenario: 5 owners and a central store on 127.0.0.1")
    rows = {line.split()[0]: line.split()[1:3] for line in out.splitlines()[2:8] if line}
    assert rows["freshness"] == ["3", "3"] and rows["planfence"] == ["3", "0"]


def test_workspace_serve_and_the_hook_outside_the_checkout(installed: Installed) -> None:
    repo = make_repo(installed.root / "repo", FILES)
    server = subprocess.Popen(
        [installed.bin / "planfence", "workspace", "serve", repo],
        cwd=installed.work,
        env=installed.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # printed once the owner accepts sessions
        assert "serving" in line, line + server.stdout.read()
        call = json.loads(
            (FIXTURES / "claude-edit.json").read_text().replace("$PROJECT", str(repo))
        )
        installed.planfence(
            "workspace",
            "trust",
            "fix",
            "--read",
            "auth.ts",
            "--lockfiles",
            "none",
            "--session",
            call["session_id"],
            cwd=repo,
        )  # fmt: skip  (a plan bound to a session is that session's only)
        assert installed.hook(call, repo) == (0, "")
        write(repo, {"auth.ts": "export const timeout = 5;\n"})
        code, reason = installed.hook(call, repo)
        assert code == 2
        assert (
            reason.splitlines()[1] == "Workspace drift detected since the previous trusted state:"
        )
    finally:
        stop(server)
    assert server.returncode == -signal.SIGTERM or server.returncode == 0


def test_every_module_of_the_package_imports_from_the_wheel(installed: Installed) -> None:
    """The wheel holds every module of the checkout's package (packages are found, not listed),
    and each imports from the install outside the checkout."""
    modules = sorted(
        ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for path in (REPO / "planfence_net").rglob("*.py")
    )
    assert {"planfence_net.bench.torture.probe", "planfence_net.bench.partition.run"} <= set(
        modules
    )
    code = (
        "import importlib, sys\n"
        "import importlib.util\n"
        "for name in sys.stdin.read().split():\n"
        "    if name.endswith('__main__'):  # found, not run\n"
        "        where = importlib.util.find_spec(name).origin\n"
        "    else:\n"
        "        where = importlib.import_module(name).__file__\n"
        "    assert where.startswith(sys.prefix), where\n"
        "    print(name)\n"
    )
    done = run(
        [installed.bin / "python", "-c", code], installed.work, installed.env, "\n".join(modules)
    )
    assert done.split() == modules
