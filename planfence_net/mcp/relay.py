"""The MCP relay as a machine without I/O: what passes between an agent and an MCP server.

`planfence mcp proxy` sits between an agent (its MCP client, on the proxy's stdin/stdout) and
the real MCP server (a child process). Both sides speak JSON-RPC 2.0, one message per line
(MCP's stdio transport). The relay reads every line, forwards it unchanged, and notices what
matters to PlanFence:

- the result of a `resources/read` the agent asked for: `Observed` (the resource's key,
  content digest, MIME type and size), so the read joins the session's read set;
- the result of a `tools/call` of a tool configured as a read: `Observed` the same way;
- a `tools/call` of a tool configured as a write (by default every tool not configured as a
  read): held back as `CheckWrite` until the I/O layer says `allow` or `refuse`; a refusal
  answers the agent with an MCP tool error carrying the reason, and the server never sees the
  call;
- `notifications/resources/updated` from the server: `Changed`.

The I/O layer can also read a resource or call a read tool itself (`reread`), under request
ids of its own that never reach the agent (`Reread` carries the answer back).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]
_INTERNAL = "planfence-"  # prefix of the ids of the relay's own requests


@dataclass(frozen=True, slots=True)
class ToServer:
    line: bytes
    request: str = ""  # the id of the relay's own request on this line, if it is one


@dataclass(frozen=True, slots=True)
class ToClient:
    line: bytes


@dataclass(frozen=True, slots=True)
class Observed:
    """The agent read `key` (`resource/URI` or `tool/NAME/ARGS-DIGEST`) and saw `digest`."""

    key: str
    digest: str
    mime: str | None
    size: int


@dataclass(frozen=True, slots=True)
class CheckWrite:
    """The agent calls write tool `tool`; answer with `Relay.allow(token)` or `refuse`."""

    token: int
    tool: str
    arguments: Any


@dataclass(frozen=True, slots=True)
class Changed:
    """The server says the resource `uri` changed (`notifications/resources/updated`)."""

    uri: str


@dataclass(frozen=True, slots=True)
class Reread:
    """The answer to the relay's own read of `key`: its digest, or None when it failed."""

    key: str
    digest: str | None
    mime: str | None
    size: int
    error: str | None
    request: str = ""  # the id of the relay's request it answers


@dataclass(frozen=True, slots=True)
class Subscribed:
    """The server answered the relay's own `resources/subscribe` for `uri`."""

    uri: str
    ok: bool


Event = ToServer | ToClient | Observed | CheckWrite | Changed | Reread | Subscribed


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """Which tools are reads (recorded, never checked) and which are writes (checked).

    A tool matching neither pattern is a write: an MCP tool PlanFence knows nothing about
    is checked rather than let through."""

    reads: str = r"(?!)"  # matches nothing
    writes: str = r".*"

    def kind(self, tool: str) -> str:
        """`read` or `write`."""
        if re.fullmatch(self.reads, tool):
            return "read"
        return "write"


def digest_of(value: Any) -> str:
    """BLAKE2b-256 hex of `value` as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.blake2b(text.encode(), digest_size=32).hexdigest()


def tool_key(tool: str, arguments: Any) -> str:
    """The key of a read tool's answer: `tool/NAME/ARGS-DIGEST` (16 hex digits)."""
    return f"tool/{tool}/{digest_of(arguments)[:16]}"


def resource_key(uri: str) -> str:
    return f"resource/{uri}"


@dataclass
class Relay:
    """One agent session's relay. Feed lines with `from_client` / `from_server`; each returns
    the events to carry out, in order."""

    policy: ToolPolicy = field(default_factory=ToolPolicy)
    _asked: dict[Any, tuple[str, Any]] = field(default_factory=dict)  # agent's open requests
    _held: dict[int, Message] = field(default_factory=dict)  # write calls being checked
    _mine: dict[str, str] = field(default_factory=dict)  # our request id -> key
    _how: dict[str, tuple[str, Any]] = field(default_factory=dict)  # key -> how it was read
    _agent_subscribed: set[str] = field(default_factory=set)  # URIs the agent subscribed to
    _next: int = 0
    server_subscribes: bool = False  # the server offers resources/subscribe (from initialize)

    def from_client(self, line: bytes) -> list[Event]:
        """A line the agent sent. Forwarded unless it is a write call (then CheckWrite).

        The server is sent the message as the relay read it (re-encoded), never bytes the
        relay could not read: a line that is not JSON is answered with a parse error, and a
        batch (a JSON array, from older protocol versions) is taken apart and each message
        relayed on its own, so a write call cannot hide in one."""
        try:
            value = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return [ToClient(_error(None, -32700, "Parse error: the line is not JSON"))]
        if isinstance(value, list):
            return [e for item in value for e in self.from_client(_line(item))]
        if not isinstance(value, dict):
            return [ToClient(_error(None, -32600, "Invalid Request: not a JSON object"))]
        message: Message = value
        if "method" not in message or "id" not in message:
            return [ToServer(_line(message))]  # a notification, or an answer to the server
        method, params = message["method"], message.get("params")
        if method in ("resources/subscribe", "resources/unsubscribe") and isinstance(params, dict):
            uri = params.get("uri")
            if isinstance(uri, str):
                (
                    self._agent_subscribed.add
                    if method == "resources/subscribe"
                    else self._agent_subscribed.discard
                )(uri)
        if method == "tools/call" and isinstance(params, dict):
            tool = params.get("name")
            if not isinstance(tool, str):
                return [ToClient(_error(message["id"], -32602, "tools/call without a name"))]
            if self.policy.kind(tool) == "write":
                self._next += 1
                self._held[self._next] = message
                return [CheckWrite(self._next, tool, params.get("arguments"))]
        self._asked[_id_key(message["id"])] = (method, params)
        return [ToServer(_line(message))]

    def allow(self, token: int) -> list[Event]:
        """Forward the held write call `token`."""
        message = self._held.pop(token)
        self._asked[_id_key(message["id"])] = (message["method"], message.get("params"))
        return [ToServer(_line(message))]

    def refuse(self, token: int, reason: str) -> list[Event]:
        """Answer the held write call `token` with a tool error carrying `reason`."""
        message = self._held.pop(token)
        result = {"content": [{"type": "text", "text": reason}], "isError": True}
        return [ToClient(_line({"jsonrpc": "2.0", "id": message["id"], "result": result}))]

    def reread(self, key: str) -> ToServer:
        """The request that reads `key` again, as the agent read it, for the relay itself.
        Raises KeyError for a key the agent has not read through this relay."""
        method, params = self._how[key]
        return self._own(method, params, key)

    def subscribe(self, uri: str) -> ToServer:
        """The relay's own `resources/subscribe` for `uri` (answered with `Subscribed`)."""
        return self._own("resources/subscribe", {"uri": uri}, "subscribe:" + uri)

    def _own(self, method: str, params: Any, purpose: str) -> ToServer:
        self._next += 1
        rid = f"{_INTERNAL}{self._next}"
        self._mine[rid] = purpose
        message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        return ToServer(_line(message), rid)

    def from_server(self, line: bytes) -> list[Event]:
        """A line the server sent: forwarded to the agent (answers to the relay's own reads
        are not), with what it tells PlanFence."""
        message = _parse(line)
        if message is None:
            return [ToClient(line)]
        rid = message.get("id")
        if isinstance(rid, str) and rid in self._mine and "method" not in message:
            purpose = self._mine.pop(rid)
            if purpose.startswith("subscribe:"):
                return [Subscribed(purpose.removeprefix("subscribe:"), "result" in message)]
            return [self._reread_answer(purpose, message, rid)]
        if message.get("method") == "notifications/resources/updated":
            params = message.get("params")
            uri = params.get("uri") if isinstance(params, dict) else None
            if not isinstance(uri, str):
                return [ToClient(line)]
            # forwarded only where the agent subscribed itself (the relay's own are its own)
            return [*([ToClient(line)] if uri in self._agent_subscribed else []), Changed(uri)]
        events: list[Event] = [ToClient(line)]
        if "method" in message or rid is None:
            return events
        asked = self._asked.pop(_id_key(rid), None)
        if asked is None or "result" not in message:
            return events
        if asked[0] == "initialize":
            self.server_subscribes = _offers_subscribe(message["result"])
        observed = _observed(asked, message["result"], self.policy)
        if observed is not None:
            self._how[observed.key] = asked
            events.append(observed)
        return events

    def _reread_answer(self, key: str, message: Message, rid: str) -> Reread:
        result = message.get("result")
        if result is None or (isinstance(result, dict) and result.get("isError")):
            error = message.get("error")
            text = error.get("message") if isinstance(error, dict) else None
            return Reread(key, None, None, 0, str(text or "the server answered with an error"), rid)
        digest, mime, size = _content_digest(result)
        return Reread(key, digest, mime, size, None, rid)


def _observed(asked: tuple[str, Any], result: Any, policy: ToolPolicy) -> Observed | None:
    method, params = asked
    if not isinstance(params, dict) or not isinstance(result, dict):
        return None
    if method == "resources/read" and isinstance(params.get("uri"), str):
        digest, mime, size = _content_digest(result)
        return Observed(resource_key(params["uri"]), digest, mime, size)
    tool = params.get("name")
    if method == "tools/call" and isinstance(tool, str) and policy.kind(tool) == "read":
        if result.get("isError"):
            return None
        digest, mime, size = _content_digest(result)
        return Observed(tool_key(tool, params.get("arguments")), digest, mime, size)
    return None


def _offers_subscribe(result: Any) -> bool:
    """True when an initialize result says the server's resources support subscribe."""
    capabilities = result.get("capabilities") if isinstance(result, dict) else None
    resources = capabilities.get("resources") if isinstance(capabilities, dict) else None
    return isinstance(resources, dict) and resources.get("subscribe") is True


def _content_digest(result: Any) -> tuple[str, str | None, int]:
    """(digest, MIME type of the first part, bytes of text and blobs) of a read's result."""
    parts = result.get("contents", result.get("content", [])) if isinstance(result, dict) else []
    parts = parts if isinstance(parts, list) else []
    mime = next((p.get("mimeType") for p in parts if isinstance(p, dict)), None)
    size = sum(
        len(str(p.get("text", "")).encode()) + len(str(p.get("blob", "")))
        for p in parts
        if isinstance(p, dict)
    )
    return digest_of(parts), mime if isinstance(mime, str) else None, size


def _parse(line: bytes) -> Message | None:
    """The JSON object on `line`, or None (not JSON, or not an object)."""
    try:
        value = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _id_key(rid: Any) -> str:
    return json.dumps(rid)  # 1 and "1" are different ids


def _line(message: Message) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def _error(rid: Any, code: int, text: str) -> bytes:
    return _line({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": text}})
