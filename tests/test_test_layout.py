"""No test module imports from another test module.

What several tests share lives in a helper module (tests/support/, or a wing's own helpers
such as tests/agents/clients.py) or in a conftest.py fixture: a test module is a leaf, so
moving, renaming or deleting one never breaks another.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def is_test_module(name: str) -> bool:
    """True for a dotted module name whose last part names a test module (test_*)."""
    return name.rpartition(".")[2].startswith("test_")


def imported_test_modules(source: str) -> list[str]:
    """The test modules `source` imports, as written (relative names keep their dots):
    `import test_x`, `from pkg.test_x import y`, `from .test_x import y`, `from . import
    test_x`. Imports inside functions count too."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if is_test_module(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if node.module and is_test_module(node.module):
                found.append(module)
            elif not node.module or node.level:  # `from . import test_x`
                found += [
                    f"{module}{'' if module.endswith('.') else '.'}{alias.name}"
                    for alias in node.names
                    if is_test_module(alias.name)
                ]
    return found


def test_no_test_module_imports_another() -> None:
    offenders = {
        str(path.relative_to(TESTS)): imported
        for path in sorted(TESTS.rglob("test_*.py"))
        if (imported := imported_test_modules(path.read_text()))
    }
    assert offenders == {}


def test_the_check_catches_each_way_of_importing_a_test_module() -> None:
    source = """
import test_gate
import support.fakeowner
from .test_real_clients import PATCH
from workspace.test_intents import A
from . import test_proxy, clients
from .. import workspaces
from support.team import trust

def later():
    from .test_hook_auto import PLAN
"""
    assert sorted(imported_test_modules(source)) == sorted(
        [
            "test_gate",
            ".test_real_clients",
            "workspace.test_intents",
            ".test_proxy",
            ".test_hook_auto",
        ]
    )
