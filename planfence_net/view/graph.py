"""The lineage behind a plan or a block, as a graph and as SVG (pure, no I/O).

`lineage(team, plan)` walks the plan record's parents as the owners' put lines name them
(record id, key, owner, seq), level by level up to DEPTH levels and NODES nodes, and adds,
for each parent whose key has a newer head, that head: the version the plan did not see.
It returns {"plan", "nodes": [{"id", "key", "owner", "seq", "kind": plan|parent|head,
"level", "drift"}], "edges": [[from, to, "parent"|"head"]]}. `svg(graph)` draws it, one
column per level (the heads right of the parents they replaced), and `text(graph)` writes it
as lines for the TUI and the terminal.
"""

from __future__ import annotations

from html import escape
from typing import Any

from .rows import QUIET
from .team import PLAN_PREFIX, Team

DEPTH = 3
NODES = 60
COLUMN, ROW, BOX_W, BOX_H = 240, 44, 215, 36


def lineage(team: Team, plan: str, record: str | None = None) -> dict[str, Any]:
    """The graph of plan `plan` at its record `record` (default: the newest one seen)."""
    known = team.plans.get(plan)
    rid = record or (known.record if known is not None else "")
    nodes: dict[str, dict[str, Any]] = {}
    edges: list[list[str]] = []
    level = [rid] if rid in team.puts else []
    for depth in range(DEPTH + 1):
        following: list[str] = []
        for at in level:
            if at in nodes or len(nodes) >= NODES:
                continue
            put = team.puts[at]
            nodes[at] = {
                "id": at,
                "key": put.key,
                "owner": put.owner,
                "seq": put.seq,
                "kind": "plan" if depth == 0 else "parent",
                "level": depth,
                "drift": False,
            }
            for parent in put.parents if depth < DEPTH else ():
                if parent in team.puts:
                    edges.append([at, parent, "parent"])
                    following.append(parent)
        level = following
    for node in list(nodes.values()):
        if node["kind"] != "parent" or node["key"].startswith(PLAN_PREFIX):
            continue
        head = team.heads.get(node["key"])
        if head and head != node["id"] and not node["key"].endswith(QUIET):
            node["drift"] = True
            put = team.puts[head]
            nodes.setdefault(
                head,
                {
                    "id": head,
                    "key": put.key,
                    "owner": put.owner,
                    "seq": put.seq,
                    "kind": "head",
                    "level": node["level"] + 1,
                    "drift": False,
                },
            )
            edges.append([node["id"], head, "head"])
    return {"plan": plan, "record": rid, "nodes": list(nodes.values()), "edges": edges}


def svg(graph: dict[str, Any]) -> str:
    """The graph as an inline SVG element: boxes (key, owner and seq, id prefix), parent
    edges in grey, "head now" edges in red to the version that replaced a parent."""
    nodes = graph["nodes"]
    if not nodes:
        return f'<p class="empty">no record of plan {escape(graph["plan"])} in the logs yet</p>'
    rows: dict[int, int] = {}
    where: dict[str, tuple[int, int]] = {}
    for node in sorted(nodes, key=lambda n: (n["level"], n["key"])):
        row = rows.get(node["level"], 0)
        rows[node["level"]] = row + 1
        where[node["id"]] = (10 + node["level"] * COLUMN, 10 + row * ROW)
    width = 20 + (max(rows) + 1) * COLUMN
    height = 20 + max(rows.values()) * ROW
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="lineage" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">'
    ]
    for start, end, kind in graph["edges"]:
        (x1, y1), (x2, y2) = where[start], where[end]
        cls = "edge-head" if kind == "head" else "edge"
        parts.append(
            f'<line class="{cls}" x1="{x1 + BOX_W}" y1="{y1 + BOX_H // 2}" '
            f'x2="{x2}" y2="{y2 + BOX_H // 2}"/>'
        )
    for node in nodes:
        x, y = where[node["id"]]
        cls = f"node node-{node['kind']}" + (" node-drift" if node["drift"] else "")
        label = f"{node['owner']} seq {node['seq']} · {node['id'][:12]}"
        if node["kind"] == "head":
            label = "head now: " + label
        parts.append(
            f'<g class="{cls}" data-id="{node["id"]}"><rect x="{x}" y="{y}" width="{BOX_W}" '
            f'height="{BOX_H}" rx="4"/><text x="{x + 6}" y="{y + 15}">'
            f"{escape(_short(node['key'], 28))}</text>"
            f'<text class="sub" x="{x + 6}" y="{y + 30}">{escape(label)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def text(graph: dict[str, Any]) -> list[str]:
    """The graph as indented lines: the plan record, its parents (marked when a newer head
    replaced them, with that head), their parents."""
    nodes = {n["id"]: n for n in graph["nodes"]}
    if not nodes:
        return [f"no record of plan {graph['plan']} in the logs yet"]
    children: dict[str, list[tuple[str, str]]] = {}
    for start, end, kind in graph["edges"]:
        children.setdefault(start, []).append((end, kind))
    lines: list[str] = []

    def walk(node: str, indent: int) -> None:
        n = nodes[node]
        mark = "  STALE" if n["drift"] else ""
        lead = "head now: " if n["kind"] == "head" else ""
        lines.append(
            f"{'  ' * indent}{lead}{n['key']}  ({n['owner']} seq {n['seq']}, {n['id'][:12]}){mark}"
        )
        for child, _ in children.get(node, []):
            walk(child, indent + 1)

    walk(graph["record"], 0)
    return lines


def _short(value: str, limit: int) -> str:
    return value if len(value) <= limit else "…" + value[-(limit - 1) :]
