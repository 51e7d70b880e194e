"""Usage errors, help text, version and JSON output of the `planfence` command, in-process.

None of these needs a running cluster.
"""

from __future__ import annotations

import math
import re
from importlib.metadata import version
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from planfence_net.cli.group import EXIT_USAGE
from planfence_net.cli.main import app
from planfence_net.cli.support import echo_json
from support.cluster import run_planfence


def run(*args: str) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.mark.parametrize(
    "args",
    [
        ["nosuchcommand"],
        ["put", "somewhere"],  # missing KEY and --body
        ["authorize", "c", "--root", "ab" * 32, "--dep"],  # option without its value
        ["cluster", "init", "c", "--agents", "zero"],  # not an integer
        ["cluster", "up", "c", "--no-such-option"],
        ["get", "c", "not-hex"],  # BadParameter from a command body
        ["hook", "install", "codex", "--format", "yaml"],  # not one of json, toml
    ],
)
def test_usage_errors_exit_64_never_2(args: list[str]) -> None:
    """Exit 2 means "stale, replan and retry"; a typo must not read as that."""
    result = run(*args)
    assert result.exit_code == EXIT_USAGE == 64, (result.exit_code, result.output)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr


def test_version() -> None:
    result = run("--version")
    assert (result.exit_code, result.stdout) == (0, f"planfence-net {version('planfence-net')}\n")


def test_help_lists_the_exit_codes() -> None:
    text = " ".join(run("--help").stdout.replace("│", " ").split())
    assert (
        "Exit codes: 0 success (authorize: authorized); 1 error, one line on stderr; "
        "2 stale plan, replan and retry (authorize, workspace check); 3 blocked "
        "(authorize); 64 usage error."
    ) in text


@pytest.mark.parametrize(
    "command", [["put"], ["cluster", "init"], ["plan"], ["authorize"], ["get"], ["logs"], ["bench"]]
)
def test_help_shows_plain_metavars(command: list[str]) -> None:
    text = run(*command, "--help").stdout
    assert not re.search(r"<(bool|path|str|list\[str\]|int)>|\{\w+\}", text), text
    usage = text.split("Usage: ")[1].splitlines()[0].split()
    assert usage[1 : len(command) + 2] == [*command, "[OPTIONS]"]
    if command not in (["bench"],):
        assert usage[len(command) + 2] == "DIR"


def test_help_names_option_values() -> None:
    text = run("put", "--help").stdout
    assert re.search(r"--parent\s+ID\s", text) and re.search(r"--as\s+AGENT\s", text)
    assert re.search(r"--json\s+Print JSON", text)


def test_json_output_never_prints_nan(capsys: pytest.CaptureFixture[str]) -> None:
    echo_json({"stall_ms": math.nan, "kib": math.inf, "rows": [1.5, -math.inf]})
    assert capsys.readouterr().out == (
        '{\n  "stall_ms": null,\n  "kib": null,\n  "rows": [\n    1.5,\n    null\n  ]\n}\n'
    )


def test_bench_quick_writes_outside_the_checkout() -> None:
    import tempfile

    from planfence_net.cli.bench import default_out

    assert default_out("scope", "loopback", True) == (
        Path(tempfile.gettempdir()) / "planfence-bench" / "scope-loopback-quick"
    )
    assert default_out("scope", "att-lte", False) == Path("docs/results/scope-att-lte")


def test_one_agent_is_counted_in_the_singular(tmp_path: Path) -> None:
    result = run("cluster", "init", tmp_path / "c", "--agents", "1", "--base-port", "0")
    assert (
        result.stdout.splitlines()[0]
        == f"cluster 'planfence-demo' with 1 agent in {tmp_path / 'c'}"
    )


def test_hook_help_is_help_not_a_blocked_call() -> None:
    """`planfence hook claude` goes straight to the lean hook, except when asked for help."""
    for agent in ("claude", "codex"):
        proc = run_planfence("hook", agent, "--help")
        assert (proc.returncode, proc.stderr) == (0, "")
        assert proc.stdout.startswith(f"Usage: planfence hook {agent} [OPTIONS]\n")
        assert "Run the PreToolUse hook for " in proc.stdout


def test_the_lazy_command_list_is_the_commands_own() -> None:
    """`planfence --help` lists commands from `COMMANDS` without importing them: each entry
    names the module that defines the command and the first paragraph of its help, and the
    list holds every command the modules define, once, with the same short help at any
    width."""
    import click

    from planfence_net.cli.group import Group
    from planfence_net.cli.main import COMMANDS, command_module

    ctx = click.Context(app)
    for name, (module, text) in COMMANDS.items():
        command = app.get_command(ctx, name)
        assert command is not None and command.short_help is None and not command.hidden
        if command.callback is not None:  # a group has none
            assert command.callback.__module__ == command_module(module), name
        assert " ".join((command.help or "").split("\n\n")[0].split()) == text, name
        for width in (20, 45, 74, 200):
            listed = click.Command(name, help=text).get_short_help_str(width)
            assert command.get_short_help_str(width) == listed, (name, width)
    everything = Group("all", help="Every command the modules define.")
    for module in dict.fromkeys(module for module, _ in COMMANDS.values()):
        __import__(command_module(module), fromlist=["register"]).register(everything)
    assert sorted(everything.commands) == sorted(COMMANDS)
