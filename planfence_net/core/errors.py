"""The one exception tree of planfence-net.

    PlanfenceError
    ├── ConfigError              a roster, key file, profile or trace file is unusable
    ├── ProtocolError            something on the wire broke the protocol
    │   ├── LocalProtocolError   we were asked to send something invalid (our bug or our caller's)
    │   └── RemoteProtocolError  the peer sent something invalid (malformed frame, message, record)
    │       └── HandshakeError   the Noise handshake failed or the peer is not in the roster
    ├── RecordError              a record failed verification (id, signature or ownership)
    ├── RequestError             an owner answered a request with a typed error (code, message)
    ├── StoreError               an owner's store is damaged, in use, lost records or is full
    ├── StartError               a process this machine started (an owner, a shaper) did not come up
    └── TransportError           the connection failed: refused, reset, closed or timed out

Exceptions of anyio, sockets and PyNaCl are translated into these at the edge (`transport`,
`noise`, `records`); callers above those modules never see them.
"""

from __future__ import annotations


class PlanfenceError(Exception):
    """Base of every error planfence-net raises on purpose."""


class ConfigError(PlanfenceError):
    """A roster, key file, profile or trace file cannot be used; the message says which and why."""


class ProtocolError(PlanfenceError):
    """The wire protocol was broken."""


class LocalProtocolError(ProtocolError):
    """We were asked to send something the protocol forbids (too large, wrong state)."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol forbids."""


class HandshakeError(RemoteProtocolError):
    """The Noise handshake failed: bad message, failed decryption or a peer not in the roster."""


class RecordError(PlanfenceError):
    """A record failed verification. `what` names the failed check: id, signature, owner, format."""

    def __init__(self, what: str, message: str) -> None:
        super().__init__(message)
        self.what = what


class RequestError(PlanfenceError):
    """An owner refused a request with a typed error."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class StoreError(PlanfenceError):
    """An owner's store cannot be used, or cannot do what was asked. `code` says why:

    `store_damaged`       the file fails its integrity check, or a record no longer hashes to
                          its id (the owner refuses to start, or refuses to serve that record)
    `store_in_use`        another daemon holds the store (the message names its pid)
    `store_lost_records`  the store lacks acknowledged records (its seqs end below the mark)
    `store_full`          the disk is full: nothing was stored
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class StartError(PlanfenceError):
    """A process this machine started did not come up; `process` names it (an agent's owner,
    or a shaper), the message says why."""

    def __init__(self, process: str, message: str) -> None:
        super().__init__(message)
        self.process = process


class TransportError(PlanfenceError):
    """The connection to a peer failed or was closed."""


def collapse(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one error a task group's exception group stands for.

    Task groups wrap failures in (nested) exception groups. When every leaf is a
    PlanfenceError the first one is returned, so callers see one planfence error; otherwise
    the group itself is returned unchanged (an unexpected error must stay loud).
    """
    leaves: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        exc = stack.pop(0)
        if isinstance(exc, BaseExceptionGroup):
            stack.extend(exc.exceptions)
        else:
            leaves.append(exc)
    if leaves and all(isinstance(leaf, PlanfenceError) for leaf in leaves):
        return leaves[0]
    return group
