"""The `planfence` command: the composition root, a click group that loads each command's
module only when that command runs (or its help is asked for).

`planfence --help` lists every command from `COMMANDS`, which holds each command's module and
the first paragraph of its help, so it imports click and nothing of the commands (see
tests/test_cli_imports.py; tests/cli/test_cli_usage.py checks the texts against the
commands themselves). A command's module adds it, and the other commands it defines, with
`register(app)`; every command imports the library it uses in its body.
"""

from __future__ import annotations

import click

from .group import EXIT_CODES_HELP, PlanfenceGroup

# command -> (its module under planfence_net.cli, the first paragraph of its help), in the
# order `planfence --help` lists them
COMMANDS = {
    "cluster": ("cluster", "Create, start, inspect and stop a cluster."),
    "owner": ("records", "Run, stop, start or restart an owner daemon."),
    "put": ("records", "Write a record as the agent that owns KEY; prints its id and seq."),
    "heads": ("records", "Current head of each KEY, asked from its owner."),
    "get": (
        "records",
        "Fetch records by id (or unique prefixes of 8+ hex) from the owners; verify them.",
    ),
    "logs": (
        "records",
        "Print an owner's structured log (connections, handshakes, requests, puts, errors), "
        "or with --shaper the output of the shaper in front of it.",
    ),
    "plan": (
        "executor",
        "Write a plan record, derived from the given parent records, as its owner.",
    ),
    "authorize": (
        "executor",
        "Validate a plan's declared dependencies against their owners, right now.",
    ),
    "demo": (
        "executor",
        "Run the stale-plan scenario on a new five-agent loopback cluster, then stop it.",
    ),
    "scenario": (
        "executor",
        "Run the stale-plan scenario against a running cluster and print the result table.",
    ),
    "shape": ("shape", "Run a trace shaper in the foreground until SIGTERM or SIGINT."),
    "profiles": ("shape", "List the link profiles of traces/profiles.toml."),
    "bench": (
        "bench",
        "Run EXPERIMENT against a live cluster it starts and stops; write rows, a Markdown "
        "report next to the paper's numbers, and plots.",
    ),
    "traces": ("traces", "Get the Mahimahi LTE traces."),
    "keys": (
        "inspect",
        "The keys AGENT's owner holds: head seq and id, and how many versions each has.",
    ),
    "records": (
        "inspect",
        "Every record AGENT's owner holds, oldest first: seq, key, kind, id, parents.",
    ),
    "history": (
        "inspect",
        "Every version of KEY, oldest first (the last is the head), from its owner's store.",
    ),
    "lineage": (
        "inspect",
        "The record ID and its ancestors, walking parents level by level from the owners.",
    ),
    "workspace": ("workspace", "Workspace owners, trusted states and drift checks."),
    "hook": (
        "hook",
        "PreToolUse hooks for Claude Code, Codex, Gemini CLI, OpenCode, Copilot CLI, Cursor "
        "and Windsurf, and the git commit gate.",
    ),
    "mcp": ("mcp", "Check MCP write tools against what was read."),
    "view": (
        "planfence_net.view.command",
        "The team, live: sessions, plans, blocks and owners, as a local web page.",
    ),
    "ping": (
        "ping",
        "Open one authenticated session to AGENT's owner and ping it; exit 0 if it answered.",
    ),
    "doctor": (
        "ping",
        "Check that the fence works here: an owner serves this folder, the agents' hooks are "
        "installed and start, Codex trusts them, the git gate is in place.",
    ),
}


def command_module(name: str) -> str:
    """The module a `COMMANDS` entry names: a module of this package, or an absolute one (a
    command that lives beside the library it runs, `planfence_net.view.command`)."""
    return name if name.startswith("planfence_net.") else f"{__package__}.{name}"


class LazyGroup(PlanfenceGroup):
    """The root group: commands come from `COMMANDS`, each module imported when one of its
    commands is first looked up (click's "lazy loading" of subcommands); the command list
    of its help is written from `COMMANDS` alone."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            # __import__, not importlib.import_module: `python -X importtime` sees it
            module = __import__(command_module(COMMANDS[cmd_name][0]), fromlist=["register"])
            module.register(self)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Click's command list (each command's short help within the width), with the
        short help made from `COMMANDS` instead of the loaded command."""
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [
            (name, click.Command(name, help=text).get_short_help_str(limit))
            for name, (_, text) in COMMANDS.items()
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        # importlib.metadata adds tens of ms of start-up (python -X importtime), which only
        # --version needs: `planfence --help` must not pay it (tests/cli/test_cli_imports.py)
        from importlib.metadata import version

        click.echo(f"planfence-net {version('planfence-net')}")
        ctx.exit()


app = LazyGroup(
    "planfence",
    help="planfence-net: dependency-scoped plan validation for agent teams.",
    epilog=EXIT_CODES_HELP,
    params=[
        click.Option(
            ["--version"],
            is_flag=True,
            expose_value=False,
            is_eager=True,
            callback=_print_version,
            help="Print the version and exit.",
        )
    ],
)
