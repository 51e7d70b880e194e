"""Starting an owner daemon: its store's signer, and `run_owner`, which opens the store and
the event log, serves (an ordinary owner's operations, or the service an owner of another
kind makes, with any tasks of its own beside the daemon), and closes both. `cluster_owner`
reads its first arguments from a cluster folder."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus

from ..cluster.folder import ClusterDir
from ..core.errors import StoreError
from ..core.identity import Identity
from ..core.records import Record, make_record
from ..core.roster import Roster
from ..protocol.messages import RawValue
from ..protocol.noise import fast_after
from .daemon import OwnerDaemon
from .limits import Limits
from .logs import EventLog
from .service import Service
from .store import Signer, Store

# How an owner of another kind makes its service, given the open store and event log.
MakeService = Callable[[Store, EventLog], Service]

# AEAD calls made with PyNaCl's cipher before `cryptography`'s is imported: ~2,000 requests,
# ~3 us more each (~12 ms in all, about the import's cost); an idle owner stays ~9 MiB smaller
FAST_CIPHER_AFTER = 4096


def signer(identity: Identity) -> Signer:
    """The store's signing callback: makes records owned and signed by `identity`."""

    def sign(key: str, kind: str, parents: list[bytes], body: Any, seq: int) -> Record:
        # a body as a client sent it (RawValue) is kept byte for byte
        raw = body.data if isinstance(body, RawValue) else None
        return make_record(
            identity.signing_key,
            key=key,
            owner=identity.name,
            seq=seq,
            parents=parents,
            kind=kind,
            body=body if raw is None else None,
            body_raw=raw,
        )

    return sign


def cluster_owner(cdir: ClusterDir, agent: str) -> tuple[Roster, Identity, Path, Path]:
    """`run_owner`'s first four arguments for `agent` of the cluster folder `cdir`: the
    roster, its identity, its store and its log. Raises ConfigError (roster, key)."""
    return cdir.roster(), cdir.identity(agent), cdir.db(agent), cdir.log(agent)


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
    service: Service | MakeService | None = None,
    tasks: Sequence[Callable[..., Coroutine[Any, Any, Any]]] = (),
    signs: bool = True,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Open the store and log, serve `service` until a signal or cancellation, then close
    both.

    `service` is what to serve (default: an ordinary owner's operations), or how to make it
    from the open store and log (called once, before listening). Each of `tasks` is started
    as `task(log, task_status=...)` once the daemon listens, before its port is reported, and
    is cancelled when the daemon stops (the workspace owner's hook socket: workspace/owner/hookd.py).
    With `signs=False` the store signs nothing: it keeps other owners' records as they were
    signed (the central store: bench/policies/central.py).

    The process ciphers with PyNaCl's ChaChaPoly until it has made FAST_CIPHER_AFTER calls,
    then with `cryptography`'s (`noise.fast_after`): an owner that stays idle never maps it.

    `listen` overrides the roster address to bind (e.g. 0.0.0.0 inside a container).
    Raises StoreError, before listening, when the store is damaged, in use or lost
    acknowledged records (`accept_loss`: see Store.open).
    """
    fast_after(FAST_CIPHER_AFTER)
    log = EventLog(log_path, identity.name)
    store = None
    try:
        store = await open_store(identity, db_path, log, signs=signs, accept_loss=accept_loss)
        if service is not None and not isinstance(service, Service):
            service = service(store, log)
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
        await serve_with_tasks(daemon, log, tasks, task_status)
    finally:
        if store is not None:
            await store.close()
        log.close()


async def open_store(
    identity: Identity, db_path: Path, log: EventLog, *, signs: bool, accept_loss: bool
) -> Store:
    """The owner's store, signing as `identity` unless `signs` is False; a refusal is logged
    (`store_refused`) and its StoreError raised."""
    try:
        if signs:
            return await Store.open(
                db_path, signer(identity), identity.name, accept_loss=accept_loss
            )
        return await Store.open(db_path, accept_loss=accept_loss)
    except StoreError as exc:
        log.write("store_refused", code=exc.code, reason=exc.message)
        raise


async def serve_with_tasks(
    daemon: OwnerDaemon,
    log: EventLog,
    tasks: Sequence[Callable[..., Coroutine[Any, Any, Any]]],
    task_status: TaskStatus[int],
) -> None:
    """Serve `daemon`; each of `tasks` starts once it listens, before its port is reported,
    and is cancelled when it stops."""
    if not tasks:
        await daemon.serve(task_status=task_status)
        return
    async with anyio.create_task_group() as tg:  # the tasks live as long as the daemon

        async def owner(*, task_status: TaskStatus[int]) -> None:
            await daemon.serve(task_status=task_status)
            tg.cancel_scope.cancel()

        port = await tg.start(owner)
        for task in tasks:
            await tg.start(task, log)
        task_status.started(port)
