"""`planfence traces fetch`: downloads from an HTTP server on 127.0.0.1 (started and stopped
by each test), pinned SHA-256s, refused files never kept, one-line errors."""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from planfence_net.cli.main import app
from planfence_net.traces.fetch import PINNED_SHA256, fetch_traces, file_sha256
from planfence_net.traces.profiles import find_trace

NAMES = sorted(PINNED_SHA256)
FIRST = NAMES[0]  # fetched first: the names are fetched in sorted order


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    requests: list[str]

    def log_message(self, format: str, *args: object) -> None:
        self.requests.append(self.path)


@contextmanager
def serve(folder: Path) -> Iterator[tuple[str, list[str]]]:
    """Serve `folder` over HTTP on 127.0.0.1; yields (base URL, paths requested so far)."""
    requests: list[str] = []
    handler = type("Handler", (_QuietHandler,), {"requests": requests})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(folder))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def fetch(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["traces", "fetch", *args])
    return result.exit_code, result.stdout, result.stderr


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_fetch_downloads_the_nine_traces_and_keeps_them_on_the_search_path(
    mahimahi_traces: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PLANFENCE_TRACES", "")
    dest = tmp_path / "data" / "planfence" / "traces"
    with serve(mahimahi_traces) as (url, requests):
        code, out, err = fetch("--from", url)
        assert (code, err.count("error")) == (0, 0), err
        assert out.splitlines() == [
            *(f"downloaded {n} ({(mahimahi_traces / n).stat().st_size:,} B)" for n in NAMES),
            f"9 traces in {dest}: 9 downloaded, 0 already present, every SHA-256 as pinned",
        ]
        assert sorted(requests) == [f"/{n}" for n in NAMES]
        assert listing(dest) == NAMES  # no temporary file left behind
        assert all((dest / n).read_bytes() == (mahimahi_traces / n).read_bytes() for n in NAMES)
        assert find_trace("Verizon-LTE-short.up") == dest / "Verizon-LTE-short.up"

        # A second run asks for nothing it has; a damaged file is fetched again.
        (dest / FIRST).write_text("0\n1\n")
        requests.clear()
        code, out, _ = fetch("--from", url)
        assert code == 0
        assert requests == [f"/{FIRST}"]
        assert out.splitlines()[-1] == (
            f"9 traces in {dest}: 1 downloaded, 8 already present, every SHA-256 as pinned"
        )
        assert file_sha256(dest / FIRST) == PINNED_SHA256[FIRST]


def test_progress_reaches_each_file_size(mahimahi_traces: Path, tmp_path: Path) -> None:
    seen: dict[str, tuple[int, int | None]] = {}
    with serve(mahimahi_traces) as (url, _):
        fetched = fetch_traces(
            tmp_path, url, progress=lambda n, done, total: seen.update({n: (done, total)})
        )
    sizes = {n: (mahimahi_traces / n).stat().st_size for n in NAMES}
    assert seen == {n: (size, size) for n, size in sizes.items()}
    assert [(t.name, t.size, t.status) for t in fetched] == [
        (n, sizes[n], "downloaded") for n in NAMES
    ]


def test_a_tampered_trace_is_refused_and_not_kept(tmp_path: Path) -> None:
    served, dest = tmp_path / "served", tmp_path / "dest"
    served.mkdir()
    (served / FIRST).write_text("0\n1\n2\n")  # a well-formed trace, not the pinned one
    with serve(served) as (url, requests):
        code, out, err = fetch("--from", url, "--dir", str(dest))
    digest = file_sha256(served / FIRST)
    assert (code, out) == (1, "")
    assert err == (
        f"error: refused {FIRST} from {url}{FIRST}: its SHA-256 is {digest}, not "
        f"the pinned {PINNED_SHA256[FIRST]}; not kept\n"
    )
    assert requests == [f"/{FIRST}"]  # stopped at the first refusal
    assert listing(dest) == []


def test_a_modified_copy_of_a_real_trace_is_refused(mahimahi_traces: Path, tmp_path: Path) -> None:
    served, dest = tmp_path / "served", tmp_path / "dest"
    served.mkdir()
    for name in NAMES:
        shutil.copyfile(mahimahi_traces / name, served / name)
    victim = "TMobile-LTE-short.up"
    data = bytearray((served / victim).read_bytes())
    data[-2] = ord("9") if data[-2] != ord("9") else ord("8")  # one digit of the last line
    (served / victim).write_bytes(bytes(data))
    with serve(served) as (url, _):
        code, _, err = fetch("--from", url, "--dir", str(dest))
    assert code == 1
    assert err.startswith(f"error: refused {victim} from {url}{victim}: its SHA-256 is ")
    assert victim not in listing(dest)
    kept = [n for n in NAMES if n < victim]  # the files verified before it stay
    assert listing(dest) == kept


def test_a_missing_file_is_one_line_naming_the_url(tmp_path: Path) -> None:
    with serve(tmp_path) as (url, _):
        code, out, err = fetch("--from", url, "--dir", str(tmp_path / "dest"))
    assert (code, out) == (1, "")
    assert err == f"error: cannot download {FIRST} from {url}{FIRST}: HTTP 404 File not found\n"
    assert listing(tmp_path / "dest") == []


def test_a_folder_not_on_the_search_path_says_how_to_use_it(
    mahimahi_traces: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "elsewhere"
    code, out, _ = fetch("--from", str(mahimahi_traces), "--dir", str(dest))  # a folder works
    assert code == 0
    assert out.splitlines()[-1] == (
        f"{dest} is not on the trace search path: set PLANFENCE_TRACES={dest}"
    )
