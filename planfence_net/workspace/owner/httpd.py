"""Claude Code's `type: "http"` hooks, answered by the workspace owner: an HTTP/1.1 door on
127.0.0.1 in front of the same `hook.decide` the hook socket (`hookd`) and the in-process
hook run. No process starts per tool call.

    serve         listen on a loopback port until cancelled, recorded in
                  `httphook.record_path` (CLUSTER/run/hook-http-AGENT.json); the port
                  recorded there before when it is free, else an ephemeral one
    answer_body   the http-hook answer (status, JSON body) for one `decide` answer
    argv_of       the `planfence hook claude` options of a request's query

A request is `POST /hook/claude?mode=auto&timeout=20...` (each query pair a `--NAME VALUE`
of `planfence hook claude`) with the hook's JSON payload as its body. The rules, each of
which makes Claude Code block a handler with `onFailure: "block"` (any non-2xx answer, a
refused connection, a timeout):

- the `X-PlanFence-Key` header must equal `httphook.secret_path`'s content (compared in constant
  time) before any of the body is read, else 403; no secret file: 403;
- a body larger than `client.MAX_PAYLOAD` (by Content-Length, or as it grows) gets 413
  unread; a request not parsed by h11 gets 400; another method or path 404;
- a request whose `X-PlanFence-Env-NAME` headers (Claude Code's values of the variables
  `decide` reads: `httphook.ENVIRONMENT`) differ from the owner's is denied with that
  reason: the owner's answer would not be the one Claude Code's own hook gives;
- `decide` runs in a worker thread (at most hookd.WORKERS at once); a call not decided
  within its `--timeout` plus GRACE gets 503.

A decided call always answers 200 with a JSON body (an empty 2xx body would read as "no
objection"): exit 0 passes the hook's stdout on (wrapped as `additionalContext` when it is
not JSON), exit 2 becomes a deny (`hookSpecificOutput.permissionDecision: "deny"` on
PreToolUse, `decision: "block"` elsewhere) with the hook's stderr as the reason, any other
exit code a 500 (a failure: blocks). HTTP parsing is h11's; this module only moves bytes.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import anyio
import h11
from anyio.abc import SocketAttribute, SocketStream, TaskStatus
from anyio.streams.stapled import MultiListener

from ...net.syncclient import Local, SessionPool, keeping
from ...owners.logs import EventLog
from ..clients.table import normalized
from ..hook.client import MAX_PAYLOAD
from ..installers.httphook import HEADER, PATH, other_environment, record_path, secret_path
from .hookd import READ_TIMEOUT, WORKERS, argv_timeout, hook_event, wait_decision

MAX_HEAD = 16 * 1024  # bytes of request line and headers


async def serve(
    cluster: Path,
    agent: str,
    log: EventLog,
    *,
    sessions: SessionPool | None = None,
    local: Local | None = None,
    task_status: TaskStatus[int | None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve Claude Code's http hooks for the owner `agent` of the cluster folder `cluster`
    until cancelled. Reports the bound port once it listens and its record is written (the
    record stays when it stops: the next start takes the same port when it is free), or
    None when it cannot listen (logged; the owner serves on without it). The checks run on
    `sessions`' warm sessions when given, and ask `local` in-process (as `hookd.serve`'s)."""
    record = record_path(cluster, agent)
    try:
        listener = await _listen(_last_port(record))
    except OSError as exc:
        log.write("hookhttp", serving=False, reason=f"{type(exc).__name__}: {exc}")
        task_status.started(None)
        return
    port = listener.extra(SocketAttribute.local_port)
    workers = anyio.CapacityLimiter(WORKERS)
    try:
        async with listener, anyio.create_task_group() as tg:
            record.parent.mkdir(parents=True, exist_ok=True)
            temporary = record.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps({"port": port, "pid": os.getpid()}))
            os.replace(temporary, record)
            log.write("hookhttp", serving=True, port=port)
            task_status.started(port)
            with keeping(sessions, local) if sessions is not None else contextlib.nullcontext():
                await listener.serve(lambda s: _connection(s, cluster, log, workers), task_group=tg)
    finally:
        log.write("hookhttp", serving=False, port=port, reason="stopped")


def _last_port(record: Path) -> int:
    """The port this owner's door had before (0: none recorded)."""
    try:
        port = json.loads(record.read_text())["port"]
    except (OSError, ValueError, KeyError, TypeError):
        return 0
    return port if isinstance(port, int) and 0 < port < 65536 else 0


async def _listen(port: int) -> MultiListener[SocketStream]:
    """A listener on 127.0.0.1: on `port` when it is free (so the installed handlers, which
    name it, work again after a restart), else on an ephemeral one."""
    if port:
        with contextlib.suppress(OSError):
            return await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port)
    return await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)


async def _connection(
    stream: SocketStream, cluster: Path, log: EventLog, workers: anyio.CapacityLimiter
) -> None:
    """Answer the requests of one connection in turn; never raises."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    try:
        async with stream:
            while conn.our_state is not h11.CLOSED and conn.their_state is not h11.CLOSED:
                if not await _exchange(stream, conn, cluster, log, workers):
                    return
                try:
                    conn.start_next_cycle()
                except h11.LocalProtocolError:
                    return
    except Exception as exc:
        log.write("hookhttp_error", error=f"{type(exc).__name__}: {exc}")


async def _exchange(
    stream: SocketStream,
    conn: h11.Connection,
    cluster: Path,
    log: EventLog,
    workers: anyio.CapacityLimiter,
) -> bool:
    """Read one request and answer it; False when the connection is to be closed."""
    try:
        with anyio.fail_after(READ_TIMEOUT):
            request = await _next(stream, conn)
            if request is None:
                return False
            assert isinstance(request, h11.Request)
            refused = _refusal(request, cluster)
            if refused is not None:
                log.write("hook_refused", door="http", reason=refused[1])
                await _send(stream, conn, refused[0], {"error": refused[1]})
                return False
            body = await _body(stream, conn)
    except h11.RemoteProtocolError as exc:
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            await _send(stream, conn, exc.error_status_hint, {"error": str(exc)})
        return False
    except TimeoutError:
        return False
    if body is None:
        log.write("hook_refused", door="http", reason="oversize", limit=MAX_PAYLOAD)
        await _send(stream, conn, 413, {"error": f"payload over {MAX_PAYLOAD} bytes"})
        return False
    given = {n.decode("latin-1").lower(): v.decode("latin-1") for n, v in request.headers}
    other = other_environment(given)
    if other:  # `decide` would read other files than Claude Code's own hook would
        log.write("hook_refused", door="http", reason="environment", names=other)
        await _send(stream, conn, *answer_body(_event(body), 2, "", _other_env(other)))
        return True
    status, answer = await _decide(request, body, log, workers)
    await _send(stream, conn, status, answer)
    return True


async def _next(stream: SocketStream, conn: h11.Connection) -> h11.Event | None:
    """The next event, reading as h11 asks; None at the peer's end of stream."""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            try:
                data = await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                data = b""
            conn.receive_data(data)
            continue
        if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None
        return event  # type: ignore[return-value]


def _refusal(request: h11.Request, cluster: Path) -> tuple[int, str] | None:
    """(status, why) for a request refused before its body is read, or None."""
    headers = {name.lower(): value for name, value in request.headers}
    try:
        secret = secret_path(cluster).read_bytes().strip()
    except OSError:
        secret = b""
    given = headers.get(HEADER.lower().encode(), b"")
    if not secret or not hmac.compare_digest(given, secret):
        return 403, "wrong or missing key"
    if request.method != b"POST" or urlsplit(request.target.decode()).path != PATH:
        return 404, "not a hook endpoint"
    length = headers.get(b"content-length")
    if length is not None and int(length) > MAX_PAYLOAD:  # h11 checked it is a number
        return 413, f"payload over {MAX_PAYLOAD} bytes"
    return None


async def _body(stream: SocketStream, conn: h11.Connection) -> bytes | None:
    """The request's body; None as soon as it grows past MAX_PAYLOAD."""
    body = bytearray()
    while True:
        event = await _next(stream, conn)
        if event is None:
            raise h11.RemoteProtocolError("the request ended early")
        if isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_PAYLOAD:
                return None
        elif isinstance(event, h11.EndOfMessage):
            return bytes(body)


def argv_of(target: bytes) -> list[str]:
    """The `planfence hook claude` options of a request target's query (unknown names are
    passed on: `decide` blocks on them)."""
    query = urlsplit(target.decode()).query
    return [word for name, value in parse_qsl(query) for word in (f"--{name}", value)]


async def _decide(
    request: h11.Request, body: bytes, log: EventLog, workers: anyio.CapacityLimiter
) -> tuple[int, dict[str, Any]]:
    argv = argv_of(request.target)
    event = _event(body)
    answer = await wait_decision(
        "claude", argv, body, argv_timeout(argv), log, workers, door="http", hook_event=event
    )
    if answer is None:
        return 503, {"error": "PlanFence's hook did not decide in time; the call is blocked"}
    return answer_body(event, answer.code, answer.stdout, answer.stderr)


def _other_env(names: list[str]) -> str:
    return (
        f"PlanFence blocked this call: Claude Code runs with another {', '.join(names)} than "
        "the workspace owner answering its http hooks, so the owner cannot check it as "
        "Claude Code's own hook would. Ask the user to run Claude Code and the owner with the "
        "same environment, or to install the command form: planfence hook install claude "
        "--command."
    )


def _event(body: bytes) -> str:
    return hook_event(normalized("claude", body))


def answer_body(event: str, code: int, stdout: str, stderr: str) -> tuple[int, dict[str, Any]]:
    """The http-hook answer (status, JSON body) equivalent to a command hook that exited
    `code` printing `stdout` and `stderr` on `event` (see module doc)."""
    if code == 0:
        text = stdout.strip()
        if not text:
            return 200, {}
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return 200, value
        return 200, {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}
    if code == 2:
        reason = stderr.strip() or "PlanFence blocked this call"
        if event == "PreToolUse":
            return 200, {
                "hookSpecificOutput": {
                    "hookEventName": event,
                    "permissionDecision": "deny",
                    "permissionDecisionReason": reason,
                }
            }
        return 200, {"decision": "block", "reason": reason}
    return 500, {"error": stderr.strip() or f"the hook failed (exit {code})"}


async def _send(stream: SocketStream, conn: h11.Connection, status: int, value: Any) -> None:
    body = json.dumps(value).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    if status != 200:
        headers.append(("Connection", "close"))
    try:
        events = (h11.Response(status_code=status, headers=headers), h11.Data(data=body))
        data = b"".join(conn.send(e) or b"" for e in (*events, h11.EndOfMessage()))
        await stream.send(data)
    except (h11.LocalProtocolError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass  # the client gave up: it blocked already
