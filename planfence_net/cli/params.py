"""Command parameters declared as typed defaults and built into plain click parameters.

A command is a plain function whose parameters carry their command-line form as defaults:

    def put(path: Path = Argument(help="Cluster folder."),
            kind: str = Option("fact", "--kind", help="fact, plan, action, ..."),
            parent: list[str] = Option([], "--parent", help="Parent record id (repeat).")): ...

`params_of(fn)` reads the signature: the annotation gives the click type (str, int, float,
Path, a bool flag, `list[str]` for a repeated option or a variadic argument, `X | None` for
one that may be absent), the default gives the declaration; `...` marks a required value.
Click converts every value itself, so a one-shot command loads nothing else.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import NoneType, UnionType
from typing import Any

import click

REQUIRED: Any = ...

# parameter name -> what the user types; the others show their upper-case name
METAVARS = {
    "as_agent": "AGENT",
    "parent": "ID",
    "root": "ID",
    "ids": "ID",
    "keys": "KEY",
    "dep": "KEY",
    "path": "DIR",
}


@dataclass(frozen=True, slots=True)
class OptionSpec:
    default: Any
    decls: tuple[str, ...]
    help: str | None
    min: float | None
    max: float | None
    metavar: str | None
    choices: tuple[str, ...] | None
    is_eager: bool
    callback: Callable[[Any], Any] | None
    show_default: bool
    hidden: bool


@dataclass(frozen=True, slots=True)
class ArgumentSpec:
    default: Any
    help: str | None
    metavar: str | None


def Option(  # noqa: N802 - reads as the declaration it is
    default: Any = REQUIRED,
    *decls: str,
    help: str | None = None,
    min: float | None = None,
    max: float | None = None,
    metavar: str | None = None,
    choices: Sequence[str] | None = None,
    is_eager: bool = False,
    callback: Callable[[Any], Any] | None = None,
    show_default: bool = True,
    hidden: bool = False,
) -> Any:
    """An option: `--name` from the parameter's name unless `decls` give the flags.
    `choices` makes any other value a usage error; `min`/`max` bound a number; a `hidden`
    one is read but not shown in --help (an old name kept working)."""
    return OptionSpec(
        default,
        decls,
        help,
        min,
        max,
        metavar,
        None if choices is None else tuple(choices),
        is_eager,
        callback,
        show_default,
        hidden,
    )


def Argument(  # noqa: N802
    default: Any = REQUIRED, *, help: str | None = None, metavar: str | None = None
) -> Any:
    """A positional argument; `list[str]` takes one or more values."""
    return ArgumentSpec(default, help, metavar)


def _split(annotation: Any) -> tuple[Any, bool, bool]:
    """(base type, may be None, is a list) of an annotation."""
    optional = False
    if isinstance(annotation, UnionType) or typing.get_origin(annotation) is typing.Union:
        members = [a for a in typing.get_args(annotation) if a is not NoneType]
        optional = len(members) < len(typing.get_args(annotation))
        annotation = members[0] if len(members) == 1 else str
    if typing.get_origin(annotation) is list:
        return typing.get_args(annotation)[0], optional, True
    return annotation, optional, False


def _click_type(base: Any, low: float | None, high: float | None) -> Any:
    if base is int:
        return click.INT if low is None and high is None else click.IntRange(low, high)  # type: ignore[arg-type]
    if base is float:
        return click.FLOAT if low is None and high is None else click.FloatRange(low, high)
    if base is Path:
        return click.Path(path_type=Path)
    return click.STRING


def _option(name: str, annotation: Any, spec: OptionSpec) -> click.Option:
    base, _, multiple = _split(annotation)
    decls = list(spec.decls) or [f"--{name.replace('_', '-')}"]
    required = spec.default is REQUIRED
    default = None if required else spec.default
    given: dict[str, Any] = (
        {} if required else {"default": tuple(default or ()) if multiple else default}
    )
    kind = (
        click.Choice(spec.choices)
        if spec.choices is not None
        else _click_type(base, spec.min, spec.max)
    )
    callback = None
    if spec.callback is not None:
        hook = spec.callback
        callback = lambda ctx, param, value: hook(value)  # noqa: E731
    if base is bool:
        return click.Option(
            [name, *decls],
            is_flag=True,
            default=bool(default),
            help=spec.help,
            is_eager=spec.is_eager,
            callback=callback,
        )
    return click.Option(
        [name, *decls],
        type=kind,
        required=required,
        multiple=multiple,
        metavar=spec.metavar or METAVARS.get(name, name.upper()),
        help=spec.help,
        show_default=spec.show_default,
        is_eager=spec.is_eager,
        callback=callback,
        hidden=spec.hidden,
        **given,  # a required value gets no default: click then reports it missing
    )


def _argument(name: str, annotation: Any, spec: ArgumentSpec) -> click.Argument:
    base, optional, many = _split(annotation)
    required = spec.default is REQUIRED
    return click.Argument(
        [name],
        help=spec.help,
        type=_click_type(base, None, None),
        required=required,
        nargs=-1 if many else 1,
        **({} if required else {"default": spec.default}),
        metavar=spec.metavar or METAVARS.get(name, name.upper()),
    )


def params_of(fn: Callable[..., Any]) -> tuple[list[click.Parameter], bool]:
    """The click parameters of `fn` (in signature order) and whether it takes the click
    Context first. Raises TypeError for a parameter declared without Option or Argument."""
    target = inspect.unwrap(fn)
    hints = typing.get_type_hints(target)
    params: list[click.Parameter] = []
    wants_context = False
    for name, parameter in inspect.signature(target).parameters.items():
        annotation = hints.get(name, str)
        spec = parameter.default
        if annotation is click.Context:
            wants_context = True
        elif isinstance(spec, OptionSpec):
            params.append(_option(name, annotation, spec))
        elif isinstance(spec, ArgumentSpec):
            params.append(_argument(name, annotation, spec))
        else:
            raise TypeError(f"{fn.__qualname__}: parameter {name!r} needs Option() or Argument()")
    return params, wants_context
