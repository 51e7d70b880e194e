"""A loopback etcd for the benchmarks, and two clients for its Txn.

`loopback_etcd()` starts the `etcd` binary on PATH (Debian: `apt-get install etcd-server`)
with a temporary data folder on 127.0.0.1 and stops it on exit.

`GrpcEtcd` is etcd as its users call it: its native gRPC API, through aetcd (a maintained
asyncio client over etcd's protos, the `bench` extra). `EtcdClient` speaks etcd's v3 JSON
gateway (`POST /v3/kv/...`) over one kept-alive HTTP/1.1 connection: kept as a labelled
extra, since the gateway decodes JSON inside etcd and is slower than gRPC for large Txns.
`ByteCounter` relays a client's connection to etcd on 127.0.0.1 and counts the bytes both
ways (HTTP/2 and gRPC framing included), for bytes per Txn.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ...cluster.ports import free_port

START_TIMEOUT = 20.0
DEFAULT_MAX_TXN_OPS = 128  # etcd's --max-txn-ops unless raised


def etcd_binary() -> str | None:
    return shutil.which("etcd")


def missing() -> str | None:
    """Why etcd cannot be measured here (one line), or None when it can."""
    if etcd_binary() is None:
        return "no `etcd` on PATH (Debian: apt-get install etcd-server): etcd skipped"
    try:  # aetcd is the optional `bench` extra: is it installed?
        import aetcd  # noqa: F401
    except ImportError:
        return "no aetcd (pip install -e '.[bench]'): etcd skipped"
    return None


@contextmanager
def loopback_etcd(binary: str, max_txn_ops: int = DEFAULT_MAX_TXN_OPS) -> Iterator[int]:
    """Run a one-member etcd on 127.0.0.1 (`--max-txn-ops` raised when asked); yields its
    client port. Always stops it."""
    client, peer = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="planfence-etcd-") as tmp:
        argv = [
            binary,
            "--name",
            "bench",
            "--data-dir",
            str(Path(tmp) / "data"),
            "--listen-client-urls",
            f"http://127.0.0.1:{client}",
            "--advertise-client-urls",
            f"http://127.0.0.1:{client}",
            "--listen-peer-urls",
            f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{peer}",
            "--initial-cluster",
            f"bench=http://127.0.0.1:{peer}",
            "--logger",
            "zap",
            "--log-level",
            "error",
            "--max-txn-ops",
            str(max_txn_ops),
        ]
        with open(Path(tmp) / "etcd.out", "wb") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        try:
            _wait_healthy(proc, client, Path(tmp) / "etcd.out")
            yield client
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_healthy(proc: subprocess.Popen[bytes], port: int, out: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as reply:
                if json.loads(reply.read()).get("health") == "true":
                    return
        except (urllib.error.URLError, OSError, ValueError):
            pass
        time.sleep(0.05)  # polling a process that is still starting: nothing to await
    raise RuntimeError(f"etcd did not become healthy: {out.read_text(errors='replace')[-500:]}")


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class EtcdClient:
    """One HTTP/1.1 keep-alive connection to etcd's JSON gateway."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int
    ) -> None:
        self._reader, self._writer, self._port = reader, writer, port

    @classmethod
    async def connect(cls, port: int) -> EtcdClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer, port)

    async def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST `body` as JSON to `path`; returns the decoded answer. Raises RuntimeError
        for a status other than 200."""
        data = json.dumps(body, separators=(",", ":")).encode()
        self._writer.write(
            b"POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: "
            b"application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (path.encode(), self._port, len(data), data)
        )
        head = await self._reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = lines[0].split(" ", 2)[1]
        headers = {
            k.strip().lower(): v.strip()
            for k, _, v in (line.partition(":") for line in lines[1:] if line)
        }
        if "content-length" in headers:
            payload = await self._reader.readexactly(int(headers["content-length"]))
        else:
            payload = await self._read_chunked()
        if status != "200":
            raise RuntimeError(f"etcd {path}: HTTP {status}: {payload[:200]!r}")
        answer: dict[str, Any] = json.loads(payload)
        return answer

    async def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size = int((await self._reader.readuntil(b"\r\n")).strip(), 16)
            chunk = await self._reader.readexactly(size + 2)
            if size == 0:
                return b"".join(parts)
            parts.append(chunk[:-2])

    async def put(self, key: str, value: str) -> int:
        """Write `key`; returns the revision of the write (its mod_revision)."""
        answer = await self.call("/v3/kv/put", {"key": _b64(key), "value": _b64(value)})
        return int(answer["header"]["revision"])

    async def txn_unchanged(self, revisions: dict[str, int]) -> bool:
        """A Txn comparing mod_revision of every key with `revisions`; True if all match."""
        compare = [
            {"key": _b64(k), "target": "MOD", "result": "EQUAL", "mod_revision": str(rev)}
            for k, rev in revisions.items()
        ]
        answer = await self.call("/v3/kv/txn", {"compare": compare})
        return bool(answer.get("succeeded", False))

    def close(self) -> None:
        self._writer.close()


class GrpcEtcd:
    """etcd's native gRPC API through aetcd's public client: one channel, as a user's
    process keeps it."""

    def __init__(self, client: Any) -> None:
        self._client = client

    @classmethod
    async def connect(cls, port: int) -> GrpcEtcd:
        import aetcd  # the bench extra; imported only when etcd is measured

        client = aetcd.Client(host="127.0.0.1", port=port)
        await client.connect()
        return cls(client)

    async def put(self, key: str, value: str) -> int:
        """Write `key`; returns the revision of the write (its mod_revision)."""
        answer = await self._client.put(key.encode(), value.encode())
        return int(answer.header.revision)

    async def txn_unchanged(self, revisions: dict[str, int], per_txn: int | None = None) -> bool:
        """True if the mod_revision of every key equals `revisions`. One Txn, or with
        `per_txn` as many Txns of at most `per_txn` compares as a client under etcd's
        --max-txn-ops needs, sent concurrently (no longer one atomic snapshot)."""
        compares = [self._client.transactions.mod(k.encode()) == v for k, v in revisions.items()]
        size = per_txn or len(compares) or 1
        chunks = [compares[at : at + size] for at in range(0, len(compares), size)]
        if len(chunks) == 1:
            ok, _ = await self._client.transaction(chunks[0], [], [])
            return bool(ok)
        answers = await asyncio.gather(*(self._client.transaction(c, [], []) for c in chunks))
        return all(ok for ok, _ in answers)

    async def close(self) -> None:
        await self._client.close()


class ByteCounter:
    """A TCP relay on 127.0.0.1 to etcd's client port that counts the bytes both ways."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.bytes = 0
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        self._relays: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> ByteCounter:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        if self._relays:  # the client closed first: let the relays see both ends close
            _, pending = await asyncio.wait(self._relays, timeout=5)
            for task in pending:
                task.cancel()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._relays.add(task)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    self.bytes += len(data)
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


@contextmanager
def maybe_loopback_etcd(binary: str | None, max_txn_ops: int) -> Iterator[int | None]:
    """`loopback_etcd`'s port when there is an etcd `binary`, else None (the benchmark
    skips etcd's side)."""
    if binary is None:
        yield None
        return
    with loopback_etcd(binary, max_txn_ops) as port:
        yield port
