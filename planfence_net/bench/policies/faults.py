"""Fault injection for the fail-closed ablation, on the executor's side of the wire.

`CorruptingPool` is a session pool whose `heads` answers lose their first row, as an owner
with a bug would send them (the gate must block `malformed_response`). The owner itself stays
honest, so the same cluster serves the other cases.
"""

from __future__ import annotations

from typing import Any

from ...executor.pool import SessionPool
from ...net.client import Reply


class _DroppedRow(Reply):
    __slots__ = ("reply",)

    def __init__(self, reply: Reply) -> None:
        self.reply = reply

    async def wait(self) -> dict[str, Any]:
        result = await self.reply.wait()
        if isinstance(result.get("heads"), list):
            return {**result, "heads": result["heads"][1:]}
        return result


class CorruptingPool(SessionPool):
    """A SessionPool whose `heads` answers drop their first head row."""

    async def send_request(self, owner: str, op: str, args: dict[str, Any]) -> Reply:
        reply = await super().send_request(owner, op, args)
        return _DroppedRow(reply) if op == "heads" else reply
