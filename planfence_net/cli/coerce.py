"""Command-line values converted without pydantic, so a one-shot command starts at once.

Typer (0.29) converts every parameter through a pydantic TypeAdapter: importing pydantic and
building the adapters costs about 60 ms per process, a third of what an agent hook may spend
on `planfence authorize`. Our commands take plain values (str, bool, int, float, Path, lists
of str), so `plain_coercion` converts those directly. Anything it is not sure about (another
type, a min/max range, an odd-looking number, a value of an unexpected shape) goes to typer's
own converter, which raises the same errors and messages as before.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)")


class _Unsure(Exception):
    """This value is left to typer's converter."""


def _str(value: Any) -> Any:
    if isinstance(value, str):
        return value
    raise _Unsure


def _bool(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    raise _Unsure


def _int(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _INT.fullmatch(value):
        return int(value)
    raise _Unsure


def _float(value: Any) -> Any:
    if isinstance(value, float):
        return value
    if isinstance(value, str) and _FLOAT.fullmatch(value):
        return float(value)
    raise _Unsure


_CONVERTERS: dict[Any, Callable[[Any], Any]] = {str: _str, bool: _bool, int: _int, float: _float}


class PlainCoercion:
    """Stands in for typer's runtime converter of one parameter (`coerce(value, param, ctx)`)."""

    def __init__(self, convert: Callable[[Any, Any, Any], Any]) -> None:
        self._convert = convert

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        multi = param.multiple or param.nargs == -1
        if value is None:
            return () if multi else None
        try:
            if multi:
                if not isinstance(value, (list, tuple)):
                    raise _Unsure
                return [self._convert(item, param, ctx) for item in value]
            return self._convert(value, param, ctx)
        except _Unsure:
            from typer._coercion import build_runtime_param

            return build_runtime_param(param.type_descriptor).coerce(value, param=param, ctx=ctx)


def _path(value: Any, param: Any, ctx: Any) -> Any:
    from typer._param_types import coerce_cli_path  # the flag checks (exists, ...) stay typer's

    if not isinstance(value, (str, Path)):
        raise _Unsure
    return coerce_cli_path(
        Path(value), param.type_descriptor.parameter_info, path_type=Path, param=param, ctx=ctx
    )


def plain_coercion(param: Any) -> PlainCoercion | None:
    """A converter for `param` when its type is a plain one we convert; else None."""
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None or not hasattr(param, "_runtime_param"):
        return None
    info = descriptor.parameter_info
    if info.parser is not None or getattr(info, "click_type", None) is not None:
        return None
    annotation = descriptor.annotation
    if getattr(annotation, "__origin__", None) is list and annotation.__args__ == (str,):
        annotation = str
    if annotation is Path and info.path_type is None:
        return PlainCoercion(_path)
    convert = _CONVERTERS.get(annotation)
    if convert is None or info.min is not None or info.max is not None or info.clamp:
        return None
    return PlainCoercion(lambda value, _param, _ctx: convert(value))


def install(command: Any) -> None:
    """Give every plain parameter of `command` and its subcommands the plain converter."""
    for param in [*getattr(command, "params", []), getattr(command, "_help_option", None)]:
        converter = plain_coercion(param)
        if converter is not None:
            param._runtime_param = converter
    for sub in getattr(command, "commands", {}).values():
        install(sub)
