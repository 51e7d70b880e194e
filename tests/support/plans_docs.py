"""The docs/HOOKS.md examples of `workspace trust --from`, the recovery policy, `workspace
plans` and `workspace show`, built by the code (tests/workspace/test_hook_docs.py checks the
doc against them)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from planfence_net.cli.plans import show_row
from planfence_net.cli.support import print_table
from planfence_net.workspace.installers.recovery import POLICY
from planfence_net.workspace.model.depslist import git_blob_id
from planfence_net.workspace.plans.agentsmd import ListProblems, declared_reads
from planfence_net.workspace.plans.listing import history_rows, plan_row


def plans_examples(project: Path) -> dict[str, str]:
    """The examples of `trust --from`, the recovery policy, `workspace plans` and `show`."""
    schema, types = b"create table audit (id int);\n", b"export type Audit = {id: number};\n"
    out = {
        "agents-md": (
            "## Plan: add-audit-column\n\nAdd an `audited_at` column and expose it in the API "
            "types.\n\n### Record dependencies\n"
            f"- schema.sql @ sha256:{hashlib.sha256(schema).hexdigest()[:7]} (owner: "
            f"db-migration-agent)\n- src/api/types.ts @ git:{git_blob_id(types)[:7]}\n"
        ),
        "recovery-policy": POLICY,
    }
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "src" / "api").mkdir(parents=True)
        (root / "AGENTS.md").write_text(out["agents-md"])
        (root / "schema.sql").write_bytes(b"create table audit (id int, audited_at int);\n")
        (root / "src/api/types.ts").write_bytes(types)
        try:
            declared_reads(Path("AGENTS.md"), "add-audit-column", None, {"ws": root}, root)
        except ListProblems as exc:
            out["from-refused"] = "".join(f"error: {line}\n" for line in exc.problems)
    out["from-refused"] += "error: nothing was recorded for add-audit-column\n"

    session = "9f2c6a1e-4b7d-4e0a-9c55-2f1d8e7b3a10"
    source = {
        "file": "/home/dev/app/AGENTS.md",
        "section": "add-audit-column",
        "owners": {"ws:file/schema.sql": "db-migration-agent"},
    }
    declaration = {
        "ws:file/schema.sql": ["read"],
        "ws:file/src/api/types.ts": ["read", "target"],
        "ws:file/package.json": ["lockfile"],
        "ws:branch": ["branch"],
    }

    def record(seq: int, trust: int, advanced: int) -> SimpleNamespace:
        body = {"declaration": declaration, "trust": trust, "session": session, "from": source}
        body |= {"advanced": advanced} if advanced else {}
        body["time"] = 1764610824.5
        rid = hashlib.sha256(b"%d" % seq).digest()
        return SimpleNamespace(key="plan/add-audit-column", id=rid, seq=seq, owner="ws", body=body)

    def at(clock: str) -> float:
        hour, minute, second = map(int, clock.split(":"))
        return time.mktime((2026, 12, 1, hour, minute, second, 0, 0, -1))

    check = {"event": "check", "plan": "add-audit-column", "source": "hook", "trust": 1}
    check |= {"session": session, "subagent": None, "tool": "Write"}
    check |= {"files": ["src/api/types.ts"], "class": "none", "exit": 0}
    blocked = check | {"class": "relevant", "exit": 2, "reread": ["schema.sql"]}
    records = [record(9, 1, 0), record(11, 1, 1), record(14, 2, 1)]
    events = [
        {"event": "put", "ts": at("17:40:02"), "id": records[0].id.hex(), "seq": 9},
        check | {"ts": at("17:40:05")},
        {"event": "put", "ts": at("17:40:06"), "id": records[1].id.hex(), "seq": 11},
        blocked | {"ts": at("17:41:10")},
        {"event": "put", "ts": at("17:41:30"), "id": records[2].id.hex(), "seq": 14},
        check | {"ts": at("17:41:33"), "trust": 2},
    ]
    rows = history_rows(events, {r.id: r for r in records})  # type: ignore[misc]
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        print_table(["time", "event", "class", "by", "detail"], [show_row(r) for r in rows])
    out["show"] = "".join(line.rstrip() + "\n" for line in shown.getvalue().splitlines())
    last = check | {"ts": 1764610831.25}
    row = plan_row(records[2], {"ws": project}, None, last)  # type: ignore[arg-type]
    out["plans-json"] = json.dumps({"plans": [row], "unreachable": {}}, indent=2) + "\n"
    return out
