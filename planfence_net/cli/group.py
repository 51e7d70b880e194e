"""The `planfence` command groups on plain click: exit codes and help that mean one thing each.

Exit codes of every command:

    0   success (authorize: authorized)
    1   error: one line on stderr saying what went wrong
    2   stale: a declared dependency drifted; replan and retry (authorize, workspace check)
    3   blocked for another reason (authorize: owner unavailable, missing lineage, ...)
    64  usage error: unknown command or option, missing or malformed argument (EX_USAGE)

Click gives usage errors exit 2, the code a script reads as "replan and retry"; a typo in
such a script would loop forever. `PlanfenceGroup` gives every `click.UsageError` (raised
while parsing or by a command body, e.g. `click.BadParameter`) the exit code 64 through the
exception's public `exit_code`. Commands are declared as functions with `params.Option` and
`params.Argument` defaults and added with `Group.command(name)`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import click

EXIT_OK, EXIT_ERROR, EXIT_STALE, EXIT_BLOCKED, EXIT_USAGE = 0, 1, 2, 3, 64

EXIT_CODES_HELP = (
    "Exit codes: 0 success (authorize: authorized); 1 error, one line on "
    "stderr; 2 stale plan, replan and retry (authorize, workspace check); "
    "3 blocked (authorize); 64 usage error."
)

F = TypeVar("F", bound=Callable[..., Any])


class Group(click.Group):
    """A click group that lists its commands in the order they were added and builds a
    command from a function's signature (see `params`)."""

    def __init__(self, name: str, *, help: str, **attrs: Any) -> None:
        attrs.setdefault("no_args_is_help", True)
        super().__init__(name, help=help, **attrs)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

    def command(self, name: str, **settings: Any) -> Callable[[F], F]:  # type: ignore[override]
        """Decorator: add a command called `name` running the function; the function stays
        callable as it is. `settings` go to click.Command (e.g. context_settings)."""

        from .params import params_of  # not needed by `planfence --help`

        def add(fn: F) -> F:
            params, wants_context = params_of(fn)
            callback = click.pass_context(fn) if wants_context else fn
            help_text = inspect.getdoc(fn)
            self.add_command(
                click.Command(name, callback=callback, params=params, help=help_text, **settings)
            )
            return fn

        return add


class PlanfenceGroup(Group):
    """The root group: usage errors exit EXIT_USAGE instead of click's 2."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as exc:
            _usage_exit_code(exc)
            raise

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            _usage_exit_code(exc)
            raise


def _usage_exit_code(exc: click.UsageError) -> None:
    """Click exits with the exception's `exit_code` (typed as a class variable; this one
    error, shown as click shows it, gets the usage code)."""
    exc.exit_code = EXIT_USAGE  # type: ignore[misc]
