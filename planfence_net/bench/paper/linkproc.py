"""The bench's links in a process of their own, so the harness's CPU is not link delay.

    links = LinkProcess(cdir.roster_path, model, seed, wired)
    await links.start(tg)                       # spawns the shapers' process, reads its routes
    pool = SessionPool(..., links.addresses_of("ops"))
    await links.rephase("safety/res-00/a3", policy)   # before each action's timed span

The child (`python -m planfence_net.bench.paper.linkproc`) runs every agent's access link
(`network.Network`: the same routes, trace phases and delays) in its own event loop. They
talk over its stdin and stdout, one JSON object per line: the parent sends the configuration,
the child answers `{"routes": {agent: {peer: [host, port]}}}` once every shaper listens; each
`{"rephase": [action, policy]}` is answered `{"ok": true}` once every link is re-anchored (the
parent waits for it, outside the stall). The child exits when its stdin closes, so it never
outlives the harness; `start`'s task group terminates it when cancelled.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process, TaskGroup
from anyio.streams.buffered import BufferedByteReceiveStream

from ...core.errors import ConfigError
from ...core.roster import load_roster
from ...traces.profiles import Profile
from ..policies.policy import Addresses
from .network import LinkModel, Network

MAX_LINE = 1 << 20


class LinkProcess:
    """The parent's handle on the links' process; the same interface as `Network`."""

    def __init__(
        self, roster_path: Path, model: LinkModel, seed: int, wired: frozenset[str] = frozenset()
    ) -> None:
        self.config = {
            "roster": str(roster_path),
            "profile": dataclasses.asdict(model.profile),
            "phases": model.phases,
            "seed": seed,
            "wired": sorted(wired),
        }
        self.routes: dict[str, Addresses] = {}
        self.process: Process | None = None
        self.lines: BufferedByteReceiveStream | None = None
        self.lock = anyio.Lock()

    async def start(self, tg: TaskGroup) -> None:
        """Spawn the child and wait for its routes; it is terminated when `tg` is cancelled.
        Raises ConfigError if the child cannot start its links."""
        self.process = await anyio.open_process(
            [sys.executable, "-m", "planfence_net.bench.paper.linkproc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
        )
        tg.start_soon(self._reap)
        assert self.process.stdout is not None
        self.lines = BufferedByteReceiveStream(self.process.stdout)
        answer = await self._ask(self.config)
        routes = answer.get("routes")
        if not isinstance(routes, dict):
            raise ConfigError(f"the links' process did not start: {answer.get('error', answer)}")
        self.routes = {
            agent: {peer: (host, int(port)) for peer, (host, port) in peers.items()}
            for agent, peers in routes.items()
        }

    async def _reap(self) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                if self.process is not None:
                    if self.process.returncode is None:
                        self.process.terminate()
                    await self.process.aclose()

    async def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.process is not None and self.process.stdin is not None
        assert self.lines is not None
        async with self.lock:
            await self.process.stdin.send(json.dumps(message).encode() + b"\n")
            try:
                line = await self.lines.receive_until(b"\n", MAX_LINE)
            except (anyio.EndOfStream, anyio.IncompleteRead):
                raise ConfigError("the links' process exited") from None
        answer: dict[str, Any] = json.loads(line)
        return answer

    def addresses_of(self, agent: str) -> Addresses:
        """Where `agent` reaches the others through the links (a wired agent: directly)."""
        return self.routes.get(agent, {})

    async def rephase(self, action: str, policy: str) -> None:
        """Re-anchor every link for `action`; returns once the child has."""
        answer = await self._ask({"rephase": [action, policy]})
        if answer.get("ok") is not True:
            raise ConfigError(f"the links' process refused a rephase: {answer}")


async def serve(stdin: Any = None) -> None:
    """The child: read the configuration, start the links, answer rephase requests until
    stdin closes."""
    stdin = stdin or sys.stdin

    def reply(message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    config = json.loads(await anyio.to_thread.run_sync(stdin.readline) or "{}")
    try:
        roster = load_roster(Path(config["roster"]))
        model = LinkModel(Profile(**config["profile"]), config["phases"])
    except (KeyError, TypeError, ConfigError) as exc:
        reply({"error": f"bad configuration: {exc}"})
        return
    async with anyio.create_task_group() as tg:
        network = Network(roster, model, int(config["seed"]), frozenset(config["wired"]))
        await network.start(tg)
        reply({"routes": network.routes})
        while line := await anyio.to_thread.run_sync(stdin.readline):
            action, policy = json.loads(line)["rephase"]
            await network.rephase(action, policy)
            reply({"ok": True})
        tg.cancel_scope.cancel()


def main() -> None:
    anyio.run(serve, backend="asyncio")


if __name__ == "__main__":
    main()
