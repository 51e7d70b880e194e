"""A damaged store, a store that lost acknowledged records, and two daemons on one store.

An owner must never serve what its store no longer holds faithfully: a damaged file or one
that lost acknowledged records refuses to start with one line and exit 1; a record whose
bytes changed is refused with `store_damaged` while every other record is still served; a
second daemon on a store in use refuses to start.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from ...core.errors import RequestError
from . import FaultResult
from .owner import Ledger, Refused, Victim, load, put

RECORDS, QUICK_RECORDS = 300, 60  # acknowledged before the damage


def _truncate(db: Path) -> None:
    os.truncate(db, db.stat().st_size // 2)


def _bad_header(db: Path) -> None:
    with open(db, "r+b") as f:
        f.write(b"not a database!\0")


def _zero_bytes(db: Path) -> None:
    os.truncate(db, 0)


DAMAGE: list[tuple[str, Callable[[Path], None], str]] = [
    ("store truncated to half", _truncate, " is damaged ("),
    ("store header overwritten", _bad_header, " is damaged (file is not a database)"),
    ("store emptied to 0 bytes", _zero_bytes, " but seq "),
]


async def run(workdir: Path, *, quick: bool) -> list[FaultResult]:
    """One row per damage, then the flipped bit, the lost WAL and the second daemon."""
    records = QUICK_RECORDS if quick else RECORDS
    rows = [
        await _refused(workdir / f"damage{i}", records, *damage) for i, damage in enumerate(DAMAGE)
    ]
    rows.append(await _bit_flip(workdir / "bitflip", records))
    rows.append(await _wal_deleted(workdir / "wal", records))
    rows.append(await _two_daemons(workdir / "twice"))
    return rows


async def _filled(root: Path, records: int) -> tuple[Victim, Ledger]:
    """A victim whose store holds at least `records` acknowledged records, stopped cleanly.
    The last one is the head of plan/w0, so the first (tagged torture-0-0) is not a head."""
    victim, ledger = Victim(root), Ledger()
    await victim.start()
    await load(victim, ledger, records)
    async with victim.session() as session:
        ledger.add(*await put(session, "plan/w0", {"tag": "the head of plan/w0"}))
    victim.stop()  # SIGTERM: the WAL is checkpointed into the store file
    return victim, ledger


def _refusal(exc: Refused, expected: str) -> str:
    """ "held" when the owner exited 1 with one line naming the store's problem."""
    lines = exc.stderr.splitlines()
    if (
        exc.code == 1
        and len(lines) == 1
        and lines[0].startswith("error: store ")
        and expected in lines[0]
    ):
        return "held"
    return f"refused badly: exit {exc.code}, {exc.stderr[:120]!r}"


async def _refused(
    root: Path, records: int, name: str, damage: Callable[[Path], None], expected: str
) -> FaultResult:
    victim, ledger = await _filled(root, records)
    damage(victim.db)
    try:
        await victim.start()
    except Refused as exc:
        return FaultResult(name, 1, len(ledger.acked), 0, _refusal(exc, expected))
    try:
        lost = await ledger.lost(victim)
    finally:
        victim.kill9()
    return FaultResult(name, 1, len(ledger.acked), lost, "started on a damaged store")


async def _bit_flip(root: Path, records: int) -> FaultResult:
    """Flip one bit inside one record's body (not a head: a damaged head refuses to start):
    that record is refused, the rest served."""
    victim, ledger = await _filled(root, records)
    data = bytearray(victim.db.read_bytes())
    data[data.index(b"torture-0-0")] ^= 0x01
    victim.db.write_bytes(bytes(data))
    await victim.start()
    try:
        async with victim.session() as session:
            flipped = [
                seq for seq, rid in ledger.acked.items() if await _refused_as_damaged(session, rid)
            ]
        others = [seq for seq in ledger.acked if seq not in flipped]
        lost = await ledger.lost(victim, others)
    finally:
        victim.kill9()
    outcome = "held" if len(flipped) == 1 else f"{len(flipped)} records refused, not 1"
    return FaultResult(
        "bit flip in a stored record", 1, len(ledger.acked) - len(flipped), lost, outcome
    )


async def _refused_as_damaged(session: object, rid: bytes) -> bool:
    try:
        await session.request("get", {"ids": [rid]})  # type: ignore[attr-defined]
    except RequestError as exc:
        return exc.code == "store_damaged"
    return False


async def _wal_deleted(root: Path, records: int) -> FaultResult:
    """kill -9 under puts, then delete the WAL: refused, then --accept-loss signs above."""
    victim, ledger = Victim(root), Ledger()
    await victim.start()
    await load(victim, ledger, records, kill=True)
    for suffix in ("-wal", "-shm"):
        victim.db.with_name(victim.db.name + suffix).unlink(missing_ok=True)
    try:
        await victim.start()
    except Refused as exc:  # the mark may be above the last ack the client saw: in flight
        found = re.search(r" but seq (\d+) was acknowledged", exc.stderr)
        mark = int(found.group(1)) if found else 0
        outcome = _refusal(exc, " but seq ")
        if mark < max(ledger.acked):
            outcome = f"the mark is below an acknowledged seq: {exc.stderr[:120]!r}"
    else:  # everything had been checkpointed: nothing may be missing
        lost = await ledger.lost(victim)
        victim.kill9()
        return FaultResult("WAL deleted after kill -9", 1, len(ledger.acked), lost, "held")
    before = set(ledger.acked)
    await victim.start("--accept-loss")
    try:
        await load(victim, ledger, 1)
    finally:
        victim.kill9()
    if min(set(ledger.acked) - before) <= mark or ledger.conflicts:
        outcome = "--accept-loss signed a used seq again"
    return FaultResult("WAL deleted after kill -9", 1, len(ledger.acked), 0, outcome)


async def _two_daemons(root: Path) -> FaultResult:
    victim = Victim(root)
    await victim.start()
    first = victim.proc
    second = Victim(root)  # the same folder, so the same store
    try:
        await second.start("--listen", "127.0.0.1:0")
        outcome = "a second daemon served the same store"
        second.kill9()
    except Refused as exc:
        outcome = _refusal(exc, f" is in use by pid {first.pid if first else '?'}")
    finally:
        victim.kill9()
    return FaultResult("two daemons on one store", 1, 0, 0, outcome)
