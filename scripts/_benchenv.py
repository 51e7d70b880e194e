"""Shared start of the benchmark scripts: bring what they need on a clean machine, then run
in the project's .venv.

`prepare(argv, etcd=True)` installs the project with its `bench` extra into .venv
(scripts/_venv.sh), installs Debian's `etcd-server` when `etcd` is missing and we are root
with apt-get (otherwise the benchmark skips etcd with one line), and re-executes the script
with the venv's Python. It does this once: the re-executed script finds
PLANFENCE_BENCH_READY set and returns at once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def prepare(script: str, etcd: bool = True) -> None:
    if os.environ.get("PLANFENCE_BENCH_READY"):
        sys.path.insert(0, str(ROOT))
        return
    subprocess.run(
        ["bash", "-c", 'PLANFENCE_EXTRAS=bench . "$1/scripts/_venv.sh"', "_", str(ROOT)],
        check=True,
    )
    if etcd and shutil.which("etcd") is None and shutil.which("apt-get") and os.geteuid() == 0:
        print("installing etcd-server (apt-get) for the etcd comparison", file=sys.stderr)
        quiet = {"stdout": subprocess.DEVNULL}
        subprocess.run(["apt-get", "update", "-qq"], check=False, **quiet)
        subprocess.run(["apt-get", "install", "-y", "-qq", "etcd-server"], check=False, **quiet)
    os.environ["PLANFENCE_BENCH_READY"] = "1"
    python = str(ROOT / ".venv" / "bin" / "python")
    os.execv(python, [python, script, *sys.argv[1:]])
