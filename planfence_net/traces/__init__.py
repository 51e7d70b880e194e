"""Trace-driven link shaping: Mahimahi traces, link profiles and the TCP shaper relay.

Sans-IO core (no anyio, no clock): `mmlink` (trace files, looping schedule), `link` (one
direction of a shaped link), `profiles` (profiles and the trace search path), `generate` (the
project's synthetic traces). The async relay is `shaper`; `serve_shaper` is re-exported here
lazily so that importing the core never imports anyio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from planfence_net.traces.mmlink import Schedule, Trace, parse_trace, read_trace
from planfence_net.traces.profiles import (
    Profile,
    find_trace,
    list_profiles,
    load_profile,
    load_trace,
    require_traces,
    trace_dirs,
)

if TYPE_CHECKING:
    from planfence_net.traces.shaper import Shaper, ShaperStatistics, serve_shaper

__all__ = [
    "Profile",
    "Schedule",
    "Shaper",
    "ShaperStatistics",
    "Trace",
    "find_trace",
    "list_profiles",
    "load_profile",
    "load_trace",
    "parse_trace",
    "read_trace",
    "require_traces",
    "serve_shaper",
    "trace_dirs",
]

_ASYNC_NAMES = {"Shaper", "ShaperStatistics", "serve_shaper"}


def __getattr__(name: str) -> Any:
    if name in _ASYNC_NAMES:  # the relay loads anyio: only its users pay for it
        from planfence_net.traces import shaper

        return getattr(shaper, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
