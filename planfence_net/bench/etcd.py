"""A loopback etcd for the latency benchmark, and a small asyncio client for its Txn.

`loopback_etcd()` starts the `etcd` binary on PATH (Debian: `apt-get install etcd-server`)
with a temporary data folder on 127.0.0.1 and stops it on exit. `EtcdClient` speaks etcd's
v3 JSON gateway (`POST /v3/kv/...`) over one kept-alive HTTP/1.1 connection, so the benchmark
needs no gRPC dependency. The gateway is part of etcd's client port: each call is decoded
from JSON there and served by the same gRPC handler a native client reaches.
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

from ..cluster.processes import free_port

START_TIMEOUT = 20.0


def etcd_binary() -> str | None:
    return shutil.which("etcd")


@contextmanager
def loopback_etcd(binary: str) -> Iterator[int]:
    """Run a one-member etcd on 127.0.0.1; yields its client port. Always stops it."""
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
