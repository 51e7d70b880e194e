"""Each layer of `planfence_net` imports only the layers below it.

core < protocol < net < cluster < owners, executor, traces < workspace, bench < cli. The
table below is the architecture (docs/ARCHITECTURE.md draws the same picture); a new import
across layers either fits it or changes it here, on purpose.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "planfence_net"
BELOW_OWNERS = {"core", "protocol", "net", "cluster", "defaults"}
ALLOWED: dict[str, set[str]] = {
    "defaults": set(),
    "core": set(),
    "protocol": {"core"},
    "net": {"core", "protocol"},
    "cluster": {"core", "protocol", "net", "defaults"},
    "owners": BELOW_OWNERS,
    "executor": BELOW_OWNERS,
    "traces": BELOW_OWNERS,
    "workspace": BELOW_OWNERS | {"owners", "executor", "traces"},
    "bench": BELOW_OWNERS | {"owners", "executor", "traces"},
    "mcp": BELOW_OWNERS | {"owners", "executor", "traces", "workspace"},
    "cli": BELOW_OWNERS | {"owners", "executor", "traces", "workspace", "bench", "mcp"},
    "__main__": {"cli"},
    "__init__": {"core", "net", "cluster", "executor"},  # the public API, loaded on first use
}


def layer_imports(package: Path) -> dict[str, set[str]]:
    """For each top-level layer of `package` (a folder or a module), the other layers of the
    same package that its modules import, relative or absolute."""
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        layer = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        where = [package.name, *rel.with_suffix("").parts[:-1]]
        targets = found.setdefault(layer, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    target = where[: len(where) - node.level + 1] + (node.module or "").split(".")
                    if not node.module:
                        target = target[:-1] + [alias.name for alias in node.names[:1]]
                else:
                    target = (node.module or "").split(".")
                names = [target]
            elif isinstance(node, ast.Import):
                names = [alias.name.split(".") for alias in node.names]
            else:
                continue
            targets.update(t[1] for t in names if len(t) > 1 and t[0] == package.name)
    return {layer: targets - {layer} for layer, targets in found.items()}


def violations(imports: dict[str, set[str]]) -> list[str]:
    """`layer -> other` for every import the ALLOWED table does not permit (and unknown layers)."""
    return sorted(
        f"{layer} -> {other}"
        for layer, others in imports.items()
        for other in others
        if other not in ALLOWED.get(layer, set())
    )


def test_every_layer_imports_only_layers_below_it() -> None:
    imports = layer_imports(PACKAGE)
    assert set(imports) == set(ALLOWED)  # every layer is in the table, and the walk saw them
    assert imports["cli"] >= {"bench", "workspace", "owners"}  # the walk sees real imports
    assert violations(imports) == []


def test_a_forbidden_import_is_found(tmp_path: Path) -> None:
    """The check fails on an upward import, relative or absolute, at any depth."""
    package = tmp_path / "planfence_net"
    for folder, text in {
        "core": "from ..net.client import Session\n",
        "protocol": "import planfence_net.owners.store\n",
        "net/deep": "from ... import bench\n",
        "executor": "from ..core import records\n",
    }.items():
        (package / folder).mkdir(parents=True)
        (package / folder / "m.py").write_text(text)
    assert violations(layer_imports(package)) == [
        "core -> net",
        "net -> bench",
        "protocol -> owners",
    ]
