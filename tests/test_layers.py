"""Each layer of `planfence_net` imports only the layers below it.

defaults, core < protocol < net < cluster < owners, executor, traces < workspace, bench < mcp,
view < cli. The table below is the architecture (docs/ARCHITECTURE.md draws the same picture, and a
test below fails when the two differ); a new import across layers either fits it or changes
it here, on purpose.
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
    "view": BELOW_OWNERS | {"owners", "executor", "traces", "workspace"},
    "cli": BELOW_OWNERS | {"owners", "executor", "traces", "workspace", "bench", "mcp", "view"},
    "__main__": {"cli"},
    "__init__": {"core", "net", "cluster", "executor"},  # the public API, loaded on first use
}

# The wings' own folders, bottom to top: each imports only the folders before it.
WORKSPACE: dict[str, set[str]] = {
    "model": set(),  # pure values: facts, drift classes, payloads, read commands, intents
    "clients": {"model"},  # each client's payloads mapped into the normalized form and back
    "place": {"model"},  # on disk: paths, anchor, config, caches, observation
    "plans": {"model", "place"},  # the use cases every front door calls
    "installers": {"model", "clients", "place", "plans"},  # clients' settings, trust, git gate
    "hook": {"model", "clients", "place", "plans", "installers"},  # the hook client
    "owner": {"model", "clients", "place", "plans", "installers", "hook"},  # the owner
    "__init__": set(),
}
BENCH: dict[str, set[str]] = {
    "policies": set(),  # PlanFence and the baselines, their writers, the central store
    "perf": set(),  # speed against etcd, load and growth curves
    "paper": {"policies"},  # the paper's experiments: workloads, harness, oracle, reports
    "partition": {"paper"},  # owners in network namespaces
    "live": {"paper"},  # the live team of small local models
    "torture": {"policies", "paper", "partition"},  # the fail-closed lab
    "packets": {"paper", "partition"},  # packet-level links in network namespaces
    "__init__": set(),
}
WINGS = {("workspace",): WORKSPACE, ("bench",): BENCH}
MAX_MODULES = 20  # a folder past this is a module soup: it gets sub-packages


def layer_imports(package: Path, inside: tuple[str, ...] = ()) -> dict[str, set[str]]:
    """For each top-level layer of `package` (a folder or a module), the other layers of the
    same package that its modules import, relative or absolute. With `inside` (a folder of
    the package, as its parts), the same for that folder's own sub-layers."""
    found: dict[str, set[str]] = {}
    folder = package.joinpath(*inside)
    prefix = [package.name, *inside]
    for path in sorted(folder.rglob("*.py")):
        rel = path.relative_to(folder)
        layer = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        where = [*prefix, *rel.with_suffix("").parts[:-1]]
        targets = found.setdefault(layer, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    target = where[: len(where) - node.level + 1] + (node.module or "").split(".")
                    if not node.module:  # `from .. import x`: x is a module, or a name of `..`
                        module = target[:-1] + [alias.name for alias in node.names[:1]]
                        there = package.parent.joinpath(*module)
                        if there.is_dir() or there.with_suffix(".py").is_file():
                            target = module
                else:
                    target = (node.module or "").split(".")
                names = [target]
            elif isinstance(node, ast.Import):
                names = [alias.name.split(".") for alias in node.names]
            else:
                continue
            depth = len(prefix)
            targets.update(
                t[depth] for t in names if len(t) > depth and t[:depth] == prefix and t[depth]
            )
    return {layer: targets - {layer} for layer, targets in found.items()}


def violations(imports: dict[str, set[str]], allowed: dict[str, set[str]] = ALLOWED) -> list[str]:
    """`layer -> other` for every import the `allowed` table does not permit (and unknown layers)."""
    return sorted(
        f"{layer} -> {other}"
        for layer, others in imports.items()
        for other in others
        if other not in allowed.get(layer, set())
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
    (package / "bench").mkdir()  # `from ... import bench` names a module only if there is one
    assert violations(layer_imports(package)) == [
        "core -> net",
        "net -> bench",
        "protocol -> owners",
    ]


def test_each_wing_imports_only_its_folders_below() -> None:
    for inside, allowed in WINGS.items():
        imports = layer_imports(PACKAGE, inside)
        assert set(imports) == set(allowed), inside
        assert violations(imports, allowed) == [], inside
    assert layer_imports(PACKAGE, ("workspace",))["owner"] >= {"hook", "model"}


def test_an_upward_import_inside_a_wing_is_found(tmp_path: Path) -> None:
    package = tmp_path / "planfence_net"
    for folder, text in {
        "workspace/model": "from ..plans.trust import trust\n",
        "workspace/place": "from planfence_net.workspace.hook import run\n",
        "workspace/plans": "from ..model import facts\n",
    }.items():
        (package / folder).mkdir(parents=True)
        (package / folder / "m.py").write_text(text)
    imports = layer_imports(package, ("workspace",))
    assert violations(imports, WORKSPACE) == ["model -> plans", "place -> hook"]


def test_no_folder_of_the_package_holds_more_than_twenty_modules() -> None:
    sizes = {
        str(folder.relative_to(PACKAGE.parent)): len(list(folder.glob("*.py")))
        for folder in [PACKAGE, *PACKAGE.rglob("*")]
        if folder.is_dir() and folder.name != "__pycache__"
    }
    assert sizes["planfence_net/workspace/plans"] > 5  # the count sees real folders
    assert {folder: n for folder, n in sizes.items() if n > MAX_MODULES} == {}


def documented_imports(text: str) -> dict[str, set[str]]:
    """Layer (or `wing/folder`) -> the "may import" cell of its row in docs/ARCHITECTURE.md's
    layer tables: `| core | `core/`: ... | nothing | ... |`, `| `bench/paper/` | ... | policies | ... |`."""
    found: dict[str, set[str]] = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(" | ")]
        if len(cells) < 4 or not line.startswith("| ") or not cells[1].startswith("`"):
            continue
        name = cells[0].removeprefix("| ").strip("`").rstrip("/")
        found[name] = set() if cells[2] == "nothing" else set(cells[2].split(", "))
    return found


def test_the_architecture_document_draws_these_tables() -> None:
    documented = documented_imports((PACKAGE.parent / "docs" / "ARCHITECTURE.md").read_text())
    expected = {name: allowed for name, allowed in ALLOWED.items() if not name.startswith("__")}
    for (wing,), table in WINGS.items():
        expected.update(
            {f"{wing}/{name}": allowed for name, allowed in table.items() if name != "__init__"}
        )
    assert documented["bench/torture"] == {"policies", "paper", "partition"}  # the parse works
    assert documented == expected
