"""Download the nine Mahimahi LTE traces the carrier profiles replay, and check each one.

Mahimahi's traces are GPL data, so the project does not ship them; it pins the SHA-256 of
each file instead. `fetch_traces` downloads every file that is not already present and
intact, streams it into a temporary file beside its destination while hashing it, and keeps
it only when the hash is the pinned one: a file that differs is deleted and refused.

Standard library only (urllib): any URL urllib opens works as a source (`https://`,
`http://`, `file://`), and a plain folder path is read as a `file://` URL.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from planfence_net.core.errors import ConfigError, TransportError
from planfence_net.traces.profiles import MAHIMAHI_URL

# The `traces/` folder of the Mahimahi repository (github.com/ravinet/mahimahi), raw files.

# SHA-256 of each trace file, as upstream has them (unchanged since 2016).
PINNED_SHA256: dict[str, str] = {
    "ATT-LTE-driving-2016.down": "24a40538340de991e0a6595aefc381b11a3da0446176e69b51750707a57b0344",
    "ATT-LTE-driving-2016.up": "ebb3d53674b77be4ed920ad91c4513a496e04e30da839e2ca8a627cb7269071e",
    "ATT-LTE-driving.down": "73c58f41bf7a3f0fac82810ca61307521be1cf6b77a0e98093fd340bddfd161f",
    "ATT-LTE-driving.up": "d58a640b9bccd131a421bff6eaf727aba324d9258b35009655bbf68e087b9b29",
    "TMobile-LTE-driving.down": "d48ff134fc29c36cc3c3dee203464246bd698f0faede42534a27b0cbe3057055",
    "TMobile-LTE-short.down": "4f33dce8dd811b5702272af64aaf64d3913719919abd776edf1e0f7c0965da43",
    "TMobile-LTE-short.up": "1c0d1bf5417b07597724fd64afe676af3c1f337a4ccdde90106bf96b1bcf18b2",
    "Verizon-LTE-short.down": "c918436fbd6246af134c76585d9395881fdd27203c59a8902b9a7c675b8a8e3e",
    "Verizon-LTE-short.up": "f6cd9049f58d70f12545772a3482ded085b6d50f06a2f4ff4afcfb6fe7976dcc",
}

CHUNK = 64 * 1024

# progress(name, bytes so far, total bytes or None when the server did not say)
Progress = Callable[[str, int, int | None], None]


@dataclass(frozen=True, slots=True)
class FetchedTrace:
    """One trace file in the destination folder: `downloaded` now or already `present`."""

    name: str
    path: Path
    size: int
    sha256: str
    status: str


def source_url(source: str) -> str:
    """`source` as a base URL ending in `/`: a URL as given, a folder path as `file://`."""
    if "://" not in source:
        source = Path(source).resolve().as_uri()
    return source if source.endswith("/") else source + "/"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def fetch_traces(
    dest: Path,
    source: str = MAHIMAHI_URL,
    *,
    progress: Progress | None = None,
    timeout: float = 30.0,
) -> list[FetchedTrace]:
    """Make `dest` hold every pinned trace, intact; returns one entry per file, in name order.

    A file already in `dest` with the pinned hash is kept (`present`); every other one is
    downloaded from `source` + name (`downloaded`). Stops at the first failure, keeping the
    files verified so far, and raises ConfigError (a hash that is not the pinned one, an
    unwritable `dest`) or TransportError (unreachable source, HTTP error, timeout of
    `timeout` s on a read). A refused or partial download never stays in `dest`.
    """
    base = source_url(source)
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create {dest}: {exc.strerror or exc}") from None
    fetched = []
    for name, expected in sorted(PINNED_SHA256.items()):
        path = dest / name
        if path.is_file() and file_sha256(path) == expected:
            fetched.append(FetchedTrace(name, path, path.stat().st_size, expected, "present"))
            continue
        size = _download(base + urllib.parse.quote(name), path, expected, progress, timeout)
        fetched.append(FetchedTrace(name, path, size, expected, "downloaded"))
    return fetched


def _download(
    url: str, path: Path, expected: str, progress: Progress | None, timeout: float
) -> int:
    """Stream `url` into `path` via a temporary file; keep it only if its hash is `expected`."""
    try:
        handle, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise ConfigError(f"cannot write into {path.parent}: {exc.strerror or exc}") from None
    temp, digest, size = Path(temp_name), hashlib.sha256(), 0
    try:
        with os.fdopen(handle, "wb") as out:
            for block, total in _blocks(url, path.name, timeout):
                out.write(block)
                digest.update(block)
                size += len(block)
                if progress:
                    progress(path.name, size, total)
        if digest.hexdigest() != expected:
            raise ConfigError(
                f"refused {path.name} from {url}: its SHA-256 is "
                f"{digest.hexdigest()}, not the pinned {expected}; not kept"
            )
        os.chmod(temp, 0o644)
        os.replace(temp, path)
        return size
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        temp.unlink(missing_ok=True)


def _blocks(url: str, name: str, timeout: float) -> Iterator[tuple[bytes, int | None]]:
    """The body of `url` in blocks, each with the total length (None when not announced).

    Every failure to read becomes a TransportError naming the file and the URL.
    """
    where = f"cannot download {name} from {url}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            while block := response.read(CHUNK):
                yield block, total
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the response and its socket
        raise TransportError(f"{where}: HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason.strerror if isinstance(exc.reason, OSError) else exc.reason
        raise TransportError(f"{where}: {reason or exc}") from None
    except TimeoutError:
        raise TransportError(f"{where}: no data for {timeout:g} s") from None
    except (OSError, ValueError, http.client.HTTPException) as exc:  # reset mid-body, bad URL
        raise TransportError(f"{where}: {exc}") from None
