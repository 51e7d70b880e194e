"""Link profiles (`traces/profiles.toml`) and the trace search path.

A profile names an uplink trace (shapes client -> upstream), a downlink trace (upstream ->
client) and a default one-way delay. A profile without traces (`loopback`) has no bottleneck.

Trace files are found by name on a search path: the folders in `PLANFENCE_TRACES`
(`os.pathsep`-separated), then the user's data folder (where `planfence traces fetch` puts
them), then the project's own `traces/` folder. A name containing a path separator is used as
a path as given. Mahimahi's traces are GPL data and are never shipped; the project's
generated `synthetic-lte` traces are.
"""

from __future__ import annotations

import functools
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from planfence_net.core.errors import ConfigError
from planfence_net.defaults import data_dir
from planfence_net.traces.mmlink import Trace, read_trace

TRACES_ENV = "PLANFENCE_TRACES"
# where `planfence traces fetch` gets the traces (here: its --help names it without urllib)
MAHIMAHI_URL = "https://raw.githubusercontent.com/ravinet/mahimahi/master/traces/"
PROJECT_TRACES = data_dir("traces")  # the project's traces/, carried in the wheel
PROFILES_FILE = PROJECT_TRACES / "profiles.toml"
_PROFILE_KEYS = {"description", "up", "down", "delay_ms"}


@dataclass(frozen=True, slots=True)
class Profile:
    """A link profile. `up`/`down` are trace names (or paths); both None means no bottleneck."""

    name: str
    description: str
    up: str | None
    down: str | None
    delay_ms: int

    @property
    def shaped(self) -> bool:
        """True when the profile replays traces (False for `loopback`)."""
        return self.up is not None


def user_traces_dir() -> Path:
    """The user's trace folder: $XDG_DATA_HOME/planfence/traces, by default under
    ~/.local/share (a relative XDG_DATA_HOME is ignored, as the XDG spec says)."""
    data_home = os.environ.get("XDG_DATA_HOME", "")
    base = Path(data_home) if os.path.isabs(data_home) else Path.home() / ".local" / "share"
    return base / "planfence" / "traces"


def trace_dirs() -> list[Path]:
    """The folders searched for trace files, in order: $PLANFENCE_TRACES, the user's trace
    folder (`user_traces_dir`), then the project's `traces/`."""
    extra = os.environ.get(TRACES_ENV, "")
    return [Path(part) for part in extra.split(os.pathsep) if part] + [
        user_traces_dir(),
        PROJECT_TRACES,
    ]


def find_trace(name: str) -> Path:
    """Path of the trace `name`; ConfigError listing the folders searched when it is missing."""
    if os.sep in name or (os.altsep and os.altsep in name):
        path = Path(name)
        if path.is_file():
            return path
        raise ConfigError(f"trace file {name} not found")
    folders = trace_dirs()
    for folder in folders:
        candidate = folder / name
        if candidate.is_file():
            return candidate
    searched = ", ".join(str(folder) for folder in folders)
    raise ConfigError(
        f"trace {name!r} not found; searched: {searched}. `planfence traces fetch` downloads "
        f"the Mahimahi LTE traces into {user_traces_dir()}; or set {TRACES_ENV} to a folder "
        f"holding them (several folders separated by {os.pathsep!r})"
    )


def load_trace(name: str) -> Trace:
    """Find and parse the trace `name` (see `find_trace`); parsed files are cached."""
    path = find_trace(name).resolve()
    stat = path.stat()
    return _read_cached(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _read_cached(path: Path, mtime_ns: int, size: int) -> Trace:
    return read_trace(path)


def list_profiles() -> list[Profile]:
    """All profiles of `traces/profiles.toml`, in file order; ConfigError if it is invalid."""
    return list(_profiles(PROFILES_FILE).values())


def load_profile(name: str) -> Profile:
    """The profile called `name`; ConfigError naming the known profiles if there is none."""
    profiles = _profiles(PROFILES_FILE)
    try:
        return profiles[name]
    except KeyError:
        known = ", ".join(profiles)
        raise ConfigError(f"unknown profile {name!r}; known profiles: {known}") from None


def require_traces(name: str) -> Profile:
    """The profile called `name`, after checking that its trace files can be found.

    Raises ConfigError for an unknown profile or a missing trace (saying where it looked),
    so a command can fail before it starts any process.
    """
    profile = load_profile(name)
    for trace in (profile.up, profile.down):
        if trace is not None:
            find_trace(trace)
    return profile


def _profiles(path: Path) -> dict[str, Profile]:
    try:
        with path.open("rb") as file:
            document = tomllib.load(file)
    except OSError as exc:
        raise ConfigError(f"cannot read profiles file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"bad profiles file {path}: {exc}") from exc
    return {name: _profile(path, name, table) for name, table in document.items()}


def _profile(path: Path, name: str, table: object) -> Profile:
    where = f"bad profiles file {path}, profile {name!r}"
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table [{name}]")
    unknown = sorted(set(table) - _PROFILE_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {', '.join(unknown)}")
    up, down = table.get("up"), table.get("down")
    if (up is None) != (down is None) or not all(
        v is None or isinstance(v, str) for v in (up, down)
    ):
        raise ConfigError(f"{where}: give both 'up' and 'down' trace names, or neither")
    delay = table.get("delay_ms", 0)
    if isinstance(delay, bool) or not isinstance(delay, int) or delay < 0:
        raise ConfigError(f"{where}: delay_ms must be an integer >= 0")
    description = table.get("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"{where}: description must be a string")
    return Profile(name=name, description=description, up=up, down=down, delay_ms=delay)
