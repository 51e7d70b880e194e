"""Starting an owner daemon: its store's signer, and `run_owner`, which opens the store and
the event log, serves, and closes both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus

from ..core.errors import StoreError
from ..core.identity import Identity
from ..core.records import Record, make_record
from ..core.roster import Roster
from ..protocol.messages import RawValue
from .daemon import OwnerDaemon
from .limits import Limits
from .logs import EventLog
from .service import Service
from .store import Signer, Store


def signer(identity: Identity) -> Signer:
    """The store's signing callback: makes records owned and signed by `identity`."""

    def sign(key: str, kind: str, parents: list[bytes], body: Any, seq: int) -> Record:
        if isinstance(body, RawValue):  # a body as a client sent it: kept byte for byte
            return make_record(
                identity.signing_key,
                key=key,
                owner=identity.name,
                seq=seq,
                parents=parents,
                kind=kind,
                body_raw=body.data,
            )
        return make_record(
            identity.signing_key,
            key=key,
            owner=identity.name,
            seq=seq,
            parents=parents,
            kind=kind,
            body=body,
        )

    return sign


async def run_owner(
    roster: Roster,
    identity: Identity,
    db_path: Path,
    log_path: Path,
    *,
    max_message: int = 16 * 1024 * 1024,
    listen: tuple[str, int] | None = None,
    limits: Limits = Limits(),
    accept_loss: bool = False,
    service: Service | None = None,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Open the store and log, serve `service` (default: an ordinary owner's operations)
    until a signal or cancellation, then close both.

    `listen` overrides the roster address to bind (e.g. 0.0.0.0 inside a container).
    Raises StoreError, before listening, when the store is damaged, in use or lost
    acknowledged records (`accept_loss`: see Store.open).
    """
    log = EventLog(log_path, identity.name)
    store = None
    try:
        try:
            store = await Store.open(
                db_path, signer(identity), identity.name, accept_loss=accept_loss
            )
        except StoreError as exc:
            log.write("store_refused", code=exc.code, reason=exc.message)
            raise
        daemon = OwnerDaemon(
            roster,
            identity,
            store,
            log,
            max_message=max_message,
            listen=listen,
            limits=limits,
            service=service,
        )
        await daemon.serve(task_status=task_status)
    finally:
        if store is not None:
            await store.close()
        log.close()
