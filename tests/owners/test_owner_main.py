"""The owner process's start (`owners/main.py`): an ordinary owner is served without click,
and it ciphers with PyNaCl until busy (`noise.fast_after`), so an idle owner never maps
`cryptography`; anything else is left to click's `owner serve`."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from planfence_net.net.client import open_session
from planfence_net.owners.main import _plain, serve_plain
from planfence_net.owners.startup import FAST_CIPHER_AFTER
from support.cluster import ClusterHandle
from support.owner_client import DEADLINE


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["c", "--agent", "reqs", "--help"],
        ["c", "--agent"],
        ["c", "--agent", "--listen"],
        ["c"],
        ["c", "d", "--agent", "reqs"],
        ["c", "--agent", "reqs", "--agent", "ops"],
        ["c", "--agent", "reqs", "--listen", "a:1", "--listen", "b:2"],
        ["c", "--agent", "reqs", "--verbose"],
    ],
)
def test_arguments_that_are_not_plain_are_left_to_click(argv: list[str]) -> None:
    assert _plain(argv) is None
    serve_plain(argv)  # returns: click's command reads them


def test_plain_arguments_are_read_by_name() -> None:
    argv = ["c", "--agent", "reqs", "--limit", "a=1", "--limit", "b=2", "--accept-loss"]
    assert _plain(argv) == {
        "path": ["c"],
        "--agent": ["reqs"],
        "--limit": ["a=1", "b=2"],
        "--accept-loss": [""],
    }


def test_a_workspace_owner_and_an_unreadable_roster_are_left_to_click(tmp_path: Path) -> None:
    (tmp_path / "cluster.toml").write_text(
        '[[agents]]\nname = "dev"\nworkspace = "/src"\n[[agents]]\nname = "reqs"\n'
    )
    serve_plain([str(tmp_path), "--agent", "dev"])
    serve_plain([str(tmp_path / "missing"), "--agent", "reqs"])


def test_an_error_is_one_line_and_exit_code_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cluster.toml").write_text('name = "x"\n[[agents]]\nname = "reqs"\n')
    with pytest.raises(SystemExit) as exited:
        serve_plain([str(tmp_path), "--agent", "reqs", "--limit", "nonsense=1"])
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err


def _maps_cryptography(pid: int) -> bool:
    return "cryptography" in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.anyio
async def test_an_idle_owner_never_maps_cryptography_a_busy_one_does(
    live_cluster: ClusterHandle,
) -> None:
    h = live_cluster
    pid = h.owner_pid("reqs")
    with anyio.fail_after(DEADLINE):
        async with open_session(h.roster, h.identity("planner"), "reqs") as session:
            assert (await session.request("ping"))["agent"] == "reqs"
            assert not _maps_cryptography(pid)  # served, with PyNaCl's cipher
            for _ in range(FAST_CIPHER_AFTER // 2):  # a request and its answer: two calls
                await session.request("ping")
            assert (await session.request("ping"))["agent"] == "reqs"  # the same session
    assert _maps_cryptography(pid)
