"""`serve_owner`: one real owner process (`planfence owner serve`) with chosen limits and
descriptor limit, started and stopped by the test."""

from __future__ import annotations

import resource
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from support.cluster import EXIT_TIMEOUT, ClusterHandle


@contextmanager
def serve_owner(
    h: ClusterHandle,
    agent: str = "reqs",
    *,
    limits: tuple[str, ...] = (),
    nofile: int | None = None,
) -> Iterator[subprocess.Popen[str]]:
    """`planfence owner serve` for `agent` with `--limit`s and an optional descriptor limit;
    yields once it listens, stops it (SIGTERM, then SIGKILL) on exit."""

    def lower_nofile() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    argv = [
        sys.executable,
        "-m",
        "planfence_net",
        "owner",
        "serve",
        str(h.path.resolve()),
        "--agent",
        agent,
        *(f"--limit={limit}" for limit in limits),
    ]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lower_nofile,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()  # printed once the owner listens
        assert line.startswith(f"owner {agent} listening on "), line + proc.stderr.read()
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
