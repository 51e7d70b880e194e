"""A session's read set through one MCP server, and the decision on a write (pure).

Every resource or read-tool answer the agent saw is a fact its next write may rest on. Before
a write call reaches the server, the proxy reads each fact again (a subscription's notice
comes after the change, so it never stands in for that read) and decides:

- nothing the session read has changed: the write goes ahead;
- something changed: the write is refused, naming what to read again; reading it again
  through the proxy takes the new version into the read set (the session's one replan);
- something changed again after the session re-read it following a refusal: refused for
  good, with "stop and report", as the paper's rule allows one replan.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Fact:
    digest: str
    replanned: bool = False  # taken in after a refusal: a second change stops the session


@dataclass(frozen=True, slots=True)
class WriteDecision:
    """`allowed`, or the reason (one paragraph for the model) and the keys that drifted."""

    allowed: bool
    reason: str
    drifted: tuple[str, ...] = ()
    changed_again: bool = False


@dataclass
class ReadSet:
    """The facts one session read through one server, by key (`resource/URI`, `tool/...`)."""

    server: str
    facts: dict[str, Fact] = field(default_factory=dict)
    refused_on: set[str] = field(default_factory=set)  # keys a refusal asked to re-read

    def observed(self, key: str, digest: str) -> None:
        """The session read `key` and saw `digest` (a re-read after a refusal is its replan)."""
        replanned = key in self.refused_on or (key in self.facts and self.facts[key].replanned)
        self.refused_on.discard(key)
        self.facts[key] = Fact(digest, replanned=replanned)

    def to_reread(self) -> list[str]:
        """The keys a write check reads again: all of them. A subscription's notification
        arrives some time after the change, so it moves the owner's heads for others but
        never stands in for a read at the instant of the check."""
        return list(self.facts)

    def decide(self, tool: str, current: dict[str, str | None]) -> WriteDecision:
        """The decision on write tool `tool`, given the current digest of every key that was
        read again (None: it could not be read, which blocks: the proxy fails closed)."""
        unreadable = sorted(k for k, d in current.items() if d is None and k in self.facts)
        if unreadable:
            return WriteDecision(
                False,
                f"PlanFence refused {tool}: cannot read {self._names(unreadable)} again to "
                f"check it, so the call is blocked (it fails closed). Report this if it persists.",
                tuple(unreadable),
            )
        drifted = sorted(
            k for k, d in current.items() if k in self.facts and d != self.facts[k].digest
        )
        if not drifted:
            return WriteDecision(True, "")
        again = [k for k in drifted if self.facts[k].replanned]
        if again:
            return WriteDecision(
                False,
                f"PlanFence refused {tool}: {self._names(again)} changed again after this "
                f"session read it anew. Stop: do not replan again; report the change to the "
                f"user.",
                tuple(drifted),
                changed_again=True,
            )
        self.refused_on.update(drifted)
        return WriteDecision(
            False,
            f"PlanFence refused {tool}: this session's plan rests on {self._names(drifted)}, "
            f"which changed since it was read. Read it again, re-plan once, then retry; if it "
            f"changes again, stop and report.",
            tuple(drifted),
        )

    def _names(self, keys: list[str]) -> str:
        return ", ".join(f"{self.server}:{key}" for key in keys)
