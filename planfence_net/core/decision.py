"""The gate's decision: its outcome and reason, the evidence, and how it reads (as JSON, and
as a few lines for a person). The `Gate` (gate.py) makes it; the reasons it can block with
are named here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

AUTHORIZED = "authorized"
BLOCKED = "blocked"
UNKNOWN_OWNER = "unknown_owner"
OWNER_UNAVAILABLE = "owner_unavailable"
MALFORMED_RESPONSE = "malformed_response"
TIMEOUT = "timeout"
CHANGED_AGAIN = "changed_again"
STALE_PLAN = "stale_plan"
HEADS_FAILURES = frozenset({OWNER_UNAVAILABLE, TIMEOUT, MALFORMED_RESPONSE})


@dataclass(frozen=True, slots=True)
class Decision:
    """The final outcome with its evidence (step 5 of the gate: explain).

    `reason` is None for an authorization and names the block otherwise. `drift` maps key -> (plan's id, owner's head id) of the first drifting round;
    `heads` maps key -> (head id, seq) of the last heads round. `frontier` may be shared by
    the warm decisions of one plan: read-only (changing it raises TypeError).
    """

    action: str
    outcome: str
    reason: str | None
    detail: str
    replanned: bool
    frontier: dict[str, bytes]
    heads: dict[str, tuple[bytes | None, int]]
    drift: dict[str, tuple[bytes, bytes]]
    round_trips: int
    bytes_sent: int
    bytes_received: int
    elapsed: float

    @property
    def authorized(self) -> bool:
        return self.outcome == AUTHORIZED

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable view; ids are lowercase hex."""
        return {
            "action": self.action,
            "outcome": self.outcome,
            "reason": self.reason,
            "detail": self.detail,
            "replanned": self.replanned,
            "frontier": {key: rid.hex() for key, rid in self.frontier.items()},
            "heads": {
                key: {"id": None if rid is None else rid.hex(), "seq": seq}
                for key, (rid, seq) in self.heads.items()
            },
            "drift": {
                key: {"from": old.hex(), "to": new.hex()} for key, (old, new) in self.drift.items()
            },
            "round_trips": self.round_trips,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
            "elapsed": self.elapsed,
        }

    def explain(self) -> str:
        """A few lines a person can read: outcome, reason, drifted keys, cost."""
        head = f"{self.action}: {self.outcome}"
        if self.reason == STALE_PLAN:
            head = (
                f"{self.action}: stale plan: a declared key changed since the plan was "
                f"made; replan from the owners' heads and retry"
            )
        elif self.reason is not None:
            head += f" ({self.reason})"
        lines = [head, f"  {self.detail}"]
        if self.replanned:
            lines.append("  replanned once")
        lines += [
            f"  {key}: {old.hex()[:12]} -> {new.hex()[:12]}"
            for key, (old, new) in self.drift.items()
        ]
        lines.append(
            f"  {plural(self.round_trips, 'round trip')}, {self.bytes_sent} B sent, "
            f"{self.bytes_received} B received, {self.elapsed * 1000:.1f} ms"
        )
        return "\n".join(lines)


def plural(count: int, noun: str) -> str:
    """`1 round trip`, `2 round trips`."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
