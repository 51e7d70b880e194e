"""The `planfence` command group: exit codes and help text that mean one thing each.

Exit codes of every command:

    0   success (authorize: authorized)
    1   error: one line on stderr saying what went wrong
    2   stale: a declared dependency drifted; replan and retry (authorize, workspace check)
    3   blocked for another reason (authorize: owner unavailable, missing lineage, ...)
    64  usage error: unknown command or option, missing or malformed argument (EX_USAGE)

Click gives usage errors exit 2, the code a script reads as "replan and retry"; a typo in
such a script would loop forever. `PlanfenceGroup` moves them to 64. It also gives the help
plain metavars: `DIR` and `ID` instead of typer's `{path}`, `<bool>` and `<list[str]>`.
"""

from __future__ import annotations

from typing import Any

from typer._click.decorators import help_option
from typer._click.exceptions import UsageError  # typer bundles its own click
from typer.core import TyperArgument, TyperGroup, TyperOption

from .coerce import install as install_plain_coercion

EXIT_OK, EXIT_ERROR, EXIT_STALE, EXIT_BLOCKED, EXIT_USAGE = 0, 1, 2, 3, 64

EXIT_CODES_HELP = (
    "Exit codes: 0 success (authorize: authorized); 1 error, one line on "
    "stderr; 2 stale plan, replan and retry (authorize, workspace check); "
    "3 blocked (authorize); 64 usage error."
)


class _PlainArgument(TyperArgument):
    """An argument shown as `DIR`, `[DIR]` or `ID...` in the usage line."""

    def _usage_display_name(self) -> str:
        name = self.display_name_raw
        name = name if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 else "")

    def display_type_rich(self, ctx: Any) -> str | None:
        return None  # the name says it; no `<path>` column


# parameter name -> what the user types; the rest show their upper-case name
_METAVARS = {
    "as_agent": "AGENT",
    "parent": "ID",
    "root": "ID",
    "ids": "ID",
    "keys": "KEY",
    "dep": "KEY",
    "path": "DIR",
}


def _plain_metavars(command: Any) -> None:
    """Give every parameter of `command` (and its subcommands) a plain metavar: arguments
    their upper-case name, flags none, other options their upper-case value name."""
    if getattr(command, "add_help_option", False) and command._help_option is None:
        # the help option is made on first use; make it now so it gets the plain metavar too
        help_option(["--help"])(command)
        command._help_option = command.params.pop()
    for param in [*getattr(command, "params", []), getattr(command, "_help_option", None)]:
        if isinstance(param, TyperArgument):
            if param.metavar is None and param.name:
                param.metavar = _METAVARS.get(param.name, param.name.upper())
            param.__class__ = _PlainArgument
        elif isinstance(param, TyperOption) and param.metavar is None:
            if param.is_flag:
                param.metavar = ""
            elif param.name:
                param.metavar = _METAVARS.get(param.name, param.name.upper())
    for sub in getattr(command, "commands", {}).values():
        _plain_metavars(sub)


class PlanfenceGroup(TyperGroup):
    """The root group: usage errors exit EXIT_USAGE, help shows plain metavars, plain values
    are converted without pydantic (see `coerce`)."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        _plain_metavars(self)
        install_plain_coercion(self)  # no pydantic on the way to a command

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except Exception as exc:
            _usage_exit_code(exc)
            raise

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            _usage_exit_code(exc)
            raise


def _usage_exit_code(exc: BaseException) -> None:
    """Give a usage error (typo, missing option, typer.BadParameter) the usage exit code."""
    if isinstance(exc, UsageError):
        exc.exit_code = EXIT_USAGE
