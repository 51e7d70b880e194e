"""What commands print, as text: escaped lines and JSON. No click, so that the one-shot
`authorize` (cli/oneshot.py) prints exactly what its click command prints."""

from __future__ import annotations

import math
from typing import Any


def escaped_lines(text: str) -> str:
    """`text` with every line escaped as `planfence logs` does (core/escaping.py): keys,
    reasons and details from owners cannot forge lines or terminal escapes."""
    from ..core.escaping import escape

    return "\n".join(escape(line) for line in text.split("\n"))


# The one line under every result table of the stale-plan scenario and the bench.
LEGEND = (
    "stall: from ready to act to authorized or blocked, per action (the replan's model call "
    "excluded); KiB: coordination bytes charged to the action, both directions, encrypted and "
    "framed (sync's pushes and acks included). sync's stall is near zero because it pays "
    "before the action: an update waits until every participant acknowledged its push, then "
    "the executor acts on its replica without a request."
)


def stale_next_step(path: str, drifted: list[str]) -> str:
    """The line `authorize` prints after a stale plan (exit 2): the command to run next (the
    drifted keys' current versions) and what to do with its answer."""
    import shlex

    heads = shlex.join(["planfence", "heads", path, *drifted])
    plan = shlex.join(["planfence", "plan", path])
    return (
        f"next: {heads}  (the versions that replaced the plan's; make the plan again from "
        f"them: {plan} KEY --body JSON --parent ID ..., then authorize the new plan's id)"
    )


def to_jsonable(value: Any) -> Any:
    """`value` with bytes as lowercase hex and NaN or infinite floats as None (JSON null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value


def json_text(value: Any) -> str:
    """`value` as the indented JSON every `--json` prints (`to_jsonable` first)."""
    import json

    return json.dumps(to_jsonable(value), indent=2, allow_nan=False)
