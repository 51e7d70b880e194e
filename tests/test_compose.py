"""docker-compose.yml is valid Compose and every service runs a real `planfence` command.

The file is validated against the Compose JSON schema shipped in `tests/data/compose/` (see
`tests/data/README.md`), and each service's command is parsed by the real CLI (every option
must exist, every required argument be present).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import typer.main
import yaml
from typer._click.exceptions import UsageError  # Typer bundles its own Click

from planfence_net.cli.main import app

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "tests" / "data" / "compose" / "compose-spec.json"


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def expand(arg: str) -> str:
    """Compose's ${VAR:-default} interpolation, with every variable unset."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", arg)


def parse_command(args: list[str]) -> list[str]:
    """Parse `planfence ARGS` without running it; returns the command path. Raises
    UsageError for an unknown command or option or a missing argument."""
    command: Any = typer.main.get_command(app)
    ctx = command.make_context("planfence", list(args))
    path = []
    while hasattr(command, "resolve_command"):
        rest = [*vars(ctx).get("_protected_args", []), *ctx.args]
        name, sub, rest = command.resolve_command(ctx, rest)
        assert sub is not None and name is not None
        path.append(name)
        command, ctx = sub, sub.make_context(name, rest, parent=ctx)
    return path


def test_compose_file_matches_the_compose_schema() -> None:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(compose()), key=str)
    assert errors == []


def test_compose_has_five_owners_a_shaper_each_and_an_executor() -> None:
    services = compose()["services"]
    agents = ["planner", "reqs", "inventory", "ops", "audit"]
    assert sorted(services) == sorted([f"owner-{a}" for a in agents]
                                      + [f"shaper-{a}" for a in agents] + ["executor"])
    for a in agents:
        assert services[f"shaper-{a}"]["command"][3:5] == ["--upstream", f"owner-{a}:7401"]
    assert all(s["image"] == "planfence-net:latest" for s in services.values())


@pytest.mark.parametrize("service", sorted(compose()["services"]))
def test_every_service_command_is_a_real_planfence_command(service: str) -> None:
    args = [expand(a) for a in compose()["services"][service]["command"]]
    path = parse_command(args)
    assert path[0] in {"owner", "shape", "scenario"}


def test_the_checker_rejects_a_command_that_does_not_exist() -> None:
    with pytest.raises(UsageError):
        parse_command(["owner", "serve", "/cluster", "--agent", "x", "--no-such-flag"])
    with pytest.raises(UsageError):
        parse_command(["ownr", "serve"])


def test_dockerfile_runs_planfence() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["planfence"]' in text
    assert "pip install --no-cache-dir -e /app" in text


def test_compose_cluster_folder_layout(tmp_path: Path) -> None:
    from planfence_net import cluster as clusterlib

    roster = clusterlib.init_cluster(tmp_path / "c", compose=True)
    assert [a.address for a in roster.agents] == [
        f"owner-{a}:7401" for a in ["planner", "reqs", "inventory", "ops", "audit"]]
    links = clusterlib.link_addresses(clusterlib.ClusterDir(tmp_path / "c"))
    assert links["reqs"] == ("shaper-reqs", 7402)
