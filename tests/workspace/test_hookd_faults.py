"""The hook's fast path fails closed: a stopped or killed owner, a socket or folder with the
wrong owner or mode, a garbled or cut-off answer, a peer of another user, a decoy socket in
the repository, an oversized request.

Real `planfence workspace serve` owners and real `planfence hook` processes throughout. The
other-user tests run a process as uid 65534 (`nobody`) and need root; elsewhere they skip.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from planfence_net.workspace.hook import client as hookclient
from support.workspace import (
    git,
    hook_calls,
    hook_socket,
    make_repo,
    payload,
    run_cli,
    run_hook,
    served,
    write,
)

FILES = {"auth.ts": "export const timeout = 30;\n", "src/b.ts": "export const b = 1;\n"}
SOCKET = "PlanFence blocked this call: the workspace owner's hook socket"
NOBODY = 65534
PYTHON = "/usr/bin/python3"  # one `nobody` may run (the test's own lives under /root)
as_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root to run a process as another user"
)


def trusted(repo: Path) -> None:
    assert run_cli("workspace", "trust", "fix", "--target", "auth.ts", cwd=repo)[0] == 0


def owner_pid(repo: Path) -> int:
    log = (repo / ".planfence" / "logs" / "ws.jsonl").read_text().splitlines()
    return next(int(json.loads(x)["pid"]) for x in log if '"event":"listening"' in x)


def test_a_stopped_owner_blocks_within_the_deadline(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        trusted(repo)
        edit = payload("claude-edit", repo)
        assert run_hook("claude", edit, "--timeout", "2") == (0, "")
        pid = owner_pid(repo)
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            answer = run_hook("claude", edit, "--timeout", "2")
            took = time.monotonic() - started
        finally:
            os.kill(pid, signal.SIGCONT)
        assert answer == (
            2,
            f"{SOCKET} {hook_socket(repo)} gave no answer within the hook's deadline (2 + 1 "
            f"s); the owner may be stopped or overloaded, and the hook fails closed\n",
        )
        assert 3.0 <= took < 3.0 + 3.0, took  # 2 s + GRACE, plus the interpreter's start


def test_a_killed_owner_blocks_and_says_so(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        trusted(repo)
        os.kill(owner_pid(repo), signal.SIGKILL)
        assert hook_socket(repo).exists()  # nobody removed it
        assert run_hook("claude", payload("claude-edit", repo)) == (
            2,
            f"{SOCKET} {hook_socket(repo)} refused the connection: the workspace owner that "
            f"served it is not running. Another running owner of the cluster takes the socket "
            f"over within a second; if none runs, the user must start the owners again "
            f"(`planfence workspace serve` or `planfence cluster up`); the hook fails closed\n",
        )


def test_a_socket_or_folder_open_to_others_is_refused(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        trusted(repo)
        edit = payload("claude-edit", repo)
        sock = hook_socket(repo)
        cases = [
            (sock, 0o660, f"{SOCKET} {sock} is open to group or others (mode 660)"),
            (
                sock.parent,
                0o711,
                f"PlanFence blocked this call: {sock.parent}, which holds the hook socket, is "
                f"open to group or others (mode 711)",
            ),
            (
                sock.parent.parent,
                0o777,
                f"PlanFence blocked this call: {sock.parent.parent}, which holds the hook "
                f"socket, is open to group or others (mode 777)",
            ),
        ]
        for path, mode, reason in cases:
            before = os.lstat(path).st_mode & 0o777
            os.chmod(path, mode)
            try:
                assert run_hook("claude", edit) == (
                    2,
                    reason + "; the hook fails closed and the user must fix this\n",
                )
            finally:
                os.chmod(path, before)
        assert run_hook("claude", edit) == (0, "")
        if os.geteuid() == 0:  # another user's folder or socket (chown needs root)
            for path in (sock, sock.parent):
                os.chown(path, NOBODY, -1)
                try:
                    code, reason = run_hook("claude", edit)
                    assert (code, f"belongs to another user (uid {NOBODY})" in reason) == (2, True)
                finally:
                    os.chown(path, 0, -1)
        assert run_hook("claude", edit) == (0, "")


@contextmanager
def impostor(sock: Path, sent: bytes) -> Iterator[None]:
    """The owner's socket moved aside and a listener of ours (0600, same user) in its place,
    answering every connection with `sent` after reading the request, then closing."""
    aside = sock.with_suffix(".aside")
    sock.rename(aside)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock))
    os.chmod(sock, 0o600)
    listener.listen()
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                while conn.recv(65536):
                    pass
                conn.sendall(sent)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(10)
        sock.unlink()
        aside.rename(sock)


def test_a_garbled_or_cut_off_answer_blocks(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        trusted(repo)
        edit = payload("claude-edit", repo)
        sock = hook_socket(repo)
        bad = f"{SOCKET} {sock} sent no valid answer (the owner may have stopped mid-answer); the hook fails closed\n"
        cut = f"{SOCKET} {sock} closed the connection before answering (the owner may have stopped mid-answer); the hook fails closed\n"
        for sent, reason in (
            (b"", cut),
            (b'{"code": 0, "stderr": "", "std', bad),  # died mid-answer
            (b"garbage", bad),
            (b'{"code": 1, "stderr": "x", "stdout": ""}', bad),  # 1 means "go ahead" to agents
            (b'{"code": 2, "stderr": "", "stdout": ""}', bad),  # a block without a reason
            (b'{"code": 0, "stderr": "", "stdout": "", "more": 1}', bad),
            (b'{"code": true, "stderr": "", "stdout": ""}', bad),
        ):
            with impostor(sock, sent):
                assert run_hook("claude", edit) == (2, reason), sent
        assert run_hook("claude", edit) == (0, "")


def test_a_decoy_socket_in_the_repository_is_never_used(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    shipped = make_repo(tmp_path / "shipped", FILES)
    (shipped / ".planfence").mkdir()
    for name in ("cluster.toml", "workspace.json"):
        (shipped / ".planfence" / name).write_text((repo / "README").as_posix())
    git(shipped, "add", "-A")
    git(shipped, "commit", "-q", "-m", "ship a cluster folder")
    with served(repo):
        trusted(repo)
        name = hook_socket(repo).name
        decoys = []
        for where in (repo, shipped):
            for rel in (f".planfence/hookd/{name}", f".planfence/{name}", "hook.sock"):
                path = where / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                decoy = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                short = Path(tempfile.mkdtemp(dir="/tmp")) / "s"  # AF_UNIX's 108 bytes
                decoy.bind(str(short))
                os.chmod(short, 0o600)
                decoy.listen()
                os.rename(short, path)
                short.parent.rmdir()
                decoy.setblocking(False)
                decoys.append(decoy)
        write(repo, {"auth.ts": "export const timeout = 60;\n"})  # the plan is stale
        code, reason = run_hook("claude", payload("claude-edit", repo))
        assert (code, hook_calls(repo)) == (2, 1)  # the real owner answered: stale
        assert "plan 'fix' is stale (critical drift)" in reason.splitlines()[0]
        code, reason = run_hook("claude", payload("claude-edit", shipped))
        assert code == 2 and f"refusing the cluster folder {shipped / '.planfence'}" in reason
        for decoy in decoys:
            with pytest.raises(BlockingIOError):
                decoy.accept()  # nobody ever connected
            decoy.close()


def test_the_owner_caps_the_request(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo):
        sock = hook_socket(repo)
        refused = {"code": 2, "stderr": hookclient.oversize(), "stdout": ""}
        for sent, answer in (
            (b"x" * (70 * 1024), b""),  # a header line longer than the cap: closed unanswered
            # a payload past the cap: refused with the reason, unparsed (issue 28, H9)
            (
                json.dumps({"v": 1}).encode() + b"\n" + b" " * (hookclient.MAX_PAYLOAD + 1),
                json.dumps(refused).encode(),
            ),
        ):
            got = b""
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(20)
                conn.connect(str(sock))
                try:
                    conn.sendall(sent)
                    conn.shutdown(socket.SHUT_WR)
                    got = conn.recv(65536)
                except (BrokenPipeError, ConnectionResetError):
                    pass
            assert got == answer
        assert hook_calls(repo) == 0


@as_root
def test_a_peer_of_another_user_gets_no_answer(tmp_path: Path) -> None:
    """The owner checks SO_PEERCRED. Another user cannot even reach the socket (its folder
    is 0700); here a hard link in an open folder and mode 0666 let `nobody` connect."""
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo), tempfile.TemporaryDirectory(dir=tmp_path.anchor + "tmp") as open_dir:
        sock = hook_socket(repo)
        os.chmod(open_dir, 0o755)
        link = Path(open_dir) / "hook.sock"
        os.link(sock, link)
        os.chmod(sock, 0o666)
        try:
            request = json.dumps(payload("claude-edit", repo)).encode()
            code = (
                "import socket, sys\n"
                "s = socket.socket(socket.AF_UNIX)\n"
                f"s.connect({str(link)!r})\n"
                "try:\n"
                f"    s.sendall(b'{{}}\\n' + {request!r})\n"
                "    s.shutdown(socket.SHUT_WR)\n"
                "    got = s.recv(65536)\n"
                "except (BrokenPipeError, ConnectionResetError):\n"
                "    got = b''\n"
                "sys.stdout.write(repr(got))\n"
            )
            proc = subprocess.run(
                [PYTHON, "-c", code], user=NOBODY, capture_output=True, text=True,
                timeout=30, cwd="/",
            )  # fmt: skip
        finally:
            os.chmod(sock, 0o600)
            link.unlink()
        assert (proc.returncode, proc.stdout) == (0, "b''"), proc.stderr
        log = (repo / ".planfence" / "logs" / "ws.jsonl").read_text()
        assert f'"event":"hookd_refused","uid":{NOBODY}' in log


@as_root
def test_a_socket_served_by_another_user_is_refused(tmp_path: Path) -> None:
    """The client checks SO_PEERCRED too: a listener `nobody` started, moved into the owner's
    place and given the user's name and mode, is still `nobody`'s."""
    repo = make_repo(tmp_path / "repo", FILES)
    with served(repo), tempfile.TemporaryDirectory(dir=tmp_path.anchor + "tmp") as open_dir:
        trusted(repo)
        os.chmod(open_dir, 0o777)
        theirs = Path(open_dir) / "theirs.sock"
        listener = subprocess.Popen(
            [
                PYTHON,
                "-c",
                "import socket, sys\n"
                "s = socket.socket(socket.AF_UNIX)\n"
                f"s.bind({str(theirs)!r}); s.listen()\n"
                "print('listening', flush=True)\n"
                "sys.stdin.read()\n",
            ],
            user=NOBODY,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd="/",
        )
        sock = hook_socket(repo)
        aside = sock.with_suffix(".aside")
        try:
            assert listener.stdout is not None and listener.stdout.readline() == "listening\n"
            sock.rename(aside)
            os.rename(theirs, sock)
            os.chown(sock, 0, 0)
            os.chmod(sock, 0o600)
            assert run_hook("claude", payload("claude-edit", repo)) == (
                2,
                f"{SOCKET} {sock} is served by another user (uid {NOBODY}); it fails closed\n",
            )
        finally:
            listener.communicate("", timeout=10)
            sock.unlink()
            aside.rename(sock)
        assert hook_calls(repo) == 0


def test_the_owner_serves_no_socket_where_others_could_reach_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `hookd` that is a symlink to a folder elsewhere (or, as root, a folder of another
    user): the owner logs why and serves on without a socket; the hook checks in-process.
    (A state directory open to others is made 0700 by `workspace serve` itself.)"""
    repo = make_repo(tmp_path / "repo", FILES)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    cases = [("link", "is not a folder")]
    if os.geteuid() == 0:
        cases.append(("theirs", f"belongs to another user (uid {NOBODY})"))
    for case, reason in cases:
        with tempfile.TemporaryDirectory(dir="/tmp") as short:  # AF_UNIX's 108 bytes
            hookd = Path(short) / "planfence" / "hookd"
            hookd.parent.mkdir()
            if case == "link":
                hookd.symlink_to(elsewhere)
            else:
                hookd.mkdir(mode=0o700)
                os.chown(hookd, NOBODY, -1)
            monkeypatch.setenv("XDG_STATE_HOME", short)
            with served(repo):
                trusted(repo)
                assert run_hook("claude", payload("claude-edit", repo)) == (0, "")
                log = (repo / ".planfence" / "logs" / "ws.jsonl").read_text()
        events = [json.loads(x) for x in log.splitlines() if '"event":"hookd"' in x]
        assert (events[-1]["serving"], events[-1]["reason"].endswith(reason)) == (False, True)
        assert hook_calls(repo) == 0
        assert list(elsewhere.iterdir()) == []
