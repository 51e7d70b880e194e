"""A scripted model endpoint on 127.0.0.1 for the real Claude Code and Codex CLIs.

One HTTP server answers both wire formats:

    POST /v1/messages                 Anthropic Messages (Claude Code): streamed server-sent
                                      events when the body asks for `"stream": true`, JSON else
    POST /v1/messages/count_tokens    a token count
    POST /v1/responses                OpenAI Responses (Codex): streamed server-sent events
    POST /v1beta/models/M:...         the Gemini API (Gemini CLI), see `wires`
    POST /v1/chat/completions         OpenAI Chat Completions (OpenCode), see `wires`
    CONNECT, or a request for an absolute URL (the clients' HTTPS_PROXY/HTTP_PROXY point here):
                                      refused with 403 and recorded, so nothing leaves the machine
    anything else                     404, recorded

A script is a list of turns per wire format. A model request (one that offers tools) takes the
next turn: a tool call the client runs, or a final text. Requests that offer no tools are the
clients' side requests (titles, summaries, probes): they get a short text and take no turn.
Every request is recorded with its parsed body, so a test asserts what the model received
(`tool_result` blocks, `function_call_output` items). A model request after the script ran
out gets a final text and is counted in `overruns`, which a test asserts is zero.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from .wires import (
    CHAT_PATH,
    GEMINI_PREFIX,
    chat_stream,
    gemini_answer,
    gemini_parts,
    gemini_side_parts,
)

ANTHROPIC = "anthropic"
OPENAI = "openai"
GEMINI = "gemini"  # Gemini CLI: the Gemini API (`wires`)
CHAT = "chat"  # OpenCode: OpenAI's Chat Completions (`wires`)
SIDE_REPLY = "ok"
OVERRUN_REPLY = "(the test's script has no more turns)"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """Claude Code: a `tool_use` block; Codex: a `function_call` whose arguments are `input`."""

    name: str
    input: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ApplyPatch:
    """Codex's apply_patch, sent the way the request offers it (a freeform custom tool, or a
    function whose argument is `input`)."""

    patch: str


@dataclass(frozen=True, slots=True)
class Text:
    """A final answer: the client's turn ends."""

    text: str


@dataclass(frozen=True, slots=True)
class Reply:
    """A turn made from the request it answers: `make(body)` reads what the model received
    (e.g. the text of the last tool result) and returns the ToolCall, ApplyPatch or Text to
    send, as a model that follows a block message's instructions would."""

    make: Callable[[dict[str, Any]], ToolCall | ApplyPatch | Text]


Turn = ToolCall | ApplyPatch | Text | Reply


@dataclass(frozen=True, slots=True)
class Recorded:
    """One request the server received. `turn` is the index of the script turn it took
    (None for side requests, refused proxy requests and unknown paths)."""

    method: str
    path: str
    body: Any
    turn: int | None = None


@dataclass(slots=True)
class Script:
    """The turns left for one wire format, handed out in order (thread-safe)."""

    turns: list[Turn]
    taken: int = 0
    overruns: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self) -> tuple[int | None, Turn]:
        """The next turn and its index; past the end, (None, a final text) counted as overrun."""
        with self.lock:
            if self.taken < len(self.turns):
                self.taken += 1
                return self.taken - 1, self.turns[self.taken - 1]
            self.overruns += 1
            return None, Text(OVERRUN_REPLY)


class ModelServer:
    """The scripted endpoint, serving in a thread from `start()` until `close()`.

    `url` is `http://127.0.0.1:PORT`; `requests` lists every request received, in order.
    """

    def __init__(self, anthropic: list[Turn] | None = None, openai: list[Turn] | None = None):
        self.scripts = {
            ANTHROPIC: Script(list(anthropic or [])),
            OPENAI: Script(list(openai or [])),
            GEMINI: Script([]),
            CHAT: Script([]),
        }
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="model-server", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> ModelServer:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and close the listening socket (connections are daemon threads)."""
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join()
        self._httpd.server_close()

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def script(self, api: str, turns: list[Turn]) -> None:
        """Replace the turns of `api` (ANTHROPIC or OPENAI); call before the client runs."""
        self.scripts[api] = Script(list(turns))

    # -- what the test asserts on ---------------------------------------------------------------

    def model_requests(self, api: str) -> list[Any]:
        """Bodies of the requests of `api` (ANTHROPIC or OPENAI) that took a script turn, or
        came after the script ran out, in order."""
        with self._lock:
            return [
                r.body
                for r in self.requests
                if _api_of(r.path) == api and isinstance(r.body, dict) and r.body.get("tools")
            ]

    def refused(self) -> list[Recorded]:
        """Requests meant for other hosts (CONNECT or an absolute URL): all refused."""
        with self._lock:
            return [r for r in self.requests if r.method == "CONNECT" or r.path.startswith("http")]

    def unknown(self) -> list[Recorded]:
        """Requests to paths this server does not serve (answered 404)."""
        known = {"/v1/messages/count_tokens"}
        with self._lock:
            return [
                r
                for r in self.requests
                if r.method != "CONNECT"
                and not r.path.startswith("http")
                and r.path not in known
                and _api_of(r.path) is None
            ]

    def overruns(self, api: str) -> int:
        return self.scripts[api].overruns

    def taken(self, api: str) -> int:
        return self.scripts[api].taken

    # -- answers --------------------------------------------------------------------------------

    def record(self, entry: Recorded) -> None:
        with self._lock:
            self.requests.append(entry)

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):024d}"

    def answer(self, path: str, body: Any) -> tuple[int, str, bytes, int | None]:
        """(status, content type, body, turn index) for a POST to `path`."""
        if path == "/v1/messages/count_tokens":
            return 200, "application/json", json.dumps({"input_tokens": 100}).encode(), None
        if path == "/v1/messages" and isinstance(body, dict):
            index, turn = self._turn(ANTHROPIC, body)
            blocks = self._anthropic_blocks(turn)
            if body.get("stream"):
                return 200, "text/event-stream", anthropic_stream(self, body, blocks), index
            return (
                200,
                "application/json",
                json.dumps(anthropic_message(self, body, blocks)).encode(),
                index,
            )
        if path == "/v1/responses" and isinstance(body, dict):
            index, turn = self._turn(OPENAI, body)
            return 200, "text/event-stream", responses_stream(self, body, turn), index
        if _api_of(path) == GEMINI and path.endswith(":countTokens"):
            return 200, "application/json", json.dumps({"totalTokens": 100}).encode(), None
        if _api_of(path) == GEMINI and isinstance(body, dict):
            stream = path.endswith(":streamGenerateContent")
            if not body.get("tools"):
                return 200, *gemini_answer(gemini_side_parts(body), stream), None
            index, turn = self._turn(GEMINI, body)
            return 200, *gemini_answer(gemini_parts(turn), stream), index
        if path == CHAT_PATH and isinstance(body, dict):
            index, turn = self._turn(CHAT, body)
            return 200, "text/event-stream", chat_stream(self, body, turn), index
        return (
            404,
            "application/json",
            json.dumps({"error": {"message": f"no {path}"}}).encode(),
            None,
        )

    def _turn(self, api: str, body: dict[str, Any]) -> tuple[int | None, Turn]:
        if not body.get("tools"):
            return None, Text(SIDE_REPLY)
        index, turn = self.scripts[api].next()
        return index, turn.make(body) if isinstance(turn, Reply) else turn

    def _anthropic_blocks(self, turn: Turn) -> list[dict[str, Any]]:
        if isinstance(turn, Text):
            return [{"type": "text", "text": turn.text}]
        if isinstance(turn, ToolCall):
            return [
                {
                    "type": "tool_use",
                    "id": self.new_id("toolu"),
                    "name": turn.name,
                    "input": turn.input,
                }
            ]
        raise ValueError(f"Claude Code has no {type(turn).__name__} turn")


def _api_of(path: str) -> str | None:
    """Which wire format a request path speaks, or None (a path this server does not serve)."""
    if path == "/v1/messages":
        return ANTHROPIC
    if path == "/v1/responses":
        return OPENAI
    if path.startswith(GEMINI_PREFIX) and path.endswith(("Content", "countTokens")):
        return GEMINI
    return CHAT if path == CHAT_PATH else None


# -- Anthropic Messages -------------------------------------------------------------------------


def _usage(output_tokens: int = 1) -> dict[str, int]:
    return {
        "input_tokens": 100,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _stop_reason(blocks: list[dict[str, Any]]) -> str:
    return "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"


def anthropic_message(
    server: ModelServer, request: dict[str, Any], blocks: list[dict[str, Any]]
) -> dict[str, Any]:
    """A whole (non-streamed) Messages response holding `blocks`."""
    return {
        "id": server.new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": request.get("model", "claude"),
        "content": blocks,
        "stop_reason": _stop_reason(blocks),
        "stop_sequence": None,
        "usage": _usage(10),
    }


def anthropic_stream(
    server: ModelServer, request: dict[str, Any], blocks: list[dict[str, Any]]
) -> bytes:
    """The server-sent events of a streamed Messages response holding `blocks`."""
    message = anthropic_message(server, request, [])
    message.update(stop_reason=None, usage=_usage())
    events: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
    for index, block in enumerate(blocks):
        start: dict[str, Any]
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            {"type": "content_block_start", "index": index, "content_block": start},
            {"type": "content_block_delta", "index": index, "delta": delta},
            {"type": "content_block_stop", "index": index},
        ]
    events += [
        {
            "type": "message_delta",
            "delta": {"stop_reason": _stop_reason(blocks), "stop_sequence": None},
            "usage": {"output_tokens": 10},
        },
        {"type": "message_stop"},
    ]
    return sse(events)


# -- OpenAI Responses ---------------------------------------------------------------------------


def offered_apply_patch(request: dict[str, Any]) -> str | None:
    """How the request offers apply_patch: "custom" (freeform), "function", or None."""
    for tool in request.get("tools", []):
        if tool.get("name") == "apply_patch":
            return "custom" if tool.get("type") == "custom" else "function"
    return None


def responses_item(server: ModelServer, request: dict[str, Any], turn: Turn) -> dict[str, Any]:
    """The output item a Responses stream carries for `turn`."""
    if isinstance(turn, Text):
        return {
            "type": "message",
            "role": "assistant",
            "id": server.new_id("msg"),
            "content": [{"type": "output_text", "text": turn.text}],
        }
    call_id = server.new_id("call")
    if isinstance(turn, ToolCall):
        return {
            "type": "function_call",
            "id": server.new_id("fc"),
            "call_id": call_id,
            "name": turn.name,
            "arguments": json.dumps(turn.input),
        }
    kind = offered_apply_patch(request)
    if kind is None:
        raise ValueError("the request offers no apply_patch tool: use a model Codex knows")
    if kind == "custom":
        return {
            "type": "custom_tool_call",
            "id": server.new_id("ctc"),
            "call_id": call_id,
            "name": "apply_patch",
            "input": turn.patch,
        }
    return {
        "type": "function_call",
        "id": server.new_id("fc"),
        "call_id": call_id,
        "name": "apply_patch",
        "arguments": json.dumps({"input": turn.patch}),
    }


def responses_stream(server: ModelServer, request: dict[str, Any], turn: Turn) -> bytes:
    """The server-sent events of a streamed Responses answer carrying one item for `turn`."""
    response_id = server.new_id("resp")
    item = responses_item(server, request, turn)
    usage = {
        "input_tokens": 100,
        "input_tokens_details": None,
        "output_tokens": 10,
        "output_tokens_details": None,
        "total_tokens": 110,
    }
    return sse(
        [
            {"type": "response.created", "response": {"id": response_id}},
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed", "response": {"id": response_id, "usage": usage}},
        ]
    )


def sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


# -- HTTP ---------------------------------------------------------------------------------------


def _handler_for(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
            pass  # the record is the log

        def _reply(
            self, status: int, content_type: str, payload: bytes, close: bool = False
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(payload)

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                return json.loads(raw) if raw else None
            except ValueError:
                return raw.decode(errors="replace")

        def _refuse(self) -> None:
            server.record(Recorded(self.command, self.path, None))
            self._reply(
                403, "text/plain", b"the test's model server reaches no other host\n", close=True
            )

        def do_CONNECT(self) -> None:  # noqa: N802 - http.server's naming
            self._refuse()

        def do_GET(self) -> None:  # noqa: N802
            if self.path.startswith("http"):
                return self._refuse()
            server.record(Recorded("GET", urlsplit(self.path).path, None))
            self._reply(404, "application/json", b'{"error": {"message": "not found"}}')

        def do_HEAD(self) -> None:  # noqa: N802
            server.record(Recorded("HEAD", self.path, None))
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:  # noqa: N802
            if self.path.startswith("http"):
                self._body()
                return self._refuse()
            path = urlsplit(self.path).path
            body = self._body()
            status, content_type, payload, turn = server.answer(path, body)
            server.record(Recorded("POST", path, body, turn))
            self._reply(status, content_type, payload)

    return Handler
