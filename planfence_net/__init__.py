"""planfence-net: dependency-scoped plan validation for teams of LLM agents.

The library's public API is the names in `__all__`, importable from here:

    from planfence_net import Action, ClusterDir, GateRunner, Replica, SessionPool, put_record

Each is imported on first use (PEP 562 `__getattr__`), so `import planfence_net` and the
`planfence` command's start-up load none of the library until a name is asked for. Anything
else is internal and may move between releases.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing`'s: the hook's fast path imports this package, not typing

__version__ = "0.1.0"

# public name -> the module (under planfence_net) that defines it
_HOMES = {
    # records, the roster, identities and errors (no I/O)
    "Record": "core.records",
    "make_record": "core.records",
    "Roster": "core.roster",
    "Agent": "core.roster",
    "Identity": "core.identity",
    "load_identity": "core.identity",
    "PlanfenceError": "core.errors",
    "ConfigError": "core.errors",
    "RecordError": "core.errors",
    "TransportError": "core.errors",
    "RequestError": "core.errors",
    # the gate: a state machine with no I/O
    "Action": "core.gate",
    "Gate": "core.gate",
    "GatePolicy": "core.gate",
    "Decision": "core.decision",
    # talking to owners
    "open_session": "net.client",
    "put_record": "net.api",
    "get_records": "net.api",
    "query_heads": "net.api",
    # a cluster folder made by `planfence cluster init`
    "ClusterDir": "cluster.folder",
    # an executor: sessions, local records, the gate driven over the network
    "SessionPool": "executor.pool",
    "Replica": "executor.replica",
    "GateRunner": "executor.runner",
}

__all__ = [  # each name's home is in _HOMES
    "Action",
    "Agent",
    "ClusterDir",
    "ConfigError",
    "Decision",
    "Gate",
    "GatePolicy",
    "GateRunner",
    "Identity",
    "PlanfenceError",
    "Record",
    "RecordError",
    "Replica",
    "RequestError",
    "Roster",
    "SessionPool",
    "TransportError",
    "get_records",
    "load_identity",
    "make_record",
    "open_session",
    "put_record",
    "query_heads",
]

if TYPE_CHECKING:  # for type checkers and editors; at run time each name loads on first use
    from typing import Any

    from .cluster.folder import ClusterDir
    from .core.decision import Decision
    from .core.errors import (
        ConfigError,
        PlanfenceError,
        RecordError,
        RequestError,
        TransportError,
    )
    from .core.gate import Action, Gate, GatePolicy
    from .core.identity import Identity, load_identity
    from .core.records import Record, make_record
    from .core.roster import Agent, Roster
    from .executor.pool import SessionPool
    from .executor.replica import Replica
    from .executor.runner import GateRunner
    from .net.api import get_records, put_record, query_heads
    from .net.client import open_session


def __getattr__(name: str) -> Any:
    """Import the public `name` from its module on first use; AttributeError otherwise."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'planfence_net' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value  # the next lookup is an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
