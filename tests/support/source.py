"""Reading our own source without importing it.

defined_names   the names bound at a module's top level (functions, classes, assignments,
                imports)
"""

from __future__ import annotations

import ast
from pathlib import Path


def defined_names(module: Path) -> set[str]:
    """Names bound at the top level of a module's source, without importing it."""
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names
