"""`planfence owner compact`: drop an owner's old record versions that no live lineage names."""

from __future__ import annotations

from pathlib import Path

import click

from .group import Group
from .params import Option
from .support import DirArg, JsonOpt, cluster_dir, echo_json, user_errors


def register(owner_app: Group) -> None:
    """Add `compact` to `planfence owner`."""
    owner_app.command("compact")(owner_compact)


@user_errors
def owner_compact(
    path: Path = DirArg,
    agent: str = Option(..., "--agent", help="Whose store to compact (owner stopped)."),
    keep: int = Option(
        ..., "--keep", help="Records to keep per key, newest first (at least 1: the head)."
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Remove all but each key's KEEP newest records from a stopped owner's store, never one
    that the lineage of a head in any store of the cluster (so of any live plan) names."""
    from ..owners.compact import compact

    done = compact(cluster_dir(path), agent, keep)
    if json_out:
        echo_json(
            {
                "agent": done.agent,
                "records_before": done.records_before,
                "removed": done.removed,
                "records_after": done.records_after,
                "kept_for_lineage": done.kept_for_lineage,
                "bytes_before": done.bytes_before,
                "bytes_after": done.bytes_after,
            }
        )
        return
    click.echo(
        f"{done.agent}: removed {done.removed:,} of {done.records_before:,} records "
        f"({done.kept_for_lineage:,} old ones kept: a live lineage names them); "
        f"{done.bytes_before:,} -> {done.bytes_after:,} bytes on disk"
    )
