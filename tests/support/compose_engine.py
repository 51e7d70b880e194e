"""A container engine for tests/test_compose.py: find one, build the image, run and remove a
Compose project. Every engine command runs with a timeout, so nothing here can hang."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from support.cluster import REPO

IMAGE = "planfence-net:latest"
BUILD_TIMEOUT = 900.0  # the dependency stage downloads from PyPI the first time
ENGINE_TIMEOUT = 120.0  # any other engine command


@dataclass(frozen=True)
class Engine:
    """A container engine that runs here: `name` is podman or docker, `compose` the command
    that reads docker-compose.yml (podman-compose or docker compose)."""

    name: str
    compose: tuple[str, ...]

    def run(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = ENGINE_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        """`ENGINE ARGS` in the checkout; raises subprocess.TimeoutExpired past `timeout`."""
        return run([self.name, *args], env=env, timeout=timeout)

    def container(self, project: str, service: str) -> str:
        """The name Compose gives the one container of `service`."""
        return f"{project}_{service}_1" if self.name == "podman" else f"{project}-{service}-1"

    def project_containers(self, project: str) -> list[str]:
        """The names of every container, running or not, of a Compose project."""
        label = f"label=com.docker.compose.project={project}"
        listed = self.run("ps", "-a", "--filter", label, "--format", "{{.Names}}")
        return sorted(listed.stdout.split())

    def project_networks(self, project: str) -> list[str]:
        label = f"label=com.docker.compose.project={project}"
        listed = self.run("network", "ls", "--filter", label, "--format", "{{.Name}}")
        return sorted(listed.stdout.split())

    def address(self, container: str) -> str:
        """The container's address on its (one) Compose network."""
        fmt = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
        return self.run("inspect", "--format", fmt, container).stdout.strip()

    def remove_project(self, project: str) -> None:
        """Remove what `down` may leave: containers, then the project's network."""
        leftovers = self.project_containers(project)
        if leftovers:
            self.run("rm", "-f", *leftovers)
        for network in self.project_networks(project):
            self.run("network", "rm", network)


def run(
    args: list[str], env: dict[str, str] | None = None, timeout: float = ENGINE_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def find_engine() -> Engine | None:
    """Podman (answering `podman info`) with podman-compose, or Docker with a running daemon;
    None when neither runs here."""
    if shutil.which("podman") and shutil.which("podman-compose"):
        if run(["podman", "info"], timeout=60).returncode == 0:
            return Engine("podman", ("podman-compose",))
    if shutil.which("docker") and run(["docker", "info"], timeout=60).returncode == 0:
        return Engine("docker", ("docker", "compose"))
    return None


def build_image(engine: Engine) -> str:
    """Build planfence-net:latest from this checkout; returns "" or what went wrong.

    The engine's layer cache is keyed by each step and the content it copies, so with an
    unchanged Dockerfile, pyproject.toml and sources every step is reused (a few seconds)
    and the image is the one built before. The first try is offline: the dependency stage
    is cached for this pyproject.toml. Only when it is not does the build use the network
    (PyPI, once)."""
    offline = engine.run("build", "--network=none", "-t", IMAGE, ".", timeout=BUILD_TIMEOUT)
    if offline.returncode == 0:
        return ""
    online = engine.run("build", "--network=host", "-t", IMAGE, ".", timeout=BUILD_TIMEOUT)
    if online.returncode == 0:
        return ""
    return online.stdout[-3000:] + online.stderr[-3000:]


@contextlib.contextmanager
def compose_project(
    engine: Engine, project: str, env: dict[str, str], log: Path
) -> Iterator[list[str]]:
    """The compose command for `project` (this checkout's docker-compose.yml); on the way out
    `down`, then whatever `down` left is removed, also when the body failed."""
    command = [*engine.compose, "-p", project, "-f", str(REPO / "docker-compose.yml")]
    try:
        yield command
    finally:
        with log.open("a") as out, contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(
                [*command, "down"],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=REPO,
                timeout=ENGINE_TIMEOUT,
            )
        engine.remove_project(project)


def stack_env(cluster: Path, uid: int, gid: int) -> dict[str, str]:
    """The environment docker-compose.yml reads: the cluster folder and the services' user."""
    env = {
        **os.environ,
        "PLANFENCE_CLUSTER": str(cluster),
        "PLANFENCE_UID": str(uid),
        "PLANFENCE_GID": str(gid),
    }
    if os.getuid() != 0:  # rootless Podman: the container's uid is ours, not a shifted one
        env["PODMAN_USERNS"] = "keep-id"
    return env
