"""The leanest process that can ask the workspace owner: what a command hook runs per call.

Codex starts a process (through `$SHELL -lc`) for every hook call, and so do Gemini CLI,
Copilot CLI, Cursor, Windsurf and our OpenCode plugin: the hook's cost is an interpreter's
start. `hook install CLIENT` writes, where an owner's hook socket is known,

    PYTHON -I -S .../hook/leanrun.py --socket SOCKET PLANFENCE hook CLIENT OPTIONS...

and this module (`leanrun.py` imports it from its cached bytecode and calls `main`), run by
that interpreter with no site packages, no environment options and no user site (`-I -S`),
imports nothing but what the interpreter has already loaded, `stat` and `_socket` (the C
module under `socket`: `socket` itself converts its constants to enums, a third of the
interpreter's whole start). It reads the payload, hands it as it came, with
the client's name, to the owner over SOCKET (`hookd`, the "lean" request: the owner maps it
with the client's adapter, finds the cluster folder for the call's `cwd` and answers only
when that is its own, with this installation and environment) and prints the owner's
answer, already in the client's own form. Everywhere else it runs the rest of its command
line, the ordinary `planfence hook CLIENT OPTIONS` (`hook.client`), on the same payload:

    - no --socket, or no socket there (no owner serves it), or a payload over MAX_PAYLOAD;
    - the owner answers `fallback` (another cluster folder, installation or environment,
      options or a payload that the ordinary hook must judge). The owner answers tool calls
      and, in a worktree it serves, SessionStart and SessionEnd too.

Once the socket is there the answer is the owner's or a block: a socket or folder another
user owns or that others may use, a peer of another user, a refused connection, no answer
within --timeout plus GRACE, a garbled answer. Never exit 1, never an allow without the
owner's word. A block is in the client's own form, as the ordinary hook gives it (its
adapter, `clients/`, loaded only then): exit 2 and the reason on stderr for Codex, which
runs the call on any other exit code; a `deny` on stdout for Copilot CLI and Cursor.

The wire: the request is one line of JSON (`v`, `lean`, `agent`, `argv`, `exe`, `environ`:
the raw values of the variables the answer depends on, `left`: seconds to the deadline),
then the payload up to end-of-stream; the answer is `fallback\\n`, or `CODE NOUT NERR\\n`
followed by NOUT bytes for stdout and NERR for stderr.
"""

from __future__ import annotations

import _socket
import os
import stat
import sys
import time

TYPE_CHECKING = False  # not `typing`'s: this script imports nothing it does not run
if TYPE_CHECKING:
    from typing import IO

VERSION = 1  # client.VERSION (equal: tests/workspace/test_lean_hook.py)
MAX_PAYLOAD = 1024 * 1024  # client.MAX_PAYLOAD
MAX_ANSWER = 1024 * 1024
GRACE = 1.0  # client.GRACE
DEFAULT_TIMEOUT = 10.0  # client.DEFAULT_TIMEOUT
# What the answer depends on (`installers.httphook.ENVIRONMENT`): the owner answers only when
# its own values are these.
ENVIRONMENT = ("PLANFENCE_CLUSTER", "XDG_STATE_HOME", "HOME", "CODEX_HOME", "XDG_CONFIG_HOME")
SOCKET = "the workspace owner's hook socket"
BLOCK = 2


def main(args: list[str]) -> int:
    """Answer one hook call (module doc); returns the exit code, or does not return (the
    ordinary hook runs in this process's place)."""
    where = args[1] if args[:1] == ["--socket"] and len(args) > 1 else None
    full = args[2:] if where is not None else args
    data = _read(sys.stdin.buffer)
    client = full[2] if full[1:2] == ["hook"] and len(full) > 2 else ""
    timeout = _timeout(full[3:]) if client else None
    if where is None or timeout is None or len(data) > MAX_PAYLOAD or not os.path.lexists(where):
        return _ordinary(full, client, data)
    deadline = time.monotonic() + timeout + GRACE
    try:
        answer = _ask(where, client, full[3:], data, deadline)
    except Exception as exc:  # a bug here still blocks
        answer = f"{SOCKET} {where} failed ({type(exc).__name__}: {exc})"
    if answer is None:
        return _ordinary(full, client, data)
    return _print(_blocked(client, data, answer) if isinstance(answer, str) else answer)


def _print(answer: tuple[int, bytes, bytes]) -> int:
    """Print `answer` (code, stdout, stderr) as the ordinary hook does; returns its code."""
    code, out, err = answer
    for text, fd in ((out, 1), (err, 2)):
        if text:
            _write(fd, text.rstrip(b"\n") + b"\n")
    return code


def _read(stream: IO[bytes]) -> bytes:
    """Stdin up to MAX_PAYLOAD + 1 bytes (more: the ordinary hook is given it all)."""
    data = stream.read(MAX_PAYLOAD + 1)
    if len(data) > MAX_PAYLOAD:
        data += stream.read()
    return data


def _timeout(options: list[str]) -> float | None:
    """The hook's --timeout (its default when absent); None when the options are not ones
    this client passes on as they are (the ordinary hook then judges them)."""
    if len(options) % 2:
        return None
    given = dict(zip(options[::2], options[1::2], strict=True))
    try:
        timeout = float(given.get("--timeout", DEFAULT_TIMEOUT))
    except ValueError:
        return None
    return timeout if 0 < timeout < 3600 else None


def _ask(
    where: str, client: str, argv: list[str], data: bytes, deadline: float
) -> tuple[int, bytes, bytes] | str | None:
    """The owner's answer (code, stdout, stderr: already in the client's form), the reason
    for a block (what failed), or None for `fallback`."""
    folder = os.path.dirname(where)
    for each, kind, others in (
        (os.path.dirname(folder), stat.S_IFDIR, 0o022),  # the state directory
        (folder, stat.S_IFDIR, 0o077),  # hookd/: only the user enters
        (where, stat.S_IFSOCK, 0o077),  # the socket: only the user connects
    ):
        why = _unsafe(each, kind, others)
        if why is not None:
            what = f"{SOCKET} {where}" if each == where else f"{each}, which holds the hook socket,"
            return f"{what} {why}; the hook fails closed and the user must fix this"
    header = _json(
        {
            "v": VERSION,
            "lean": True,
            "agent": client,
            "argv": argv,
            "exe": sys.executable,
            "environ": {name: os.environ.get(name) for name in ENVIRONMENT},
            "left": deadline - time.monotonic(),
        }
    )
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        try:
            sock.settimeout(_left(deadline))
            sock.connect(where)
        except FileNotFoundError:
            return None  # the owner stopped (and removed it) since we looked
        peer = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
        uid = int.from_bytes(peer[4:8], sys.byteorder)
        if uid != os.geteuid():
            return f"{SOCKET} {where} is served by another user (uid {uid})"
        sock.settimeout(_left(deadline))
        sock.sendall(header.encode() + b"\n" + data)
        sock.shutdown(_socket.SHUT_WR)
        raw = _receive(sock, deadline)
    except TimeoutError:
        return (
            f"{SOCKET} {where} gave no answer within the hook's deadline; the owner may be "
            f"stopped or overloaded"
        )
    except ConnectionRefusedError:
        return (
            f"{SOCKET} {where} refused the connection: the workspace owner that served it is "
            f"not running. Another running owner of the cluster takes the socket over within "
            f"a second; if none runs, the user must start the owners again (`planfence "
            f"workspace serve` or `planfence cluster up`)"
        )
    except OSError as exc:
        return f"{SOCKET} {where} failed ({exc.strerror or exc})"
    finally:
        sock.close()
    return _parse(where, raw)


def _receive(sock: _socket.socket, deadline: float) -> bytes:
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


def _parse(where: str, raw: bytes) -> tuple[int, bytes, bytes] | str | None:
    """The answer in `raw` (module doc), None for `fallback`, else the reason for a block."""
    head, _, rest = raw.partition(b"\n")
    if head == b"fallback" and not rest:
        return None
    words = head.split(b" ")
    if len(words) == 3 and all(w.isdigit() for w in words):
        code, nout, nerr = (int(w) for w in words)
        if code in (0, BLOCK) and nout + nerr == len(rest):
            out, err = rest[:nout], rest[nout:]
            if code == 0 or err.strip():
                return code, out, err
    what = "closed the connection before answering" if not raw else "sent no valid answer"
    return f"{SOCKET} {where} {what} (the owner may have stopped mid-answer)"


def _blocked(client: str, data: bytes, reason: str) -> tuple[int, bytes, bytes]:
    """A block for `reason` (code, stdout, stderr) as `client` reads one: exit 2 and the
    reason on stderr for Claude Code and Codex; another client's own form through its
    adapter, as the ordinary hook answers (`clients.table.answered`, for the event of
    `data`), else exit 2 where the adapters cannot be loaded."""
    text = f"PlanFence blocked this call: {reason}; the hook fails closed"
    code, err, out = BLOCK, text, ""
    if client not in ("", "claude", "codex"):
        try:  # the adapters import only the standard library: loadable here, on a block only
            import importlib

            here = os.path.dirname(os.path.abspath(__file__))  # .../planfence_net/workspace/hook
            top = os.path.dirname(os.path.dirname(os.path.dirname(here)))
            if top not in sys.path:
                sys.path.append(top)  # after the standard library
            table = importlib.import_module("planfence_net.workspace.clients.table")
            mapped = table.normalized(client, data)
            code, err, out = table.answered(client, mapped, (BLOCK, text, ""))
        except Exception:
            pass  # exit 2 with the reason on stderr, as the adapters cannot be had
    return code, out.encode("utf-8", "replace"), err.encode("utf-8", "replace")


def _unsafe(path: str, kind: int, others: int) -> str | None:
    """Why `path` must not be used (as `client.unsafe`), or None."""
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


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _json(value: object) -> str:
    """`value` (None, bool, int, float, str, list, dict of str) as JSON, without `json`
    (its import compiles regular expressions: a quarter of this process's time)."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + "".join(_ESCAPES.get(c) or _char(c) for c in value) + '"'
    if isinstance(value, list):
        return "[" + ",".join(_json(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_json(k)}:{_json(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value).__name__)


_ESCAPES = {'"': '\\"', "\\": "\\\\", **{chr(i): f"\\u{i:04x}" for i in range(32)}}


def _char(c: str) -> str:
    return f"\\u{ord(c):04x}" if "\ud800" <= c <= "\udfff" else c  # lone surrogates


def _write(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        pass  # the exit code still speaks


def _ordinary(full: list[str], client: str, data: bytes) -> int:
    """Run `full` (the ordinary `planfence hook CLIENT OPTIONS`) in this process's place with
    `data` as its stdin; a block when it cannot start."""
    reason = "the lean hook was given no hook to run"
    if full:
        try:
            fd = os.memfd_create("planfence-hook-payload")
            _write_all(fd, data)
            os.lseek(fd, 0, os.SEEK_SET)
            os.dup2(fd, 0)
            os.execv(full[0], full)
        except OSError as exc:
            reason = f"the hook could not start {full[0]!r} ({exc.strerror or exc})"
    return _print(_blocked(client, data, reason))


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]
