"""Disk full: a small tmpfs under the owner's store, filled to the last byte.

Puts must fail with `store_full` (not `internal`) and not be acknowledged, reads must keep
working, puts must succeed again once space is free, and after a restart every acknowledged
record must be served. Needs `mount -t tmpfs` (root, or a container allowed to mount);
elsewhere the row says it was skipped and why.
"""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path

from ...core.errors import RequestError
from . import FaultResult
from .owner import Ledger, Victim, load, put

NAME = "disk full (2 MiB tmpfs)"
SIZE = "2m"
BODY = "x" * 4000  # a few WAL pages per put: the disk fills in a few hundred puts


async def run(workdir: Path, *, quick: bool) -> list[FaultResult]:
    victim = Victim(workdir / "diskfull")
    data = victim.db.parent
    refused = mount_tmpfs(data, SIZE)
    if refused is not None:
        return [FaultResult(NAME, 0, 0, 0, f"skipped: cannot mount a tmpfs here ({refused})")]
    try:
        return [await _fill_and_free(victim, data / "filler")]
    finally:
        victim.kill9()
        unmount(data)


def mount_tmpfs(folder: Path, size: str) -> str | None:
    """Mount a tmpfs of `size` on `folder`; None when mounted, else why not (one line)."""
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode == 0:
        return None
    return (mounted.stderr.strip().splitlines() or ["mount failed"])[-1]


def unmount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], check=False)


async def _fill_and_free(victim: Victim, filler: Path) -> FaultResult:
    ledger = Ledger()
    await victim.start()
    await load(victim, ledger, 20)
    fill(filler)
    async with victim.session() as session:
        code = "none"
        for i in range(200):  # the WAL may still have room for a page or two
            try:
                ledger.add(*await put(session, "plan/full", {"n": i, "pad": BODY}))
            except RequestError as exc:
                code = exc.code
                break
        reads = await ledger.lost(victim)  # while the disk is still full
        filler.unlink()
        ledger.add(*await put(session, "plan/full", {"after": True}))
    victim.stop()
    await victim.start()
    lost = await ledger.lost(victim)
    victim.stop()
    problem = ledger.check_store(victim)
    outcome = (
        "held"
        if code == "store_full" and reads == 0 and problem is None
        else f"answered {code!r}, {reads} unreadable while full, {problem or 'store ok'}"
    )
    return FaultResult(NAME, 1, len(ledger.acked), lost, outcome)


def fill(path: Path) -> None:
    """Write `path` until the disk is full."""
    with open(path, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
