"""Plans stopped by a second change (issue 28's "once", enforced): after a plan's one replan,
a drift that blocks again ("changed again") stops the plan's writes until a person re-bases
it. The stop is a small file CLUSTER/run/stopped-PLAN.json holding the plan's replan count
(`trust`) when it stopped. A re-read only counts that number up, and the hook records a
stopped plan's landed writes without starting the count over (`hook.record`), so only a
person's re-base (`workspace refresh`, or `workspace trust --fresh`) brings it back to 1:
the stop lifts when the plan's current count is 1 (`lifted`)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path


def _path(cluster: Path, plan: str) -> Path:
    digest = hashlib.blake2b(plan.encode(), digest_size=8).hexdigest()
    return cluster / "run" / f"stopped-{digest}.json"


def stop(cluster: Path, plan: str, trust: int) -> None:
    """Stop `plan`'s writes: it changed again at replan count `trust`."""
    path = _path(cluster, plan)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps({"plan": plan, "trust": trust, "time": time.time()}))
    tmp.replace(path)


def stopped(cluster: Path, plan: str) -> bool:
    """Whether `plan`'s writes are stopped (an unreadable stop counts as one)."""
    return _path(cluster, plan).exists()


def lifted(cluster: Path, plan: str, trust: int) -> bool:
    """Whether the stop of `plan` is gone, given its current replan count `trust`: none was
    set, or a person re-based the plan (count 1; the stop is removed)."""
    path = _path(cluster, plan)
    if not path.exists():
        return True
    if trust == 1:
        path.unlink(missing_ok=True)
        return True
    return False
