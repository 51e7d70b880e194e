"""`planfence view --tui`: the team view in a terminal (Textual), a reader of the collector's
stream like the page: it upserts the rows it is given and draws them.

Tables of sessions (state by colour: working green, blocked red and bold, stale yellow, ended
grey), blocks (newest first, with the writer of each drifted file and the diff), plans and
owners (last put, request, check or decision), executors (validations, and the drift each
was shown; from their own logs: decisions, authorized, blocked, replanned, the last decision,
the last drift found with the writer of each head, the last stall); selecting a block or a
plan (Enter, or a click) shows its lineage below. `q` quits.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import anyio
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Footer, Static

from .collect import Collector
from .graph import lineage, text

STYLES = {"working": "green", "blocked": "bold red", "stale": "yellow", "ended": "grey50"}


class ViewApp(App[None]):
    """The TUI over `collector` (see module doc)."""

    CSS = """
    #status { height: 1; background: $primary-background; }
    DataTable { height: auto; max-height: 12; }
    #lower { height: 1fr; }
    #lineage, #detail { width: 1fr; border: round $primary; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[Binding | tuple[str, str] | tuple[str, str, str]]] = [
        ("q", "quit", "Quit")
    ]

    def __init__(self, collector: Collector) -> None:
        super().__init__()
        self.collector = collector
        self.rows: dict[str, dict[str, dict[str, Any]]] = {
            "session": {},
            "plan": {},
            "block": {},
            "owner": {},
            "executor": {},
        }
        self.status_row: dict[str, Any] = {}
        self.shown_plan = ""

    def compose(self) -> ComposeResult:
        yield Static("waiting for the stream…", id="status")
        with Vertical():
            yield DataTable(id="sessions", cursor_type="row")
            yield DataTable(id="blocks", cursor_type="row")
            yield DataTable(id="plans", cursor_type="row")
            yield DataTable(id="owners", cursor_type="row")
            yield DataTable(id="executors", cursor_type="row")
            with Horizontal(id="lower"):
                yield Static("", id="detail")
                yield Static("select a block or a plan", id="lineage")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#sessions", DataTable).add_columns(
            "state", "worktree", "branch", "HEAD", "client", "session", "subagent", "plan",
            "last", "files",
        )  # fmt: skip
        self.query_one("#blocks", DataTable).add_columns(
            "when", "blocked", "plan", "session", "class", "writer"
        )
        self.query_one("#plans", DataTable).add_columns(
            "plan", "session", "read", "targets", "stale", "last check"
        )
        self.query_one("#owners", DataTable).add_columns(
            "owner", "address", "keys", "last put", "last request", "last check or decision"
        )
        self.query_one("#executors", DataTable).add_columns(
            "executor", "validations", "shown a drift", "last validation", "last drift",
            "decisions", "authorized", "blocked", "replanned", "last decision",
            "last drift found (writer)", "last stall",
        )  # fmt: skip
        self.run_worker(self._follow(), exclusive=True)

    async def _follow(self) -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(self.collector.run)
            receive = self.collector.subscribe()
            async with receive:
                async for batch in receive:
                    self.apply(batch)

    def apply(self, batch: list[dict[str, Any]]) -> None:
        """Upsert the rows of `batch` and redraw."""
        for row in batch:
            if row["type"] == "status":
                self.status_row = row
            elif row["type"] in self.rows:
                self.rows[row["type"]][row["id"]] = row
        self._draw()

    def _draw(self) -> None:
        status = self.status_row.get("text", "")
        self.query_one("#status", Static).update(
            Text(status, style="bold red" if self.status_row.get("blocked") else "")
        )
        sessions = self.query_one("#sessions", DataTable)
        sessions.clear()
        for s in sorted(self.rows["session"].values(), key=lambda s: (str(s["worktree"]), s["id"])):
            style = STYLES.get(s["state"], "")
            sessions.add_row(
                Text(s["state"], style=style),
                *(
                    Text(str(v or ""), style="grey50" if s["state"] == "ended" else "")
                    for v in (
                        s["worktree"], s["branch"], (s["head"] or "")[:10], s["client"],
                        s["session"][:8], s["subagent"], s["plan"], _ago(s["last"]),
                        ", ".join(s["files"]),
                    )
                ),
                key=s["id"],
            )  # fmt: skip
        blocks = self.query_one("#blocks", DataTable)
        blocks.clear()
        for b in sorted(self.rows["block"].values(), key=lambda b: -(b.get("ts") or 0)):
            blocks.add_row(
                time.strftime("%H:%M:%S", time.localtime(b.get("ts") or 0)),
                Text(f"{b.get('tool')} of {', '.join(b.get('files', []))}", style="bold red"),
                b.get("plan"),
                str(b.get("session") or "")[:8],
                b.get("class"),
                "; ".join(_writer(w) for w in b.get("writers", [])) or "; ".join(b["lines"][1:]),
                key=b["id"],
            )
        plans = self.query_one("#plans", DataTable)
        plans.clear()
        for p in sorted(self.rows["plan"].values(), key=lambda p: p["id"]):
            check = p.get("last_check") or {}
            plans.add_row(
                p["id"],
                str(p.get("session") or "")[:8],
                ", ".join(_file(k) for k in p["reads"]),
                ", ".join(_file(k) for k in p["targets"]),
                Text(", ".join(p["stale"]), style="yellow"),
                "blocked" if check.get("exit") == 2 else ("allowed" if check else ""),
                key=p["id"],
            )
        owners = self.query_one("#owners", DataTable)
        owners.clear()
        for o in sorted(self.rows["owner"].values(), key=lambda o: o["id"]):
            put, request, decision = (
                o[k][-1] if o[k] else {} for k in ("puts", "requests", "decisions")
            )
            owners.add_row(
                o["agent"],
                o.get("address") or "",
                str(o["keys"]),
                f"{put.get('key', '')} seq {put.get('seq', '')}" if put else "",
                f"{request.get('op')} from {request.get('peer')}: {request.get('outcome')}"
                if request
                else "",
                _decision(decision),
                key=o["id"],
            )
        self._draw_executors()
        if self.shown_plan:
            self.show_lineage(self.shown_plan)

    def _draw_executors(self) -> None:
        table = self.query_one("#executors", DataTable)
        table.clear()
        for e in sorted(self.rows["executor"].values(), key=lambda e: e["id"]):
            last = e["recent"][-1] if e["recent"] else {}
            drift: list[dict[str, Any]] = e["last_moved"]
            table.add_row(
                e["peer"],
                str(e["validations"]),
                str(e["drifted"]),
                f"{last.get('keys')} keys at {last.get('owner')}: {last.get('outcome')}" if last else "",
                Text(", ".join(f"{m['key']} seq {m['from']}->{m['to']}" for m in drift), style="yellow"),
                str(e["decisions"]), str(e["authorized"]),
                Text(str(e["blocked"]), style="bold red" if e["blocked"] else ""),
                str(e["replanned"]),
                _decided(e["decided"][-1]) if e["decided"] else Text(""),
                Text(_drift_found(e["last_drift"]), style="yellow"),
                "" if e["last_stall_ms"] is None else f"{e['last_stall_ms']:.1f} ms",
                key=e["id"],
            )  # fmt: skip

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        key = str(event.row_key.value)
        if event.data_table.id == "blocks" and key in self.rows["block"]:
            block = self.rows["block"][key]
            self.query_one("#detail", Static).update(_block_detail(block))
            self.show_lineage(str(block.get("plan")))
        elif event.data_table.id == "plans":
            self.show_lineage(key)
        elif event.data_table.id == "sessions" and key in self.rows["session"]:
            self.show_lineage(self.rows["session"][key]["plan"])

    def show_lineage(self, plan: str) -> None:
        """Show the lineage graph of `plan` (as text) in the lineage panel."""
        self.shown_plan = plan
        lines = text(lineage(self.collector.team, plan))
        self.query_one("#lineage", Static).update(Text("\n".join([f"lineage of {plan}", *lines])))


def _block_detail(block: dict[str, Any]) -> Text:
    out = Text(f"BLOCKED {block.get('tool')} · {block.get('class')} drift\n", style="bold red")
    for w in block.get("writers", []):
        out.append(f"{w.get('path')}: {_writer(w)}\n")
        for line in str(w.get("diff") or "").splitlines():
            style = "green" if line.startswith("+") else "red" if line.startswith("-") else ""
            out.append(line + "\n", style=style)
    for line in block.get("lines", []) if not block.get("writers") else ():
        out.append(line + "\n")
    return out


def _decision(d: dict[str, Any]) -> Text:
    if not d:
        return Text("")
    what = "blocked" if d.get("exit") == 2 else str(d.get("outcome") or "allowed")
    return Text(f"{d.get('plan') or d.get('action') or ''} {what} {d.get('class') or ''}",
                style="bold red" if what == "blocked" else "")  # fmt: skip


def _decided(d: dict[str, Any]) -> Text:
    """`ship authorized, replanned onto 1a2b3c4d5e`, `ship blocked (changed_again)`."""
    outcome = str(d.get("outcome") or "")
    said = f"{d.get('action')} {outcome}" + (f" ({d.get('reason')})" if d.get("reason") else "")
    if d.get("replanned"):
        said += ", replanned onto " + ", ".join(str(r)[:10] for r in d.get("new_roots", []))
    return Text(said, style="bold red" if outcome == "blocked" else "")


def _drift_found(d: dict[str, Any] | None) -> str:
    """`req/order seq 1->2 by reqs` for each key of the decision's drift (ids when the seqs
    are not known)."""
    if not d:
        return ""
    moved = []
    for m in d["drift"]:
        known = m.get("from_seq") is not None and m.get("to_seq") is not None
        span = f"seq {m['from_seq']}->{m['to_seq']}" if known else (
            f"{str(m.get('from'))[:10]}->{str(m.get('to'))[:10]}"
        )  # fmt: skip
        moved.append(f"{m.get('key')} {span} by {m.get('owner') or 'unknown writer'}")
    return f"{d.get('action')}: " + ", ".join(moved)


def _writer(w: dict[str, Any]) -> str:
    """The writer's sentence, with its session's short id when the sentence lacks it."""
    session = str(w.get("session") or "")[:8]
    who = str(w.get("writer") or (f"session {session}" if session else "unknown writer"))
    return who if session in who else f"{who} (session {session})"


def _file(key: str) -> str:
    return key.split(":file/", 1)[1] if ":file/" in key else key


def _ago(ts: float) -> str:
    if not ts:
        return ""
    seconds = max(0, round(time.time() - ts))
    return f"{seconds} s ago" if seconds < 60 else f"{seconds // 60} min ago"
