"""Shared fixtures: cluster folders, real owner processes on 127.0.0.1, and a leak check.

    cluster_dir    a fresh five-agent cluster folder (keys, roster), nothing running
    live_cluster   the same folder with every owner running as a real process; always stopped
    anyio_backend  "asyncio" for `@pytest.mark.anyio` tests
    mahimahi_traces  the folder holding the nine Mahimahi LTE traces, or a skip (one reason)

Every owner a test starts is stopped in teardown, also when the test fails; a session-wide
check fails loudly if an owner process started under pytest's temporary folder survives.
Helpers never sleep to wait for something: they wait for the event itself (a process exit
through a pidfd, a log line appearing, a command returning once owners accept sessions).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from planfence_net.cluster import processes as clusterlib
from planfence_net.cluster.folder import ClusterDir
from planfence_net.traces.fetch import PINNED_SHA256
from planfence_net.traces.profiles import TRACES_ENV, trace_dirs
from support.cluster import ClusterHandle, kill_all

# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="session", autouse=True)
def user_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The user's PlanFence state directory ($XDG_STATE_HOME, where `workspace serve`
    records the folders it serves) is a fresh folder for the whole run, inherited by every
    process a test starts: tests never write the real user's records."""
    import os

    state = tmp_path_factory.mktemp("state")
    before = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(state)
    for marker in ("CLAUDECODE", "CODEX_THREAD_ID"):  # run from an agent's shell: the
        os.environ.pop(marker, None)  # tests are the person unless they say otherwise
    yield state
    if before is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = before


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """Run `@pytest.mark.anyio` tests on asyncio only."""
    return "asyncio"


NO_TRACES = (
    "no Mahimahi LTE traces on the trace search path; `planfence traces fetch` "
    f"downloads them, or set {TRACES_ENV}"
)


@pytest.fixture
def mahimahi_traces(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The first folder of the trace search path that holds all nine Mahimahi LTE traces.

    PLANFENCE_TRACES is pointed at it, so processes a test starts find them too. Without
    such a folder the test is skipped with NO_TRACES.
    """
    for folder in trace_dirs():
        if all((folder / name).is_file() for name in PINNED_SHA256):
            monkeypatch.setenv(TRACES_ENV, str(folder))
            return folder
    pytest.skip(NO_TRACES)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Report every NO_TRACES skip at this file, not at its test, so that pytest's summary
    folds all of them into one line."""
    report = yield
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and longrepr[2] == f"Skipped: {NO_TRACES}":
        report.longrepr = (__file__, None, longrepr[2])
    return report


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[ClusterHandle]:
    """A fresh cluster folder (5 agents, free ports on 127.0.0.1), nothing running.

    Owners a test starts from it (CLI or library) are stopped in teardown.
    """
    path = tmp_path / "cluster"
    roster = clusterlib.init_cluster(path, agents=5, base_port=0)
    handle = ClusterHandle(path, ClusterDir(path), roster)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def live_cluster(cluster_dir: ClusterHandle) -> Iterator[ClusterHandle]:
    """`cluster_dir` with every owner running as a real process, ready for sessions.

    `cluster up` returns only once every owner answered an authenticated ping. Teardown
    runs `cluster down` and SIGKILLs anything still alive, also when the test failed.
    """
    try:
        out = cluster_dir.up()
        assert out == ("started 5 owner(s): planner, reqs, inventory, ops, audit; 5 running\n"), out
        yield cluster_dir
    finally:
        cluster_dir.stop()


@pytest.fixture(scope="session", autouse=True)
def no_owner_left_behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fail the session loudly if an owner started under pytest's temp folder still runs."""
    base = str(tmp_path_factory.getbasetemp().resolve())
    yield
    leftovers = kill_all(base)
    if leftovers:
        pytest.fail(
            "owner processes were left running (killed now):\n"
            + "\n".join(f"  {pid}: {cmd}" for pid, cmd in leftovers.items()),
            pytrace=False,
        )
