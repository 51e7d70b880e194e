"""The model server's answers in the wire formats of Gemini CLI and OpenCode.

Gemini     POST /v1beta/models/MODEL:generateContent and :streamGenerateContent?alt=sse
           (the Gemini API, which Gemini CLI calls at $GOOGLE_GEMINI_BASE_URL): a turn is
           one candidate whose parts hold a `functionCall` or a `text`; a side request
           (no tools) that asks for JSON by `responseJsonSchema` (Gemini CLI's model
           router, its next-speaker check) gets an object of the schema's required fields
Chat       POST /v1/chat/completions (OpenAI's Chat Completions, which OpenCode's
           OpenAI-compatible provider calls): streamed `chat.completion.chunk` events
           holding `tool_calls` or `content`, then `[DONE]`
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .model_server import ModelServer, Turn

GEMINI_PREFIX = "/v1beta/models/"
CHAT_PATH = "/v1/chat/completions"
_DEFAULTS = {"STRING": "ok", "INTEGER": 1, "NUMBER": 1, "BOOLEAN": False, "ARRAY": [], "OBJECT": {}}


def schema_value(schema: Any) -> Any:
    """A value of JSON schema `schema` (Gemini's upper-case types): an object's required
    fields filled with their type's default."""
    if not isinstance(schema, dict):
        return "ok"
    kind = str(schema.get("type", "STRING")).upper()
    if kind != "OBJECT":
        return _DEFAULTS.get(kind, "ok")
    props = schema.get("properties") or {}
    return {name: schema_value(props.get(name)) for name in schema.get("required") or props}


def gemini_parts(turn: Turn) -> list[dict[str, Any]]:
    """The candidate's parts for `turn` (a ToolCall: a `functionCall`; a Text: a `text`)."""
    from .model_server import Text, ToolCall

    if isinstance(turn, Text):
        return [{"text": turn.text}]
    if isinstance(turn, ToolCall):
        return [{"functionCall": {"name": turn.name, "args": turn.input}}]
    raise ValueError(f"Gemini CLI has no {type(turn).__name__} turn")


def gemini_answer(parts: list[dict[str, Any]], stream: bool) -> tuple[str, bytes]:
    """(content type, body) of a Gemini API answer holding `parts`."""
    response = {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {
            "promptTokenCount": 100,
            "candidatesTokenCount": 10,
            "totalTokenCount": 110,
        },
        "modelVersion": "scripted",
    }
    if stream:
        return "text/event-stream", f"data: {json.dumps(response)}\r\n\r\n".encode()
    return "application/json", json.dumps(response).encode()


def gemini_side_parts(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A side request's answer: the JSON its schema asks for, else a short text."""
    config = body.get("generationConfig") or {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    if schema is not None:
        return [{"text": json.dumps(schema_value(schema))}]
    return [{"text": "ok"}]


def chat_stream(server: ModelServer, body: dict[str, Any], turn: Turn) -> bytes:
    """The server-sent events of a streamed Chat Completions answer carrying `turn`."""
    from .model_server import Text, ToolCall

    base = {"id": server.new_id("chatcmpl"), "object": "chat.completion.chunk", "created": 0}
    base["model"] = body.get("model", "scripted")
    if isinstance(turn, Text):
        delta: dict[str, Any] = {"role": "assistant", "content": turn.text}
        finish = "stop"
    elif isinstance(turn, ToolCall):
        call = {
            "index": 0,
            "id": server.new_id("call"),
            "type": "function",
            "function": {"name": turn.name, "arguments": json.dumps(turn.input)},
        }
        delta, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    else:
        raise ValueError(f"OpenCode has no {type(turn).__name__} turn")
    chunks = [
        {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {
            **base,
            "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        },
    ]
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"
