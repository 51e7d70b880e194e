"""The workspace owner's side of the hook's fast path (`hookclient`): a Unix socket on which
the owner answers hook calls with the same `hook.decide` the in-process hook runs.

    serve   bind the cluster's hook socket and answer on it until cancelled

Where: `hookclient.socket_path(cluster)`, in the user's state directory's `hookd/` (created
0700; refused when it belongs to another user or is open to others), the socket 0600. One
owner process per cluster folder serves it: the first to take `NAME.lock` (an flock held
while it serves; another workspace owner of the cluster started later does not). The
socket appears under its name only once it listens with its final mode (bound under a
temporary name, then renamed), and is removed when the owner stops.

A lean client (`hook/lean.py`, what Codex and the other command-hook clients run) sends the
client's raw payload and the raw values of the variables the answer depends on, and leaves
the mapping (the client's adapter, `clients.table`) and the routing to the owner
(`_lean_not_mine`); it is answered in its own framing (`lean_answer`), or `fallback`.

Per connection: the peer must run as this user (SO_PEERCRED, else the connection is closed
unanswered, which the client reports as a block); the request is read within READ_TIMEOUT,
and a payload larger than `hookclient.MAX_PAYLOAD` is refused with its reason (`oversize`)
as soon as it grows past it, unparsed. A request this owner cannot
answer exactly as the in-process hook would (another installation's `planfence`, another
value of an environment variable `decide` reads, another cluster folder, another protocol
version) gets `{"fallback": why}`. Otherwise `decide` runs in a worker thread (at most
WORKERS at once), concurrently with every other call: one slow or huge call never holds
another session's (each writes its files under names unique to its thread). A call still
unanswered when its client's deadline has passed (the request's `left` seconds, else its
`--timeout` plus GRACE) is given up: the client has already blocked, so nothing is sent and
it is logged as `hook_abandoned`. Each answered call is logged as a `hook` event with its
exit code, how long `decide` took (`ms`), the CPU its worker thread spent (`cpu_ms`) and
how many of its requests this owner answered in-process (`in_process`).
The checks ask the owners over warm sessions (`syncclient.SessionPool`, given by the
daemon): no handshake per call once the first calls opened them; this owner's own keys are
read in-process (`local.LocalOwner`, given by the daemon), not over a session to itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskStatus

from ...net.syncclient import Local, SessionPool, keeping, local_requests
from ...owners.logs import EventLog
from ..clients.table import Mapped, normalized
from ..hook.client import (
    DEFAULT_TIMEOUT,
    FAST_EVENTS,
    GRACE,
    MAX_PAYLOAD,
    SESSION_EVENTS,
    VERSION,
    environment,
    oversize,
    route,
    unsafe,
)
from ..hook.run import Answer, decide
from ..installers.httphook import ENVIRONMENT
from ..installers.leanhook import socket_path
from ..model.payload import AGENTS

READ_TIMEOUT = 30.0  # seconds for a client to send its request
MAX_HEADER = 64 * 1024
WORKERS = 32  # hook calls decided at once (threads; each mostly waits on the owners)
TAKEOVER_POLL = 0.5  # seconds between a standing-by owner's tries at the socket's lock
STANDBY = "another owner of this cluster serves it; standing by to take over"


# What `decide` imports on a session's first calls (`hook.run` imports lazily, for the
# short-lived hook process); the owner imports it once it listens (`warm`).
HOOK_PATH = (
    "planfence_net.workspace.hook.context",
    "planfence_net.workspace.hook.auto",
    "planfence_net.workspace.hook.guard",
    "planfence_net.workspace.hook.record",
    "planfence_net.workspace.hook.text",
    "planfence_net.workspace.hook.told",
    "planfence_net.workspace.model.readonly",
    "planfence_net.workspace.place.inflight",
    "planfence_net.workspace.plans.advance",
    "planfence_net.workspace.plans.check",
    "planfence_net.workspace.plans.checklog",
    "planfence_net.workspace.plans.intentclient",
    "planfence_net.workspace.plans.intentnotes",
    "planfence_net.workspace.plans.session",
)


async def warm(log: EventLog, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """Import HOOK_PATH in a worker thread once the owner listens (reported at once): the
    first hook calls a fresh owner answers then cost what later ones do (each module's
    first import is 20 to 30 ms of CPU in all). Logs `hook_warm` with the time it took."""
    task_status.started()
    started = time.perf_counter()
    await anyio.to_thread.run_sync(_import, HOOK_PATH)
    log.write("hook_warm", ms=round((time.perf_counter() - started) * 1000, 3))


def _import(names: tuple[str, ...]) -> None:
    import importlib

    for name in names:
        importlib.import_module(name)


async def serve(
    cluster: Path,
    log: EventLog,
    *,
    sessions: SessionPool | None = None,
    local: Local | None = None,
    task_status: TaskStatus[Path | None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the hook socket of the cluster folder `cluster` until cancelled. Reports the
    socket's path once it listens, or None (and logs why) when this owner does not serve
    it: it cannot (the hook then runs in-process), or another owner of the cluster does (this
    one then stands by and takes the socket over once that owner's lock is released, e.g.
    when it died). Never raises OSError: the owner serves on without it. The checks run on
    `sessions`' warm sessions (`syncclient.keeping`) when given, and ask `local` (this
    owner) in-process."""
    reported = False

    def report(value: Path | None) -> None:
        nonlocal reported
        if not reported:
            reported = True
            task_status.started(value)

    path = socket_path(cluster)
    why = _prepare(path)
    lock = -1
    try:
        if why is None:
            lock = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            if not _try_lock(lock):
                # Another owner of the cluster serves it. Stand by: when it dies (even by
                # SIGKILL, which leaves its socket behind) its lock is released and this
                # owner takes the socket over, so the hook does not stay blocked until a
                # person restarts that one owner.
                log.write("hookd", socket=str(path), serving=False, reason=STANDBY)
                report(None)
                # The lock is released in another process: no event here to wait on.
                while not _try_lock(lock):  # noqa: ASYNC110
                    await anyio.sleep(TAKEOVER_POLL)
            with keeping(sessions, local) if sessions is not None else contextlib.nullcontext():
                await _listen(cluster, path, log, report)
    except OSError as exc:
        why = f"{type(exc).__name__}: {exc}"
    finally:
        if lock >= 0:
            os.close(lock)  # releases the flock
        if why is not None:
            log.write("hookd", socket=str(path), serving=False, reason=why)
            report(None)


def _prepare(path: Path) -> str | None:
    """Make `path`'s folder (0700, the user's); why it cannot serve there, or None (a state
    directory others may write, a `hookd/` folder of another user or not a folder)."""
    if len(os.fsencode(path)) >= 108:
        return "the path is too long for a Unix socket"
    try:
        path.parent.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(path.parent)
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
            os.chmod(path.parent, 0o700)  # ours: only we enter (as `paths.record_served` does)
    except OSError as exc:
        return f"cannot create {path.parent}: {exc.strerror}"
    for each, others in ((path.parent.parent, 0o022), (path.parent, 0o077)):
        why = unsafe(each, stat.S_IFDIR, others)
        if why is not None:
            return f"{each} {why}"
    return None


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


async def _listen(
    cluster: Path, path: Path, log: EventLog, report: Callable[[Path | None], None]
) -> None:
    temporary = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)
    listener = await anyio.create_unix_listener(temporary, mode=0o600)
    os.replace(temporary, path)  # appears listening, 0600, or not at all
    inode = os.lstat(path).st_ino
    log.write("hookd", socket=str(path), serving=True)
    workers = anyio.CapacityLimiter(WORKERS)
    try:
        async with listener, anyio.create_task_group() as tg:
            report(path)
            await listener.serve(
                lambda stream: _answer(stream, cluster, log, workers), task_group=tg
            )
    finally:
        try:
            if os.lstat(path).st_ino == inode:
                os.unlink(path)
        except OSError:
            pass


async def _answer(
    stream: SocketStream, cluster: Path, log: EventLog, workers: anyio.CapacityLimiter
) -> None:
    """Answer one connection; never raises (a failure closes it unanswered: the client
    blocks)."""
    try:
        async with stream:
            await _answer_one(stream, cluster, log, workers)
    except Exception as exc:
        log.write("hookd_error", error=f"{type(exc).__name__}: {exc}")


async def _answer_one(
    stream: SocketStream, cluster: Path, log: EventLog, workers: anyio.CapacityLimiter
) -> None:
    raw = stream.extra(SocketAttribute.raw_socket)
    creds = raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    uid = int.from_bytes(creds[4:8], sys.byteorder)
    if uid != os.geteuid():
        log.write("hookd_refused", uid=uid)
        return
    request = None
    with anyio.move_on_after(READ_TIMEOUT):
        request = await _read(stream)
    if request is None:
        return
    if request is TOO_LARGE:
        log.write("hook_refused", reason="oversize", limit=MAX_PAYLOAD)
        await _send(stream, {"code": 2, "stderr": oversize(), "stdout": ""})
        return
    header, data = request
    lean = header.get("lean") is True
    # the payload in the normalized form, mapped once for the routing and the log
    mapped = normalized(header["agent"], data) if header.get("agent") in AGENTS else Mapped(data)
    why = _lean_not_mine(header, mapped, cluster) if lean else _not_mine(header, cluster)
    if why is not None:
        await _send_raw(stream, b"fallback\n") if lean else await _send(stream, {"fallback": why})
        return

    answer = await wait_decision(
        header["agent"],
        header["argv"],
        data,
        _left(header),
        log,
        workers,
        hook_event=hook_event(mapped),
    )
    if answer is None:  # the client's deadline passed: it blocked already
        return
    if lean:
        await _send_raw(stream, lean_answer(answer))
        return
    await _send(stream, {"code": answer.code, "stderr": answer.stderr, "stdout": answer.stdout})


def hook_event(mapped: Mapped) -> str:
    """The event of a payload in the normalized form (`clients.table.normalized`), ours
    (`PreToolUse`, ...), for the log; "" when it cannot be read."""
    if mapped.event or not isinstance(mapped.data, bytes):
        return mapped.event
    try:
        value = json.loads(mapped.data)
    except ValueError:
        return ""
    event = value.get("hook_event_name") if isinstance(value, dict) else None
    return event if isinstance(event, str) else ""


def lean_answer(answer: Answer) -> bytes:
    """`answer` on the lean client's wire (`hook/lean.py`): `CODE NOUT NERR\\n`, stdout, stderr."""
    out = answer.stdout.encode("utf-8", "replace")
    err = answer.stderr.encode("utf-8", "replace")
    return b"%d %d %d\n" % (answer.code, len(out), len(err)) + out + err


def _lean_not_mine(header: dict[str, Any], mapped: Mapped, cluster: Path) -> str | None:
    """Why this owner does not answer a lean client's request (it then runs the ordinary
    hook, which finds its own way): the same as `_not_mine`, with the routing the ordinary
    client does (`client.route`: the call's cluster folder, from its `cwd`, read from the
    payload in the normalized form, `mapped`) done here."""
    argv, environ, agent = header.get("argv"), header.get("environ"), header.get("agent")
    if header.get("v") != VERSION:
        return f"protocol version {header.get('v')!r}, this owner speaks {VERSION}"
    if agent not in AGENTS or not (
        isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    ):
        return "malformed request"
    if header.get("exe") != sys.executable:
        return f"another installation ({header.get('exe')!r}, this owner runs {sys.executable})"
    if not isinstance(environ, dict) or any(
        environ.get(name) != os.environ.get(name) for name in ENVIRONMENT
    ):
        return "another environment"
    data = mapped.data
    found = route(argv, data, (*FAST_EVENTS, *SESSION_EVENTS)) if isinstance(data, bytes) else None
    if found is None or os.path.realpath(found[1]) != os.path.realpath(cluster):
        return "another cluster folder, or a call the ordinary hook judges"
    return None


async def wait_decision(
    agent: str,
    argv: list[str],
    data: bytes,
    seconds: float,
    log: EventLog,
    workers: anyio.CapacityLimiter,
    **fields: str,
) -> Answer | None:
    """The hook's `decide` on one payload, in a worker thread (at most `workers` at once),
    given up after `seconds` (the caller's deadline): its answer, or None when the caller's deadline passed first.
    Logs `hook` (or `hook_abandoned`) with its time and `fields` (e.g. the door)."""
    started = time.perf_counter()
    done = None
    with anyio.move_on_after(seconds):
        done = await anyio.to_thread.run_sync(
            _timed, agent, argv, data, abandon_on_cancel=True, limiter=workers
        )
    ms = round((time.perf_counter() - started) * 1000, 3)
    if done is None:
        log.write("hook_abandoned", client=agent, **fields, ms=ms)
        return None
    answer, cpu, in_process = done
    log.write(
        "hook", client=agent, **fields, code=answer.code, ms=ms, cpu_ms=cpu, in_process=in_process
    )
    return answer


def _timed(agent: str, argv: list[str], data: bytes) -> tuple[Answer, float, int]:
    """`decide`'s answer, the CPU its thread spent on it, in ms (the owner's side of the
    requests it makes is counted by the owner's own loop, not here), and how many of its
    requests this owner answered in-process (`local.LocalOwner`)."""
    started, asked = time.thread_time(), local_requests()
    answer = decide(agent, argv, data)
    return answer, round((time.thread_time() - started) * 1000, 3), local_requests() - asked


def _left(header: dict[str, Any]) -> float:
    """Seconds until the client's deadline: its `left`, else its --timeout plus GRACE."""
    left = header.get("left")
    if isinstance(left, (int, float)) and not isinstance(left, bool):
        return max(float(left), 0.0)
    return argv_timeout(header["argv"])


def argv_timeout(argv: list[str]) -> float:
    """How long a hook run with `argv` may take in all: its --timeout (else the default)
    plus the client's GRACE."""
    options = dict(zip(argv[::2], argv[1::2], strict=False))
    try:
        return float(options.get("--timeout", DEFAULT_TIMEOUT)) + GRACE
    except ValueError:
        return DEFAULT_TIMEOUT + GRACE


TOO_LARGE: Any = object()  # `_read`'s answer for a payload past MAX_PAYLOAD


async def _read(stream: SocketStream) -> tuple[dict[str, Any], bytes] | None:
    """(header, payload) until the client's end of stream; None when malformed, TOO_LARGE
    as soon as the payload grows past MAX_PAYLOAD (the rest is not read)."""
    buffer = bytearray()
    header_end = -1
    try:
        while True:
            buffer += await stream.receive()
            if header_end < 0:
                header_end = buffer.find(b"\n", 0, MAX_HEADER)
                if header_end < 0 and len(buffer) > MAX_HEADER:
                    return None
            if len(buffer) > (header_end if header_end >= 0 else MAX_HEADER) + 1 + MAX_PAYLOAD:
                return TOO_LARGE if header_end >= 0 else None
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        pass
    if header_end < 0:
        return None
    try:
        header = json.loads(bytes(buffer[:header_end]))
    except ValueError:
        return None
    return (header, bytes(buffer[header_end + 1 :])) if isinstance(header, dict) else None


def _not_mine(header: dict[str, Any], cluster: Path) -> str | None:
    """Why this owner cannot answer the request as the caller's in-process hook would."""
    if header.get("v") != VERSION:
        return f"protocol version {header.get('v')!r}, this owner speaks {VERSION}"
    argv = header.get("argv")
    if header.get("agent") not in ("claude", "codex") or not (
        isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    ):
        return "malformed request"
    if header.get("exe") != sys.executable:
        return f"another installation ({header.get('exe')!r}, this owner runs {sys.executable})"
    if header.get("env") != environment():
        return "another environment ($PLANFENCE_CLUSTER or the state directory differ)"
    if not isinstance(header.get("cluster"), str) or os.path.realpath(
        header["cluster"]
    ) != os.path.realpath(cluster):
        return "another cluster folder"
    return None


async def _send(stream: SocketStream, value: dict[str, Any]) -> None:
    await _send_raw(stream, json.dumps(value).encode())


async def _send_raw(stream: SocketStream, data: bytes) -> None:
    try:
        await stream.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass  # the client gave up (its deadline): it already blocked
