"""`planfence authorize` as the one-shot process it usually is: no click, anyio or asyncio.

A script or an agent starts `planfence authorize` once per action, so start-up is most of
what it pays. `main` (cli/__init__.py) hands the arguments to `run_authorize` first. When
they are plainly well formed (`parse_authorize`), the decision is made here: the gate driven
by `core.drive`, the loop the executor's runner uses, over the blocking sessions of
`net.syncclient`; printed, and ended with the exit code, as the click command does (same
text, same JSON, same one-line errors). Anything else returns to click, which parses the
arguments and reports as it always did: --help, an unknown, repeated or misplaced option, a
missing or malformed value, an id prefix (looked up in the cluster's stores).

The decision is the runner's, in blocking form: the records of the roots are asked of every
owner, all at once, until the fetch settles (later answers are not waited for); then each
owner of a declared key is asked for its heads; one deadline, `--timeout` seconds after the
start, bounds it all; an owner that cannot be reached blocks with `owner_unavailable`, one
that has not answered by the deadline with `timeout`.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, NoReturn, TextIO

from ..core.timeouts import DEFAULT_TIMEOUT

if TYPE_CHECKING:
    from ..cluster.folder import ClusterDir
    from ..core.decision import Decision
    from ..core.gate import Action
    from ..core.identity import Identity
    from ..core.roster import Roster

VALUED = ("--root", "--dep", "--as", "--name", "--timeout", "--deadline")
REPEATED = ("--root", "--dep")
MIN_TIMEOUT = 0.01  # the click command's --timeout min


class AuthorizeArgs:
    """The arguments of `planfence authorize`, as its click command reads them. (A plain
    class: a dataclass costs this process a millisecond to build.)"""

    __slots__ = ("path", "roots", "deps", "as_agent", "name", "timeout", "json_out")

    def __init__(
        self,
        path: str,
        roots: tuple[bytes, ...],
        deps: tuple[str, ...],
        as_agent: str | None,
        name: str,
        timeout: float,
        json_out: bool,
    ) -> None:
        self.path, self.roots, self.deps, self.as_agent = path, roots, deps, as_agent
        self.name, self.timeout, self.json_out = name, timeout, json_out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AuthorizeArgs) and all(
            getattr(self, name) == getattr(other, name) for name in self.__slots__
        )

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"AuthorizeArgs({fields})"


def parse_authorize(args: list[str]) -> AuthorizeArgs | None:
    """The arguments after `authorize`, or None unless every one is plainly well formed:
    one DIR, `--root` (a full 64-hex id) and `--dep` given at least once, `--as`, `--name`,
    `--timeout` or `--deadline` (a finite number >= 0.01) at most once, `--json` at most
    once; options as `--opt VALUE` or `--opt=VALUE`, no value empty or starting with `-`.
    None sends the arguments to click, whose answer (an error, help) is the command's."""
    values: dict[str, list[str]] = {name: [] for name in VALUED}
    positional: list[str] = []
    json_out = False
    at = 0
    while at < len(args):
        arg = args[at]
        if arg == "--json":
            if json_out:
                return None
            json_out = True
        elif arg.startswith("-"):
            name, eq, value = arg.partition("=")
            if name not in values:
                return None
            if not eq:
                at += 1
                if at == len(args):
                    return None
                value = args[at]
            if not value or value.startswith("-"):
                return None
            values[name].append(value)
        elif arg:
            positional.append(arg)
        else:
            return None
        at += 1
    if len(positional) != 1 or not all(values[name] for name in REPEATED):
        return None
    if any(len(values[name]) > 1 for name in VALUED if name not in REPEATED):
        return None
    roots = [_full_id(text) for text in values["--root"]]
    timeouts = [_seconds(text) for text in values["--timeout"] + values["--deadline"]]
    if None in roots or None in timeouts:
        return None
    deadline, timeout = values["--deadline"], values["--timeout"]
    return AuthorizeArgs(
        positional[0],
        tuple(r for r in roots if r is not None),
        tuple(values["--dep"]),
        values["--as"][0] if values["--as"] else None,
        values["--name"][0] if values["--name"] else "action",
        float(deadline[0]) if deadline else float(timeout[0]) if timeout else DEFAULT_TIMEOUT,
        json_out,
    )


def _full_id(text: str) -> bytes | None:
    """A record id from 64 hex digits; None for anything else (a prefix, looked up in the
    stores, or no id at all: click's to handle)."""
    if len(text) != 64:
        return None
    try:
        rid = bytes.fromhex(text)
    except ValueError:
        return None
    return rid if len(rid) == 32 else None  # fromhex skips whitespace


def _seconds(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    # click's FloatRange(min=0.01) takes inf and nan: left to it, as is anything below min
    return value if MIN_TIMEOUT <= value < float("inf") else None


def run_authorize(args: list[str]) -> None:
    """Decide, print and exit (no interpreter teardown) when `parse_authorize(args)` reads
    them and the standard streams are ones click would write to as they are; otherwise
    return, for click to run the command."""
    parsed = parse_authorize(args)
    if parsed is None or not _plain_streams():
        return
    import gc

    gc.disable()  # a short-lived process: no cyclic collection while it imports
    from ..protocol.noise import few_messages

    few_messages()  # a few messages: PyNaCl's ChaChaPoly, no `cryptography` import
    _exit(authorize(parsed))


def _plain_streams() -> bool:
    """False when stdout or stderr is missing or ASCII-encoded (click rewraps those)."""
    import codecs

    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        if stream is None or not encoding:
            return False
        try:
            if codecs.lookup(encoding).name == "ascii":
                return False
        except LookupError:
            return False
    return True


def authorize(args: AuthorizeArgs) -> int:
    """What `planfence authorize` prints and its exit code: 0 authorized, 2 stale plan, 3
    blocked for another reason, 1 with `error: ...` on stderr for a PlanfenceError (a
    missing cluster folder, an unknown --as, ...), 1 with `Aborted!` on Ctrl-C or EOF, 1
    when stdout is a closed pipe."""
    from ..core.errors import PlanfenceError

    try:
        try:
            decision = decide_once(args)
        except PlanfenceError as exc:
            from ..core.escaping import escape

            _write(sys.stderr, f"error: {escape(str(exc))}\n")
            return 1
        if args.json_out:
            from .text import json_text

            _write(sys.stdout, json_text(decision.to_json()) + "\n")
        else:
            from .text import escaped_lines

            _write(sys.stdout, escaped_lines(decision.explain()) + "\n")
            if decision.reason == "stale_plan":  # the next command, as the click one prints
                from pathlib import Path

                from .text import stale_next_step

                _write(
                    sys.stdout,
                    escaped_lines(stale_next_step(str(Path(args.path)), [*decision.drift])) + "\n",
                )
    except (EOFError, KeyboardInterrupt):
        _write(sys.stderr, "\nAborted!\n")
        return 1
    except BrokenPipeError:
        return 1
    if decision.authorized:
        return 0
    from ..core.decision import STALE_PLAN

    return 2 if decision.reason == STALE_PLAN else 3


def decide_once(args: AuthorizeArgs) -> Decision:
    """Read the cluster folder as the click command does, decide (module docstring) and
    append the decision to the executor's decision log (`executor.decisionlog`), as the click
    command does."""
    from pathlib import Path

    from ..cluster.folder import ClusterDir
    from ..core.gate import Action

    cdir = ClusterDir(Path(args.path))
    roster = cdir.roster()
    identity = cdir.identity(args.as_agent or roster.agents[0].name)
    action = Action(args.name, args.roots, args.deps)
    decision = decide(roster, identity, action, _link_addresses(cdir), args.timeout)
    from ..executor.decisionlog import DecisionLog  # the click command's log, as it writes it

    log = DecisionLog.in_folder(cdir.root, identity.name, roster.owner_of)
    log.write(decision, args.roots)
    log.close()
    return decision


def _link_addresses(cdir: ClusterDir) -> dict[str, tuple[str, int]]:
    """`cluster.processes.link_addresses(cdir)`: where to reach each owner. Without a static
    `links.toml` and without `run/links.toml` (no shaper ever started) it is every owner's
    roster address ({}), known without importing what starting processes needs."""
    if not (cdir.root / "links.toml").exists() and not (cdir.root / "run" / "links.toml").exists():
        return {}
    from ..cluster.processes import link_addresses

    return link_addresses(cdir)


def decide(
    roster: Roster,
    identity: Identity,
    action: Action,
    addresses: dict[str, tuple[str, int]],
    timeout: float,
) -> Decision:
    """`GateRunner.wait_decision(action)` of a fresh runner (no replan hook, a memory-only
    replica), on blocking sessions, within `timeout` seconds (`executor.syncrunner`)."""
    from ..core.answers import verifier
    from ..core.gate import GatePolicy, Replan
    from ..core.lineage import WalkCache
    from ..core.records import Record
    from ..executor.syncrunner import drive_gate
    from ..net.syncclient import SyncSessions

    sessions = SyncSessions(roster, identity, addresses)
    records: dict[bytes, Record] = {}

    def replan(event: Replan) -> tuple[bytes, ...]:
        return action.roots  # never asked: the policy blocks a drift instead

    try:
        decision, _ = drive_gate(
            action,
            roster,
            sessions,
            records,
            verifier(roster),
            time.monotonic() + timeout,
            holders=roster.names,
            replan=replan,
            policy=GatePolicy(replan=False),
            walks=WalkCache(),
            settle_early=True,
            count_traffic=True,
        )
        return decision
    finally:
        sessions.close()


def _write(stream: TextIO, text: str) -> None:
    stream.write(text)
    stream.flush()  # as click.echo does


def _exit(code: int) -> NoReturn:
    """Exit with `code` once the output is out, without interpreter teardown (threads a
    settled fetch stopped waiting for may still hold a socket)."""
    import os

    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # click exits 1 when its output cannot be written
        code = 1
    os._exit(code)
