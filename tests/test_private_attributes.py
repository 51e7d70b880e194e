"""No module of `planfence_net` leans on another's internals: its dependencies' (anyio, typer,
click, ...) or another module's of our own.

A private name is one with a leading underscore that is not a dunder. A module may read
`obj._name` only when it defines `_name` itself (an attribute it assigns or a method it
defines, as `holder._wire` in the class that owns `_wire`); it never imports a private
module or name of a dependency (`typer._click`, `from anyio._core import ...`), never names a
private attribute as a string (`getattr(stream, "_transport")`) and never swaps an object's
class (`obj.__class__ = ...`). A release of a dependency that moves an internal then cannot
break us: only pins would hold it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "planfence_net"
DEPENDENCIES = ("anyio", "typer", "click", "msgpack", "nacl", "aiosqlite", "rich", "uvloop")
# Public API spelled with an underscore by the standard library.
PUBLIC = {"_exit", "_replace", "_asdict", "_fields", "_make", "_field_defaults"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in PUBLIC


def _defined_here(tree: ast.AST) -> set[str]:
    """Private names this module defines: attributes it assigns, functions, classes."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)  # class attributes and slots
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __slots__ = ("_x", ...)
    return {name for name in names if _private(name)}


def _dependency(module: str) -> bool:
    return module.split(".")[0] in DEPENDENCIES


def findings(source: str, where: str) -> list[str]:
    """`where:line: what` for every reach into another module's internals in `source`."""
    tree = ast.parse(source)
    own = _defined_here(tree)
    found: list[tuple[int, str]] = []

    def add(node: ast.AST, what: str) -> None:
        found.append((getattr(node, "lineno", 0), what))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _dependency(alias.name) and any(map(_private, alias.name.split("."))):
                    add(node, f"imports private module {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if _dependency(node.module):
                if any(map(_private, node.module.split("."))):
                    add(node, f"imports from private module {node.module}")
                for alias in node.names:
                    if _private(alias.name):
                        add(node, f"imports private name {alias.name} from {node.module}")
        elif isinstance(node, ast.Attribute):
            if node.attr == "__class__" and isinstance(node.ctx, ast.Store):
                add(node, "swaps an object's class")
            elif _private(node.attr) and node.attr not in own:
                add(node, f"reads private attribute .{node.attr} it does not define")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
        ):
            add(node, f"{node.func.id}(..., {node.args[1].value!r})")
    return [f"{where}:{line}: {what}" for line, what in sorted(found)]


def test_the_checker_finds_what_it_forbids() -> None:
    source = """
import typer._click
from anyio._core._eventloop import get_async_backend
from click import _compat
stream._transport.pause_reading()
getattr(stream, "_protocol")
command.__class__ = Other
class Mine:
    def __init__(self):
        self._wire = None
    def peer(self, other):
        return other._wire, other.__dict__, self._asdict()
"""
    assert [line.split(": ", 1)[1] for line in findings(source, "m.py")] == [
        "imports private module typer._click",
        "imports from private module anyio._core._eventloop",
        "imports private name _compat from click",
        "reads private attribute ._transport it does not define",
        "getattr(..., '_protocol')",
        "swaps an object's class",
    ]


def test_no_module_reads_another_modules_internals() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += findings(path.read_text(), str(path.relative_to(PACKAGE.parent)))
    assert found == []


# -- every file, tests and scripts too: private names of the CLI framework ---------------

ROOT = Path(__file__).resolve().parents[1]
CLI_DEPENDENCIES = ("click", "typer")
CLI_PRIVATE = re.compile(
    rf"\b(?:{'|'.join(CLI_DEPENDENCIES)})\._\w+|_protected_args|\.__class__\s*=(?!=)",
)


def cli_offenders(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if CLI_PRIVATE.search(line)]


def test_the_check_finds_each_kind_of_private_use() -> None:
    assert cli_offenders(
        "from typer._coercion import x\nimport click._compat\nctx._protected_args\n"
        "param.__class__ = Plain\nclick.echo('ok')\nif a.__class__ == b: pass\n"
    ) == [
        "from typer._coercion import x",
        "import click._compat",
        "ctx._protected_args",
        "param.__class__ = Plain",
    ]


def test_no_module_uses_a_private_name_of_click_or_typer() -> None:
    found = {
        str(path.relative_to(ROOT)): hits
        for folder in ("planfence_net", "tests", "scripts")
        for path in sorted((ROOT / folder).rglob("*"))
        if path.is_file()
        and (path.suffix == ".py" or (folder == "scripts" and not path.suffix))
        and path != Path(__file__).resolve()
        and (hits := cli_offenders(path.read_text(errors="replace")))
    }
    assert found == {}
