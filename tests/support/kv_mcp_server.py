"""A small MCP server for the tests: a key-value "database" in a JSON file, over stdio.

    python kv_mcp_server.py DB.json [--subscribe] [--log CALLS.jsonl]

The file holds {"schema": {"columns": [...]}, "rows": {KEY: {...}}}; another process may
rewrite it at any time (a migration). Resources: `db://schema` (the schema as JSON text).
Tools: `get_row` {key} (a read) and `put_row` {key, row} (a write; refused by the server when
the row's columns are not the schema's). With --subscribe it offers resources/subscribe and
sends notifications/resources/updated when the file changes (checked every 10 ms by a
thread). --log appends one JSON line per request it handles, so a test can count them.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

SCHEMA = "db://schema"


class Server:
    def __init__(self, db: Path, subscribe: bool, log: Path | None) -> None:
        self.db, self.subscribe, self.log = db, subscribe, log
        self.subscribed: set[str] = set()
        self.lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        with self.lock:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    def data(self) -> dict[str, Any]:
        return json.loads(self.db.read_text())

    def handle(self, message: dict[str, Any]) -> dict[str, Any] | None:
        method, params = message.get("method"), message.get("params") or {}
        if "id" not in message:
            return None  # notifications/initialized and the like
        if self.log is not None:
            with self.log.open("a") as f:
                f.write(json.dumps({"method": method, "params": params}) + "\n")
        if method == "initialize":
            resources: dict[str, Any] = {"subscribe": True} if self.subscribe else {}
            result: Any = {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"resources": resources, "tools": {}},
                "serverInfo": {"name": "kv-test", "version": "1.0"},
            }
        elif method == "resources/list":
            result = {
                "resources": [{"uri": SCHEMA, "name": "schema", "mimeType": "application/json"}]
            }
        elif method == "resources/read":
            if params.get("uri") != SCHEMA:
                return error(message, -32002, f"no resource {params.get('uri')!r}")
            text = json.dumps(self.data()["schema"], sort_keys=True)
            result = {"contents": [{"uri": SCHEMA, "mimeType": "application/json", "text": text}]}
        elif method == "resources/subscribe" and self.subscribe:
            self.subscribed.add(params.get("uri"))
            result = {}
        elif method == "tools/list":
            result = {
                "tools": [
                    {
                        "name": "get_row",
                        "inputSchema": {
                            "type": "object",
                            "properties": {"key": {"type": "string"}},
                        },
                    },
                    {
                        "name": "put_row",
                        "inputSchema": {
                            "type": "object",
                            "properties": {"key": {"type": "string"}, "row": {"type": "object"}},
                        },
                    },
                ]
            }
        elif method == "tools/call":
            result = self.call(params.get("name"), params.get("arguments") or {})
        elif method == "ping":
            result = {}
        else:
            return error(message, -32601, f"method {method!r} not found")
        return {"jsonrpc": "2.0", "id": message["id"], "result": result}

    def call(self, tool: Any, args: dict[str, Any]) -> dict[str, Any]:
        data = self.data()
        if tool == "get_row":
            row = data["rows"].get(args.get("key"))
            return {"content": [{"type": "text", "text": json.dumps(row)}]}
        if tool == "put_row":
            row = args.get("row") or {}
            if sorted(row) != sorted(data["schema"]["columns"]):
                return text_error(f"row columns {sorted(row)} are not the schema's")
            data["rows"][args.get("key")] = row
            self.db.write_text(json.dumps(data))
            return {"content": [{"type": "text", "text": "stored"}]}
        return text_error(f"no tool {tool!r}")

    def watch(self) -> None:
        last = None
        while True:
            time.sleep(0.01)
            try:
                now = json.dumps(self.data()["schema"], sort_keys=True)
            except (OSError, ValueError, KeyError):
                continue  # caught mid-write: look again
            if last is not None and now != last and SCHEMA in self.subscribed:
                self.send(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/resources/updated",
                        "params": {"uri": SCHEMA},
                    }
                )
            last = now


def error(message: dict[str, Any], code: int, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message["id"], "error": {"code": code, "message": text}}


def text_error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


def main() -> None:
    args = sys.argv[1:]
    log = Path(args[args.index("--log") + 1]) if "--log" in args else None
    server = Server(Path(args[0]), "--subscribe" in args, log)
    if server.subscribe:
        threading.Thread(target=server.watch, daemon=True).start()
    for line in sys.stdin:
        if line.strip():
            reply = server.handle(json.loads(line))
            if reply is not None:
                server.send(reply)


if __name__ == "__main__":
    main()
