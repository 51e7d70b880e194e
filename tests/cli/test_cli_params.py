"""Command parameters declared as typed defaults become the click parameters they say."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from planfence_net.cli.group import EXIT_USAGE, Group
from planfence_net.cli.params import Argument, Option, params_of


def sample(
    path: Path = Argument(help="Folder."),
    ids: list[str] = Argument(help="Ids."),
    deadline: float = Option(5.0, "--deadline", min=0.01, help="Seconds."),
    agents: int = Option(5, min=1),
    base_port: int | None = Option(None, "--base-port"),
    parent: list[str] = Option([], "--parent"),
    json_out: bool = Option(False, "--json"),
    fmt: str = Option("json", "--format", choices=("json", "toml")),
    agent: str = Option(..., "--agent"),
) -> None:
    """Sample."""


def test_each_declaration_becomes_its_click_parameter() -> None:
    params, wants_context = params_of(sample)
    assert wants_context is False
    described = [
        (
            p.name,
            type(p).__name__,
            p.opts,
            type(p.type).__name__,
            p.required,
            p.multiple,
            p.nargs,
            None if p.required else p.default,
            p.metavar,
        )
        for p in params
    ]
    assert described == [
        ("path", "Argument", ["path"], "Path", True, False, 1, None, "DIR"),
        ("ids", "Argument", ["ids"], "StringParamType", True, False, -1, None, "ID"),
        ("deadline", "Option", ["--deadline"], "FloatRange", False, False, 1, 5.0, "DEADLINE"),
        ("agents", "Option", ["--agents"], "IntRange", False, False, 1, 5, "AGENTS"),
        (
            "base_port",
            "Option",
            ["--base-port"],
            "IntParamType",
            False,
            False,
            1,
            None,
            "BASE_PORT",
        ),
        ("parent", "Option", ["--parent"], "StringParamType", False, True, 1, (), "ID"),
        ("json_out", "Option", ["--json"], "BoolParamType", False, False, 1, False, None),
        ("fmt", "Option", ["--format"], "Choice", False, False, 1, "json", "FMT"),
        ("agent", "Option", ["--agent"], "StringParamType", True, False, 1, None, "AGENT"),
    ]


def test_a_parameter_without_a_declaration_is_refused() -> None:
    def bare(path: str) -> None: ...

    with pytest.raises(TypeError, match="bare: parameter 'path' needs Option"):
        params_of(bare)


def seen(*args: str) -> tuple[int, str, str]:
    group = Group("tool", help="A tool.")
    got: dict[str, object] = {}

    @group.command("run")
    def run(
        deadline: float = Option(5.0, "--deadline", min=0.01),
        fmt: str = Option("json", "--format", choices=("json", "toml")),
        parent: list[str] = Option([], "--parent"),
    ) -> None:
        got.update(deadline=deadline, fmt=fmt, parent=parent)
        click.echo(repr(sorted(got.items())))

    from planfence_net.cli.group import PlanfenceGroup

    root = PlanfenceGroup("tool", help="A tool.")
    root.add_command(group)
    result = CliRunner().invoke(root, ["tool", "run", *args])
    return (
        result.exit_code,
        result.stdout,
        result.stderr.splitlines()[-1:][0] if result.stderr else "",
    )


def test_values_are_converted_and_bad_ones_are_usage_errors() -> None:
    assert seen("--deadline", ".5", "--parent", "a", "--parent", "b") == (
        0,
        "[('deadline', 0.5), ('fmt', 'json'), ('parent', ('a', 'b'))]\n",
        "",
    )
    code, out, err = seen("--format", "yaml")
    assert (code, out) == (EXIT_USAGE, "")
    assert err == "Error: Invalid value for '--format': 'yaml' is not one of 'json', 'toml'."
    code, out, err = seen("--deadline", "0")
    assert (code, out) == (EXIT_USAGE, "")
    assert err == "Error: Invalid value for '--deadline': 0.0 is not in the range x>=0.01."
