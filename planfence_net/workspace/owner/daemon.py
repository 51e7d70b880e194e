"""The workspace owner: an owner daemon whose keys are the facts of one worktree.

It is the ordinary owner daemon (same Noise sessions, roster, store, logs) serving a
`Workspace` service: the ordinary operations, the worktree's intents (`intend`, `intents`,
`unintend`: intentbook.py), and one addition. Before answering `heads`,
it observes the asked-for facts (re-stat the files, hash only what
changed, read branch and HEAD) and writes a new record for every fact whose value differs
from its head, so the answer is the worktree as it is now. Nobody else can write an observed
fact, nor an intent; evidence and plan records are written with ordinary `put`s.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import itertools
import os
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus

from ...cluster.folder import ClusterDir
from ...core.errors import ConfigError
from ...core.identity import Identity
from ...core.roster import Roster
from ...net.syncclient import SessionPool
from ...owners.daemon import OwnerDaemon
from ...owners.limits import Limits
from ...owners.logs import EventLog
from ...owners.ops import owner_operations
from ...owners.service import Call, Handler, Owner, Service
from ...owners.startup import open_store, run_owner, serve_with_tasks
from ...owners.store import Store
from ...protocol.messages import BadRequest, pack
from ..model.facts import is_observed, split_key
from ..model.intents import is_intent
from ..place.config import workspaces
from ..place.observe import Observer
from . import hookd, httpd
from .intentbook import IntentBook
from .local import Before, LocalOwner

MAX_MESSAGE = 16 * 1024 * 1024  # `run_owner`'s default


@dataclasses.dataclass(frozen=True)
class _Look:
    """One look at the worktree: its facts (fact -> key), the ticket it began under, and the
    bodies observed, or why the worktree could not be observed."""

    facts: dict[str, str]
    ticket: int
    bodies: dict[str, Any]
    error: str | None


_LOOK: contextvars.ContextVar[_Look | None] = contextvars.ContextVar(
    "planfence_workspace_look", default=None
)


class Workspace:
    """The service of a workspace owner: an ordinary owner's operations, observing the
    worktree `observer` looks at before `heads`, refusing `put`s of observed facts, and
    adding the worktree to `stats`."""

    def __init__(self, observer: Observer, clock: Callable[[], float] = time.time) -> None:
        self.observer = observer
        self._clock = clock  # the intents' leases are read on it
        self._lock = anyio.Lock()
        self._last: dict[str, bytes] = {}  # key -> packed body of its head record
        self._tickets = itertools.count(1)  # looks begun, in order
        self._seen: dict[str, int] = {}  # fact -> ticket of the look its head comes from

    def service(self) -> Service:
        ordinary = owner_operations(observe=self.observe)
        put = ordinary.operations["put"]
        git = self.observer.git
        repo = str(git.common_dir if git else self.observer.root)
        intents = IntentBook(self.observer.root, repo, self._clock)
        return ordinary.with_rows(
            dataclasses.replace(put, handle=functools.partial(self.put, put.handle)),
            *intents.rows(),
            statistics=self.statistics,
        )

    async def observe(self, owner: Owner, keys: list[str]) -> None:
        """Bring the records of the observed facts among `keys` up to date (see module doc).

        Raises BadRequest("worktree_gone") when the worktree cannot be observed. Looks run
        concurrently; a fact's head only ever moves to a value observed by a later-begun look,
        so every answer holds a value the worktree had at some instant during the request.
        A look already made for this request in its caller's thread (`looking`) is used as
        it is: no second hand-off to a worker thread.
        """
        facts = self._facts(owner.agent.name, keys)
        if not facts:
            return
        look = _LOOK.get()
        if look is None or look.facts != facts:
            look = await anyio.to_thread.run_sync(self._look, facts)
        if look.error is not None:
            raise BadRequest("worktree_gone", look.error)
        ticket, bodies = look.ticket, look.bodies
        async with self._lock:  # two sessions asking at once must not write a fact twice
            # A look that began after this one already wrote its (newer) value: keep it.
            bodies = {f: b for f, b in bodies.items() if self._seen.get(f, 0) < ticket}
            for fact in bodies:
                self._seen[fact] = ticket
            await self._load_last(owner, [facts[f] for f in bodies])
            changed = {
                facts[f]: body
                for f, body in bodies.items()
                if self._last.get(facts[f]) != pack(body)
            }
            async with anyio.create_task_group() as tg:  # one group commit for all of them
                for key, body in changed.items():
                    tg.start_soon(self._write_fact, owner, key, body)

    @contextlib.contextmanager
    def looking(self, agent: str, op: str, args: dict[str, Any]) -> Iterator[None]:
        """For an in-process request (`local.LocalOwner`, from a worker thread): a `heads`
        request's look at the worktree made here, in the caller's thread, and used by
        `observe` on the event loop (the context is carried there)."""
        keys = args.get("keys") if op == "heads" else None
        facts = (
            self._facts(agent, list(dict.fromkeys(keys)))
            if isinstance(keys, list) and all(isinstance(k, str) for k in keys)
            else {}
        )
        if not facts:
            yield
            return
        token = _LOOK.set(self._look(facts))
        try:
            yield
        finally:
            _LOOK.reset(token)

    def _facts(self, agent: str, keys: list[str]) -> dict[str, str]:
        """fact -> key of the observed facts of `agent` among `keys`."""
        facts = {}
        for key in keys:
            parts = split_key(key)
            if parts is not None and parts[0] == agent and is_observed(parts[1]):
                facts[parts[1]] = key
        return facts

    def _look(self, facts: dict[str, str]) -> _Look:
        """Observe `facts` in this thread, under a ticket taken before the look begins."""
        ticket = next(self._tickets)  # atomic: looks begin in several threads
        try:
            return _Look(facts, ticket, self.observer.observe(list(facts)), None)
        except (ConfigError, OSError) as exc:
            return _Look(facts, ticket, {}, str(exc))

    async def _load_last(self, owner: Owner, keys: list[str]) -> None:
        unknown = [k for k in keys if k not in self._last and k in owner.store.heads]
        for record in await owner.store.records_for(unknown) if unknown else []:
            self._last[record.key] = record.body_raw

    async def _write_fact(self, owner: Owner, key: str, body: Any) -> None:
        record = await owner.store.wait_put(key, "fact", [], body)
        self._last[key] = record.body_raw
        owner.log.write(
            "put", key=key, id=record.id, seq=record.seq, kind="fact", parents=[], observed=True
        )

    async def put(
        self, ordinary: Handler, call: Call, parsed: tuple[str, str, list[bytes], Any, Any]
    ) -> dict[str, Any]:
        """An ordinary `put`, except of an observed fact: nobody writes those."""
        key = parsed[0]
        parts = split_key(key)
        if parts is not None and parts[0] == call.owner.agent.name and is_observed(parts[1]):
            raise BadRequest(
                "forbidden", f"{key!r} is observed from the worktree; nobody writes it"
            )
        if parts is not None and parts[0] == call.owner.agent.name and is_intent(parts[1]):
            raise BadRequest("forbidden", f"{key!r} is an intent; only `intend` writes it")
        return await ordinary(call, parsed)

    def statistics(self) -> dict[str, Any]:
        return {"worktree": str(self.observer.root), "files_hashed": self.observer.hashed}


def owner_runner(cdir: ClusterDir, agent: str) -> Callable[..., Coroutine[Any, Any, None]]:
    """How to serve `agent` of the cluster at `cdir`: `run_owner`, or for an agent whose roster
    entry names a worktree, `run_workspace_owner` bound to it (same arguments)."""
    root = workspaces(cdir).get(agent)
    if root is None:
        return run_owner
    return functools.partial(run_workspace_owner, root, cluster=cdir.root, clock=lease_clock())


TEST_CLOCK = "PLANFENCE_TEST_CLOCK_FILE"


def lease_clock(environ: Mapping[str, str] = os.environ) -> Callable[[], float]:
    """The clock a workspace owner process reads its intents' leases on: `time.time`.

    A test hook, for tests only: when `environ` names a file in PLANFENCE_TEST_CLOCK_FILE,
    `time.time()` plus the seconds that file holds at each reading (0 while it is missing or
    holds no number), so that a test moves owner processes past a lease instead of sleeping
    (docs/HOOKS.md, "Leases")."""
    name = environ.get(TEST_CLOCK)
    if not name:
        return time.time
    path = Path(name)

    def skewed() -> float:
        try:
            return time.time() + float(path.read_text())
        except (OSError, ValueError):
            return time.time()

    return skewed


async def run_workspace_owner(
    root: Path,
    roster: Roster,
    identity: Identity,
    db_path: Path,
    log_path: Path,
    *,
    listen: tuple[str, int] | None = None,
    limits: Limits = Limits(),
    accept_loss: bool = False,
    cluster: Path | None = None,
    clock: Callable[[], float] = time.time,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the worktree at `root` as `identity` until a signal or cancellation; with
        `cluster` (its cluster folder), also the hook's socket (`hookd`) and its loopback HTTP
        door for Claude Code's http hooks (`httpd`), both listening before the port is reported,
    both checking calls over one pool of warm sessions (closed when the owner stops). The
    intents' leases are read on `clock`.

        Raises ConfigError when `root` is not a folder.
    """
    workspace = Workspace(Observer(root), clock)

    def service(store: Store, log: EventLog) -> Service:
        made = workspace.service()
        observer = workspace.observer
        log.write("workspace", root=str(observer.root), git=observer.git is not None)
        return made

    sessions = SessionPool()  # the hook doors' checks: warm sessions to the owners they ask
    try:
        await _run(roster, identity, db_path, log_path, listen, limits, accept_loss, service,
                   cluster, sessions, workspace.looking, task_status)  # fmt: skip
    finally:
        sessions.close()


async def _run(
    roster: Roster,
    identity: Identity,
    db_path: Path,
    log_path: Path,
    listen: tuple[str, int] | None,
    limits: Limits,
    accept_loss: bool,
    service: Callable[[Store, EventLog], Service],
    cluster: Path | None,
    sessions: SessionPool,
    looking: Before,
    task_status: TaskStatus[int],
) -> None:
    """`run_owner`'s steps (open the store and log, serve with the tasks, close both), with
    the daemon itself at hand: the hook doors answer its own keys in-process
    (`local.LocalOwner`)."""
    log = EventLog(log_path, identity.name)
    store = None
    try:
        store = await open_store(identity, db_path, log, signs=True, accept_loss=accept_loss)
        daemon = OwnerDaemon(
            roster,
            identity,
            store,
            log,
            max_message=MAX_MESSAGE,
            listen=listen,
            limits=limits,
            service=service(store, log),
        )
        local = LocalOwner(daemon, looking)
        tasks: list[Callable[..., Coroutine[Any, Any, None]]] = (
            []
            if cluster is None
            else [
                functools.partial(hookd.serve, cluster, sessions=sessions, local=local),
                functools.partial(
                    httpd.serve, cluster, identity.name, sessions=sessions, local=local
                ),
                hookd.warm,
            ]
        )
        await serve_with_tasks(daemon, log, tasks, task_status)
    finally:
        if store is not None:
            await store.close()
        log.close()
