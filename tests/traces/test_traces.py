"""Trace files, schedules, profiles, the generator and the pure link model (no I/O, no anyio)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from planfence_net.core.errors import ConfigError
from planfence_net.traces import generate
from planfence_net.traces.link import BYTES_PER_OPPORTUNITY, CHUNK_OVERHEAD, MSS, Link
from planfence_net.traces.mmlink import Schedule, Trace, parse_trace, read_trace
from planfence_net.traces.profiles import (
    PROJECT_TRACES,
    TRACES_ENV,
    find_trace,
    list_profiles,
    load_profile,
    load_trace,
    trace_dirs,
    user_traces_dir,
)
from support.cluster import REPO

# (opportunities, duration in ms) of each Mahimahi LTE trace, counted from the files.
README_TABLE = {
    "ATT-LTE-driving.down": (338895, 786112),
    "ATT-LTE-driving.up": (70336, 1012472),
    "ATT-LTE-driving-2016.down": (45604, 120002),
    "ATT-LTE-driving-2016.up": (19101, 120002),
    "TMobile-LTE-driving.down": (505078, 474609),
    "TMobile-LTE-short.down": (194846, 139986),
    "TMobile-LTE-short.up": (155381, 140000),
    "Verizon-LTE-short.down": (58655, 140000),
    "Verizon-LTE-short.up": (69367, 140000),
}


def trace_of(*timestamps: int) -> Trace:
    return Trace(source="test", timestamps=timestamps)


# --- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(README_TABLE))
def test_real_trace_matches_readme_table(mahimahi_traces: Path, name: str) -> None:
    trace = read_trace(mahimahi_traces / name)
    assert (trace.opportunities, trace.period_ms) == README_TABLE[name]


def test_every_shared_trace_file_is_in_the_table(mahimahi_traces: Path) -> None:
    files = {p.name for p in mahimahi_traces.iterdir() if p.suffix in (".up", ".down")}
    assert files == set(README_TABLE)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "the file is empty (a trace needs at least one line)"),
        ("1\n\n2\n", "line 2: empty line"),
        ("\n", "line 1: empty line"),
        (
            "1\n2\n1\n",
            "line 3: 1 is smaller than the previous value 2 (timestamps must not decrease)",
        ),
        ("0\n0\n", "line 2: the last value is 0 (it is the loop period and must be > 0)"),
        ("1\nx\n", "line 2: 'x' is not a non-negative integer"),
        ("1\n-3\n", "line 2: '-3' is not a non-negative integer"),
        ("1\n 2\n", "line 2: ' 2' is not a non-negative integer"),
        ("1\n2.5\n", "line 2: '2.5' is not a non-negative integer"),
        ("1\r\n2\r\n", "line 1: '1\\r' is not a non-negative integer"),
    ],
)
def test_malformed_trace_is_rejected_naming_file_and_line(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "bad.up"
    path.write_text(text, encoding="ascii", newline="")
    with pytest.raises(ConfigError) as caught:
        read_trace(path)
    separator = ": " if problem.startswith("the file") else ", "
    assert str(caught.value) == f"bad trace file {path}{separator}{problem}"


def test_non_ascii_trace_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.down"
    path.write_bytes(b"1\n2\n\xc2\xb2\n")
    with pytest.raises(ConfigError, match=r", line 3: not ASCII text$"):
        read_trace(path)


def test_final_newline_is_optional_and_repeats_are_kept() -> None:
    assert parse_trace("0\n0\n3", "t").timestamps == (0, 0, 3)
    assert parse_trace("0\n0\n3\n", "t").timestamps == (0, 0, 3)


# --- looping and offset ----------------------------------------------------------------------


def test_loop_period_is_the_last_value() -> None:
    schedule = Schedule(trace_of(0, 0, 4, 10))
    times = [schedule.time_of(k) for k in range(10)]
    # The last opportunity of a pass and the first of the next coincide (base += last).
    assert times == [0, 0, 4, 10, 10, 10, 14, 20, 20, 20]


def test_trace_starting_late_has_a_wrap_gap_of_its_first_value() -> None:
    schedule = Schedule(trace_of(7, 10))
    assert [schedule.time_of(k) for k in range(5)] == [7, 10, 17, 20, 27]
    assert schedule.wait_after(10) == 7


def test_index_after_is_strictly_after_across_passes() -> None:
    schedule = Schedule(trace_of(0, 0, 4, 10))
    assert schedule.time_of(schedule.index_after(-1)) == 0
    assert schedule.time_of(schedule.index_after(0)) == 4
    assert schedule.time_of(schedule.index_after(4)) == 10
    assert schedule.index_after(10) == 6  # both copies of ms 10 (indices 3, 4, 5) are not after
    assert schedule.time_of(schedule.index_after(1_000_003)) == 1_000_004
    assert schedule.count_between(0, 20) == 8  # 4, 10, 10, 10, 14, 20, 20, 20
    assert schedule.wait_after(5) == 5


def test_offset_shifts_the_phase() -> None:
    schedule = Schedule(trace_of(2, 5, 9, 10), offset_ms=5)
    first = schedule.index_after(0)
    assert [schedule.time_of(k) for k in range(first, first + 5)] == [4, 5, 7, 10, 14]
    # An offset beyond the period wraps: 25 ms into a 10 ms loop is phase 5.
    wrapped = Schedule(trace_of(2, 5, 9, 10), offset_ms=25)
    k = wrapped.index_after(0)
    assert [wrapped.time_of(i) for i in range(k, k + 3)] == [4, 5, 7]


def test_negative_offset_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="offset must be >= 0 ms, got -1"):
        Schedule(trace_of(1), offset_ms=-1)


# --- search path and profiles ----------------------------------------------------------------


def test_search_path_puts_the_environment_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    (second / "x.up").write_text("5\n")
    (second / "synthetic-lte.up").write_text("7\n")
    monkeypatch.setenv(TRACES_ENV, f"{first}{os.pathsep}{os.pathsep}{second}")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert trace_dirs() == [
        first,
        second,
        tmp_path / "data" / "planfence" / "traces",
        PROJECT_TRACES,
    ]
    assert find_trace("x.up") == second / "x.up"
    assert find_trace("synthetic-lte.up") == second / "synthetic-lte.up"
    assert load_trace("synthetic-lte.up").timestamps == (7,)


def test_user_and_project_folders_are_searched_without_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TRACES_ENV, raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert trace_dirs() == [tmp_path / ".local" / "share" / "planfence" / "traces", PROJECT_TRACES]
    assert PROJECT_TRACES == REPO / "traces"
    assert find_trace("synthetic-lte.down") == PROJECT_TRACES / "synthetic-lte.down"


def test_missing_trace_lists_folders_and_where_to_get_traces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TRACES_ENV, str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    user = tmp_path / "data" / "planfence" / "traces"
    with pytest.raises(ConfigError) as caught:
        find_trace("Verizon-LTE-short.up")
    assert str(caught.value) == (
        f"trace 'Verizon-LTE-short.up' not found; searched: {tmp_path}, {user}, "
        f"{PROJECT_TRACES}. `planfence traces fetch` downloads the Mahimahi LTE traces into "
        f"{user}; or set PLANFENCE_TRACES to a folder holding them (several folders "
        f"separated by {os.pathsep!r})"
    )


def test_a_relative_xdg_data_home_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", "relative/data")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert user_traces_dir() == tmp_path / ".local" / "share" / "planfence" / "traces"


def test_profiles_are_listed_in_file_order() -> None:
    profiles = list_profiles()
    assert [p.name for p in profiles] == [
        "synthetic-lte",
        "loopback",
        "att-lte",
        "att-lte-2016",
        "tmobile-lte",
        "verizon-lte",
    ]
    assert all(0 <= p.delay_ms <= 40 for p in profiles)
    assert not load_profile("loopback").shaped
    verizon = load_profile("verizon-lte")
    assert (verizon.up, verizon.down, verizon.delay_ms) == (
        "Verizon-LTE-short.up",
        "Verizon-LTE-short.down",
        30,
    )


def test_every_mahimahi_profile_resolves(mahimahi_traces: Path) -> None:
    for profile in list_profiles():
        if profile.shaped:
            assert profile.up is not None and profile.down is not None
            assert load_trace(profile.up).opportunities > 0
            assert load_trace(profile.down).opportunities > 0


def test_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        load_profile("sprint-lte")
    assert str(caught.value) == (
        "unknown profile 'sprint-lte'; known profiles: synthetic-lte, loopback, att-lte, "
        "att-lte-2016, tmobile-lte, verizon-lte"
    )


# --- generator -------------------------------------------------------------------------------


def test_generator_is_reproducible_from_its_seed() -> None:
    assert generate.generate("up", seed=3, seconds=5) == generate.generate("up", seed=3, seconds=5)
    assert generate.generate("up", seed=3, seconds=5) != generate.generate("up", seed=4, seconds=5)
    assert generate.generate("up", seed=3, seconds=5) != generate.generate(
        "down", seed=3, seconds=5
    )


def test_committed_synthetic_traces_equal_a_fresh_generation() -> None:
    for name, text in generate.file_texts().items():
        assert (PROJECT_TRACES / name).read_text(encoding="ascii") == text, name
    assert generate.main(["--check"]) == 0


def test_synthetic_trace_shape() -> None:
    for direction, mean_mbit in generate.MEAN_MBIT.items():
        trace = parse_trace(generate.render(generate.generate(direction)), direction)
        assert trace.period_ms == 60_000
        mbit = trace.opportunities * 1500 * 8 / 60 / 1e6
        assert 0.8 * mean_mbit < mbit < 2 * mean_mbit, (direction, mbit)


def test_check_reports_stale_files(tmp_path: Path) -> None:
    assert generate.main(["--out", str(tmp_path), "--seconds", "2"]) == 0
    assert generate.main(["--out", str(tmp_path), "--seconds", "2", "--check"]) == 0
    assert generate.main(["--out", str(tmp_path), "--seconds", "2", "--seed", "9", "--check"]) == 1


# --- the pure link model ---------------------------------------------------------------------


def one_per_ms() -> Schedule:
    return Schedule(trace_of(1))  # one opportunity at every ms from 1 on


def departures(link: Link, now: int) -> list[tuple[int, int, int]]:
    return [(r.tag, len(r.data), r.departure_ms) for r in link.poll(now)]


def test_full_chunk_uses_exactly_one_opportunity() -> None:
    assert MSS + CHUNK_OVERHEAD == BYTES_PER_OPPORTUNITY
    link = Link(one_per_ms())
    link.push(0, 1, bytes(3 * MSS))
    assert departures(link, 100) == [(1, MSS, 1), (1, MSS, 2), (1, MSS, 3)]


def test_small_chunks_share_one_opportunity() -> None:
    link = Link(Schedule(trace_of(5, 10)))
    for tag in range(9):  # 9 x (100 + 56) = 1404 <= 1504; a tenth does not fit
        link.push(0, tag, bytes(100))
    link.push(0, 9, bytes(100))
    assert departures(link, 100) == [(tag, 100, 5) for tag in range(9)] + [(9, 100, 10)]


def test_chunk_spans_opportunities_and_departs_with_its_last_byte() -> None:
    link = Link(Schedule(trace_of(5, 10, 20)))
    link.push(0, 1, bytes(500))  # 556 of the first opportunity
    link.push(0, 2, bytes(MSS))  # 948 in the first, 556 in the second
    link.push(0, 3, bytes(900))  # 948 of its 956 in the second, the last 8 in the third
    assert departures(link, 100) == [(1, 500, 5), (2, MSS, 10), (3, 900, 20)]


def test_same_connection_bytes_are_coalesced_into_full_chunks() -> None:
    link = Link(Schedule(trace_of(5, 10)))
    link.push(0, 1, bytes(1000))
    link.push(1, 1, bytes(1000))  # fills the waiting chunk to 1448, 552 start a new one
    assert departures(link, 100) == [(1, MSS, 5), (1, 552, 10)]
    assert link.statistics().queue_delay_max_ms == 9  # the second chunk arrived at 1


def test_unused_bytes_of_an_opportunity_are_lost() -> None:
    link = Link(Schedule(trace_of(5, 10)))
    link.push(0, 1, bytes(100))
    assert departures(link, 5) == [(1, 100, 5)]  # 1348 bytes of ms 5 are wasted
    link.push(6, 1, bytes(100))
    assert departures(link, 9) == []
    assert departures(link, 10) == [(1, 100, 10)]


def test_only_opportunities_strictly_after_arrival_are_used() -> None:
    link = Link(Schedule(trace_of(5, 5, 10)))
    link.push(5, 1, bytes(10))  # both opportunities at ms 5 are not after the arrival
    assert departures(link, 9) == []
    assert departures(link, 10) == [(1, 10, 10)]
    link.push(10, 2, bytes(10))  # ms 10 was half used: still not usable by a later arrival
    assert link.next_event_ms() == 15
    assert departures(link, 15) == [(2, 10, 15)]


def test_late_wake_up_serves_every_passed_opportunity_in_one_batch() -> None:
    link = Link(one_per_ms(), delay_ms=3)
    link.push(0, 1, bytes(10 * MSS))
    assert link.next_event_ms() == 1 + 3
    releases = link.poll(50)  # the timer fired 46 ms late
    assert [(r.departure_ms, r.release_ms) for r in releases] == [(k, k + 3) for k in range(1, 11)]
    assert link.queued_bytes == 0 and link.next_event_ms() is None


def test_release_is_departure_plus_delay_and_waits_for_it() -> None:
    link = Link(Schedule(trace_of(4)), delay_ms=20)
    link.push(2, 1, b"ping")
    assert link.next_event_ms() == 24
    assert link.poll(23) == []
    (release,) = link.poll(24)
    assert (release.data, release.arrival_ms, release.departure_ms, release.release_ms) == (
        b"ping",
        2,
        4,
        24,
    )


def test_end_of_stream_follows_the_data() -> None:
    link = Link(Schedule(trace_of(1)))
    link.push(0, 1, bytes(2000))
    link.push_eof(0, 1)
    assert [len(r.data) for r in link.poll(10)] == [MSS, 552, 0]


def test_without_schedule_only_delay_applies() -> None:
    link = Link(None, delay_ms=7)
    link.push(3, 1, bytes(100_000))
    assert link.next_event_ms() == 10
    assert sum(len(r.data) for r in link.poll(10)) == 100_000


def test_seeded_loss_is_reproducible_and_keeps_order() -> None:
    def run(seed: int) -> list[tuple[int, bool]]:
        link = Link(one_per_ms(), delay_ms=10, loss=0.3, rng=random.Random(seed))
        link.push(0, 1, bytes(40 * MSS))
        return [(r.release_ms, r.lost) for r in link.poll(10_000)]

    first = run(5)
    assert first == run(5) and first != run(6)
    assert any(lost for _, lost in first)
    releases = [ms for ms, _ in first]
    assert releases == sorted(releases)  # head-of-line blocking, never reordered
    first_lost = next(i for i, (_, lost) in enumerate(first) if lost)
    assert releases[first_lost] == first_lost + 1 + 10 + 200  # penalty max(200, 2 x delay)


def test_statistics_count_bytes_and_queueing_delay() -> None:
    link = Link(one_per_ms())
    link.push(0, 1, bytes(4 * MSS))
    link.poll(100)
    stats = link.statistics()
    assert (stats.bytes_in, stats.bytes_out, stats.chunks_out) == (4 * MSS, 4 * MSS, 4)
    assert (stats.queue_delay_mean_ms, stats.queue_delay_median_ms, stats.queue_delay_max_ms) == (
        2.5,
        2.5,
        4,
    )
    assert (stats.queued_bytes, stats.queued_bytes_max) == (0, 4 * MSS)


def test_time_must_not_go_backwards() -> None:
    link = Link(one_per_ms())
    link.poll(10)
    with pytest.raises(ValueError, match="time went backwards: 9 < 10"):
        link.push(9, 1, b"x")


def test_the_core_never_imports_anyio() -> None:
    code = (
        "import sys\n"
        "import planfence_net.traces, planfence_net.traces.link, planfence_net.traces.generate\n"
        "assert 'anyio' not in sys.modules, 'anyio imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_rephase_replays_the_trace_from_the_new_phase() -> None:
    trace = Trace("t", (10, 20, 500, 1000))
    link = Link(Schedule(trace), delay_ms=0)
    link.rephase(100, 480)  # at shaper time 100 the trace is at 480: next opportunity 500
    link.push(100, 1, b"x")
    assert link.next_event_ms() == 120
    assert [(r.tag, r.departure_ms) for r in link.poll(120)] == [(1, 120)]
    link.rephase(130, 0)  # back to the trace start: 10 ms to the next opportunity
    link.push(130, 1, b"y")
    assert [r.departure_ms for r in link.poll(200)] == [140]


def test_usable_phases_avoid_outages() -> None:
    from planfence_net.bench.paper import network

    gap = Trace("gappy", tuple(range(0, 20_000, 10)) + tuple(range(30_000, 60_001, 10)))
    draw = random.Random(1)
    phases = [network.usable_phase([gap], draw) for _ in range(200)]
    # the outage is 20 000..30 000 ms: no phase may see it within the next WINDOW_MS
    assert all(not 20_000 - network.WINDOW_MS < p < 30_000 for p in phases)
    assert min(phases) < 5_000 and max(phases) > 50_000
