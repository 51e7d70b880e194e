"""No module reaches into a dependency's private names (an internal that moves in a release
would stop every command): no `from click._x`, `typer._x`, no `click._x` attribute, no
`_protected_args` of a click context, no object's class swapped at run time."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEPENDENCIES = ("click", "typer")
PRIVATE = re.compile(
    rf"\b(?:{'|'.join(DEPENDENCIES)})\._\w+|_protected_args|\.__class__\s*=(?!=)",
)


def offenders(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if PRIVATE.search(line)]


def test_the_check_finds_each_kind_of_private_use() -> None:
    assert offenders(
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
        and (hits := offenders(path.read_text(errors="replace")))
    }
    assert found == {}
