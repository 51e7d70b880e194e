"""`planfence view`'s web page: a Starlette app on 127.0.0.1, live by server-sent events.

Routes (each refuses, 403, a request without this start's token, `?token=`, and, 421, one
whose Host is not the loopback address it listens on, so that another site's page cannot
reach it through a DNS name that points at 127.0.0.1):

    GET /             the page (page.html: plain HTML, CSS and JS, nothing fetched elsewhere)
    GET /events       text/event-stream: one `data:` message per batch of rows (a JSON
                      list, `team` rows), every row first
    GET /lineage      ?plan=NAME[&record=ID]: the lineage graph as SVG, and its text

The page is a reader of the collector's stream like the TUI and `--json`: it upserts rows by
type and id and draws them; it keeps no state of its own that the stream does not give.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from importlib.resources import files
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from .collect import Collector
from .graph import lineage, svg, text

LOOPBACK = ("127.0.0.1", "localhost")


def new_token() -> str:
    """A fresh token for one start of the page."""
    return secrets.token_urlsafe(24)


def make_app(collector: Collector, token: str, port: int) -> Starlette:
    """The page's app over `collector`, answering only requests with `token` and a loopback
    Host of `port`."""
    page = files(__package__).joinpath("page.html").read_text()

    def refused(request: Request) -> Response | None:
        host = request.headers.get("host", "")
        if host not in {f"{name}:{port}" for name in LOOPBACK}:
            return PlainTextResponse("refused: not a loopback Host\n", status_code=421)
        given = request.query_params.get("token", "")
        if not secrets.compare_digest(given.encode(), token.encode()):
            return PlainTextResponse(
                "refused: this page needs the token in the URL `planfence view` printed\n",
                status_code=403,
            )
        return None

    async def index(request: Request) -> Response:
        return refused(request) or HTMLResponse(page)

    async def events(request: Request) -> Response:
        no = refused(request)
        if no is not None:
            return no
        receive = collector.subscribe()

        async def stream() -> AsyncIterator[str]:
            async with receive:
                async for batch in receive:
                    yield f"data: {json.dumps(batch, default=str)}\n\n"

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def graph(request: Request) -> Response:
        no = refused(request)
        if no is not None:
            return no
        plan = request.query_params.get("plan", "")
        found: dict[str, Any] = lineage(
            collector.team, plan, request.query_params.get("record") or None
        )
        return JSONResponse({"svg": svg(found), "text": text(found), "graph": found})

    return Starlette(
        routes=[
            Route("/", index),
            Route("/events", events),
            Route("/lineage", graph),
        ]
    )
