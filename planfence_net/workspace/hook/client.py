"""The hook's fast path: hand the payload to the running workspace owner over a Unix socket.

`planfence hook claude|codex` starts once per agent tool call. In-process it imports the
check (PyNaCl, the Noise session, the blocking client), which costs more than the check
itself. Here the process imports nothing but the standard library: it finds the cluster
folder the way every command does (`anchor`), finds that cluster's hook socket in the user's
state directory, sends the payload, and prints the owner's answer, which the owner computed
with the same `hook.decide` (`hookd`). Where the fast path does not apply it runs today's
in-process hook (`hook.main`) on the same bytes, so answers and messages stay the same:

    - the options are not `--name VALUE` pairs of the hook's, or stdin is not a JSON object
      with an absolute `cwd`, or a SessionStart (the join);
    - no cluster folder serves the call's folder, or the one found is refused (`anchor`);
    - no socket for that folder (no owner serves it, or its path is too long for AF_UNIX);
    - the owner answers "fallback" (its environment or installation differs from ours).

A payload larger than MAX_PAYLOAD is refused (exit 2, `oversize`) before anything parses
it, here, in the in-process hook and by the owner: the hook's work is bounded by its input.

Once a socket is found the answer is the owner's or a block, never a fallback: a socket
directory or socket that another user owns or that group or others may use, a peer running
as another user, a refused connection, no answer within `--timeout` (plus GRACE), a garbled
or cut-off answer: each exits 2 with the reason. Never 1, never 0 without the owner's word.

The wire (both ways one connection, one request): the request is one line of JSON (`v`,
`agent`, `argv`, `cluster`, `exe`, `env`: what `decide` reads, `environment`; `left`: the
seconds left of the client's deadline, after which the owner gives the call up) and then the
payload's bytes up to end-of-stream; the answer is one JSON object, `{"code", "stderr", "stdout"}` or
`{"fallback": why}`.
"""

from __future__ import annotations

import io
import json
import os
import socket
import stat
import sys
import time
from pathlib import Path

from ..installers.leanhook import socket_dir as socket_dir  # re-exported: where sockets are
from ..installers.leanhook import socket_path as socket_path
from ..place.anchor import ENV, find_folder
from ..place.paths import state_dir

# Imports inside functions are deliberate: each hook call is a fresh process that loads only
# its own path (measured in `workspace/hook/run.py`).

TYPE_CHECKING = False  # not `typing`'s: this module imports nothing it does not run
if TYPE_CHECKING:
    from typing import IO, Any

VERSION = 1
ALLOW, BLOCK = 0, 2
MAX_PAYLOAD = 1024 * 1024  # bytes of a hook payload, at most: larger ones are refused unread
MAX_ANSWER = 1024 * 1024
GRACE = 1.0  # seconds past --timeout the owner's own deadline may run over
DEFAULT_TIMEOUT = 10.0  # hook.DEFAULT_TIMEOUT (equal: tests/workspace/test_hookd.py)
OPTIONS = ("--cluster", "--plan", "--as", "--timeout", "--scope", "--mode")  # hook._options
SOCKET = "the workspace owner's hook socket"


def environment() -> dict[str, str | None]:
    """What `decide` reads from the environment, here: $PLANFENCE_CLUSTER, the state
    directory ($XDG_STATE_HOME, else from $HOME), and where the fence's own files are
    (`place.guarded`: $HOME, $CODEX_HOME, $XDG_CONFIG_HOME). The owner answers only when its
    own are the same (`tests/workspace/test_hookd.py` keeps this list complete)."""
    return {
        ENV: os.environ.get(ENV),
        "state": str(state_dir()),
        "home": str(Path.home()),
        "CODEX_HOME": os.environ.get("CODEX_HOME"),
        "XDG_CONFIG_HOME": os.environ.get("XDG_CONFIG_HOME"),
    }


def unsafe(path: Path, kind: int, others: int = 0o077) -> str | None:
    """Why `path` (a folder or a socket, `kind` as in stat.S_IFMT) must not be used, or None:
    missing or of another kind, another user's, or with any of the mode bits `others`."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_IFMT(info.st_mode) != kind:
        return "is not a " + ("folder" if kind == stat.S_IFDIR else "socket")
    if info.st_uid != os.geteuid():
        return f"belongs to another user (uid {info.st_uid})"
    if info.st_mode & others:
        return f"is open to group or others (mode {info.st_mode & 0o777:o})"
    return None


def run(agent: str, argv: list[str], stdin: IO[bytes] | None = None) -> int:
    """Answer one hook call (see module doc) and print the answer; returns the exit code."""
    started = time.monotonic()
    try:
        data = read_payload(stdin or sys.stdin.buffer)
    except BaseException as exc:
        return _in_process(agent, argv, exc)
    if len(data) > MAX_PAYLOAD:
        return _refused(agent, oversize())
    where = route(argv, data)
    if where is None:
        return _in_process(agent, argv, data)
    path, cluster, timeout = where
    answer = _ask(path, cluster, agent, argv, data, started + timeout + GRACE)
    if answer is None:
        return _in_process(agent, argv, data)
    code, err, out = answer
    write_answer(err, out)  # exactly as hook.main prints
    return code


def _refused(agent: str, reason: str) -> int:
    """Print a block for `reason` as client `agent` reads one (its event unread: as before
    a call, `clients.table.answered`) and return its exit code."""
    from ..clients.table import Mapped, answered

    code, err, out = answered(agent, Mapped(b""), (BLOCK, reason, ""))
    write_answer(err, out)
    return code


def read_payload(stream: IO[bytes]) -> bytes:
    """Stdin up to MAX_PAYLOAD + 1 bytes (more means too large: the rest is read and
    dropped, so the agent's write of it never fails)."""
    data = stream.read(MAX_PAYLOAD + 1)
    if len(data) > MAX_PAYLOAD:
        while stream.read(1024 * 1024):
            pass
    return data


def oversize() -> str:
    """Why a payload larger than MAX_PAYLOAD is blocked, unread."""
    return (
        f"PlanFence blocked this call: its hook input is larger than {MAX_PAYLOAD} bytes, the "
        f"most the hook reads, so it was refused unread. Make the change in smaller calls "
        f"(a shorter command, a smaller write)."
    )


def write_answer(
    err: str, out: str, stderr: IO[str] | None = None, stdout: IO[str] | None = None
) -> None:
    """Print a hook answer's text, stdout first, each ending in one newline; a stream that
    cannot be written is passed over (the exit code still speaks). Shared with `hook.main`."""
    for text, stream in ((out, stdout or sys.stdout), (err, stderr or sys.stderr)):
        if text:
            try:
                stream.write(text.rstrip("\n") + "\n")
                stream.flush()
            except Exception:
                pass


FAST_EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure")
# The lean client's owner also answers these in a worktree it serves: the join of an unserved
# one (SessionStart) never reaches it, since no cluster is found for such a worktree.
SESSION_EVENTS = ("SessionStart", "SessionEnd")


def route(
    argv: list[str], data: bytes, events: tuple[str, ...] = FAST_EVENTS
) -> tuple[Path, Path, float] | None:
    """(socket, cluster folder, --timeout) when the fast path applies to a call of one of
    `events`, else None (the owner's door runs it for the lean client, `hook/lean.py`)."""
    if len(argv) % 2 or any(argv[i] not in OPTIONS for i in range(0, len(argv), 2)):
        return None
    options = dict(zip(argv[::2], argv[1::2], strict=True))
    try:
        timeout = float(options.get("--timeout", DEFAULT_TIMEOUT))
    except ValueError:
        return None
    if not 0 < timeout < 3600:
        return None
    try:
        call = json.loads(data)
    except Exception:  # not JSON, or nested too deep (RecursionError): the hook's own words
        return None
    if not isinstance(call, dict) or call.get("hook_event_name") not in events:
        return None
    cwd = call.get("cwd")
    if not isinstance(cwd, str) or not os.path.isabs(cwd) or "\0" in cwd:
        return None
    given = options.get("--cluster")
    try:
        cluster = find_folder(Path(given) if given else None, Path(cwd))
    except Exception:  # Unanchored, OSError, a symlink loop...: the in-process hook says why
        return None
    path = socket_path(cluster)
    if len(os.fsencode(path)) >= 108 or not os.path.lexists(path):
        return None  # the owner could not bind it / no owner serves this folder
    return path, cluster, timeout


def _ask(
    path: Path, cluster: Path, agent: str, argv: list[str], data: bytes, deadline: float
) -> tuple[int, str, str] | None:
    """The owner's answer (code, stderr, stdout), a block naming what failed, or None when
    the owner says the call is not its to answer (fallback)."""
    for each, kind, others in (
        (path.parent.parent, stat.S_IFDIR, 0o022),  # the state directory: nobody else writes
        (path.parent, stat.S_IFDIR, 0o077),  # hookd/: only the user enters
        (path, stat.S_IFSOCK, 0o077),  # the socket: only the user connects
    ):
        why = unsafe(each, kind, others)
        if why is not None:
            what = f"{SOCKET} {path}" if each == path else f"{each}, which holds the hook socket,"
            return _blocked(f"{what} {why}; the hook fails closed and the user must fix this")
    header = {
        "v": VERSION,
        "agent": agent,
        "argv": argv,
        "cluster": str(cluster),
        "exe": sys.executable,
        "env": environment(),
        "left": deadline - time.monotonic(),
    }
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            sock.settimeout(_left(deadline))
            sock.connect(os.fspath(path))
        except FileNotFoundError:
            return None  # the owner stopped (and removed it) since we looked
        peer = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        uid = int.from_bytes(peer[4:8], sys.byteorder)
        if uid != os.geteuid():
            return _blocked(
                f"{SOCKET} {path} is served by another user (uid {uid}); it fails closed"
            )
        sock.settimeout(_left(deadline))
        sock.sendall(json.dumps(header).encode() + b"\n" + data)
        sock.shutdown(socket.SHUT_WR)
        raw = _receive(sock, deadline)
    except TimeoutError:
        return _blocked(
            f"{SOCKET} {path} gave no answer within the hook's deadline ({_seconds(argv)} s); the "
            f"owner may be stopped or overloaded, and the hook fails closed"
        )
    except ConnectionRefusedError:
        return _blocked(
            f"{SOCKET} {path} refused the connection: the workspace owner that served it is not "
            f"running. Another running owner of the cluster takes the socket over within a "
            f"second; if none runs, the user must start the owners again (`planfence "
            f"workspace serve` or `planfence cluster up`); the hook fails closed"
        )
    except OSError as exc:
        return _blocked(f"{SOCKET} {path} failed ({exc.strerror or exc}); it fails closed")
    finally:
        sock.close()
    return _parse(path, raw)


def _receive(sock: socket.socket, deadline: float) -> bytes:
    """Everything the owner sends until it closes (TimeoutError past `deadline`)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        sock.settimeout(_left(deadline))
        chunk = sock.recv(65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_ANSWER:
            raise OSError(f"answer larger than {MAX_ANSWER} bytes")
        chunks.append(chunk)


def _parse(path: Path, raw: bytes) -> tuple[int, str, str] | None:
    """The answer in `raw`, None for a fallback, or a block when it is not an answer."""
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = None
    if isinstance(value, dict) and set(value) == {"fallback"}:
        return None
    if (
        isinstance(value, dict)
        and set(value) == {"code", "stderr", "stdout"}
        and value["code"] in (ALLOW, BLOCK)
        and type(value["code"]) is int
        and isinstance(value["stderr"], str)
        and isinstance(value["stdout"], str)
        and (value["code"] == ALLOW or value["stderr"].strip())
    ):
        return value["code"], value["stderr"], value["stdout"]
    what = "closed the connection before answering" if not raw else "sent no valid answer"
    return _blocked(
        f"{SOCKET} {path} {what} (the owner may have stopped mid-answer); the hook fails closed"
    )


def _blocked(reason: str) -> tuple[int, str, str]:
    return BLOCK, f"PlanFence blocked this call: {reason}", ""


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _seconds(argv: list[str]) -> str:
    options = dict(zip(argv[::2], argv[1::2], strict=False))
    return f"{float(options.get('--timeout', DEFAULT_TIMEOUT)):g} + {GRACE:g}"


def _in_process(agent: str, argv: list[str], data: bytes | BaseException) -> int:
    """Today's hook (`hook.main`) on the same bytes (or the same error reading them), in
    this short-lived process (a few messages: PyNaCl's ChaChaPoly, no `cryptography`)."""
    from ...protocol.noise import few_messages
    from .run import main

    few_messages()
    if isinstance(data, BaseException):
        return main(agent, argv, stdin=_Failing(data))
    return main(agent, argv, stdin=io.BytesIO(data))


class _Failing(io.BytesIO):
    """A stdin whose read raises the error the real one raised."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def read(self, size: int | None = -1) -> bytes:
        raise self.exc
