"""kill -9 under concurrent puts: no acknowledged record is ever lost, no seq signed twice.

Each round starts the owner, runs concurrent puts and SIGKILLs the owner after a random number
of acknowledgements, with puts still in flight. After the last round the owner starts once
more and must serve every acknowledged record; stopped, its store must hold seqs 1..n
contiguously, each acknowledged seq with the id that was acknowledged for it.
"""

from __future__ import annotations

import random
from pathlib import Path

from . import FaultResult
from .owner import Ledger, Victim, load

QUICK_ROUNDS, ROUNDS = 3, 50
ACKS_PER_ROUND = (20, 300)  # the kill comes after this many acknowledgements (random)


async def run(
    workdir: Path, *, quick: bool, rounds: int | None = None, seed: int = 0
) -> list[FaultResult]:
    """`rounds` kill -9 rounds (default 3 with `quick`, else 50); one result row."""
    rounds = rounds or (QUICK_ROUNDS if quick else ROUNDS)
    victim, ledger, rng = Victim(workdir / "crash"), Ledger(), random.Random(seed)
    try:
        for _ in range(rounds):
            await victim.start()
            await load(victim, ledger, rng.randint(*ACKS_PER_ROUND), kill=True)
        await victim.start()
        lost = await ledger.lost(victim)
        code = victim.stop()
        problem = ledger.check_store(victim) or (
            f"owner exited {code} on SIGTERM" if code else None
        )
    finally:
        victim.kill9()
    return [
        FaultResult(
            "kill -9 under concurrent puts", rounds, len(ledger.acked), lost, problem or "held"
        )
    ]
