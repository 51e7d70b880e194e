"""docs/ARCHITECTURE.md and the README's layout table name only what exists, and every folder
and module of the package has its row, so the documents cannot drift from the tree.

Module paths in the text (`owners/ops.py`, `tests/owners/test_owner.py`) must be files, a
`folder/module.name` must name something the module defines, and each row of the layer
tables lists exactly the modules (or sub-folders) of its folder. Which layer may import
which is checked against the layer tables themselves in tests/test_layers.py.
"""

from __future__ import annotations

import re
from pathlib import Path

from support.source import defined_names

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "planfence_net"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
WINGS = ("workspace", "bench")
OUTSIDE_PACKAGE = ("tests/", "scripts/", "docs/", "planfence_net/")

FILE = re.compile(r"(?<![\w/.-])((?:[a-z_0-9]+/)+[a-z_0-9]+\.py)\b")
DOTTED = re.compile(r"`((?:[a-z_0-9]+/)+[a-z_0-9]+)\.([A-Za-z_]\w*)`")
CODE = re.compile(r"`([^`]+)`")


def file_of(path: str, root: Path = ROOT) -> Path:
    """Where a path named in the docs lives: under the checkout for tests/, scripts/, docs/
    and planfence_net/, else under the package (the docs name modules from the package)."""
    return root / path if path.startswith(OUTSIDE_PACKAGE) else root / "planfence_net" / path


def missing_paths(text: str, root: Path = ROOT) -> list[str]:
    """Every `a/b.py` and `a/b.name` in `text` whose file, or name in it, does not exist."""
    missing = [path for path in FILE.findall(text) if not file_of(path, root).is_file()]
    for module, name in DOTTED.findall(text):
        if name == "py":
            continue  # a file, checked above
        source = file_of(f"{module}.py", root)
        if not source.is_file() or name not in defined_names(source):
            missing.append(f"{module}.{name}")
    return sorted(set(missing))


def table_rows(text: str) -> list[list[str]]:
    """The cells of every Markdown table row of `text` (an escaped `\\|` stays in its cell)."""
    return [
        [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        for line in text.splitlines()
        if line.startswith("|") and not line.startswith("|---")
    ]


def listed(where: str) -> tuple[str, set[str]]:
    """`folder/` and the names after its colon, from a "where" cell: "`core/`: `records`, ..."."""
    names = CODE.findall(where.partition(":")[2].partition("(")[0])
    return CODE.findall(where)[0], {name.rstrip("/") for name in names}


def modules(folder: Path) -> set[str]:
    return {path.stem for path in folder.glob("*.py") if path.name != "__init__.py"}


def packages(folder: Path) -> set[str]:
    return {path.parent.name for path in folder.glob("*/__init__.py")}


def layer_rows(text: str) -> dict[str, set[str]]:
    """Folder -> the modules (or, for a wing, sub-folders) its row of a layer table lists.
    Top table rows: `layer | `folder/`: `m`, ... | ...`; wing rows: `` `w/f/` | `m`, ... | ...``."""
    rows: dict[str, set[str]] = {}
    for cells in table_rows(text):
        if len(cells) < 3 or not cells[1].startswith("`"):
            continue
        if cells[0].startswith("`") and cells[0].endswith("/`"):  # a wing's folder
            rows[cells[0].strip("`").rstrip("/")] = set(CODE.findall(cells[1]))
        elif CODE.findall(cells[1])[0].endswith("/"):
            folder, names = listed(cells[1])
            rows[folder.rstrip("/")] = names
    return rows


def test_every_path_the_architecture_names_exists() -> None:
    text = ARCHITECTURE.read_text()
    assert len(FILE.findall(text)) > 40  # the walk sees the document's paths
    assert "core/answers.verified_records" in {f"{m}.{n}" for m, n in DOTTED.findall(text)}
    assert missing_paths(text) == []


def test_a_stale_path_is_found() -> None:
    text = (
        "`owners/ops.py`, `workspace/wire.py`, `tests/owners/test_owner.py`, "
        "`core/answers.verified_records`, `net/client.no_such_name`, scripts/bench-latency"
    )
    assert missing_paths(text) == ["net/client.no_such_name", "workspace/wire.py"]


def test_every_folder_of_the_package_has_its_row_with_every_module() -> None:
    rows = layer_rows(ARCHITECTURE.read_text())
    expected = {
        name: packages(PACKAGE / name) if name in WINGS else modules(PACKAGE / name)
        for name in packages(PACKAGE)
    }
    for wing in WINGS:
        expected.update(
            {f"{wing}/{sub}": modules(PACKAGE / wing / sub) for sub in packages(PACKAGE / wing)}
        )
    assert "workspace/plans" in expected and "defaults" in expected  # the walk sees the tree
    assert {folder: sorted(names) for folder, names in rows.items()} == {
        folder: sorted(names) for folder, names in expected.items()
    }


def test_a_row_that_misses_a_module_is_found() -> None:
    text = (
        "| core | `core/`: `records`, `gate` | nothing | values |\n"
        "| `bench/perf/` | `latency`, `load` | nothing | speed |\n"
        "| cli | `cli/` (see below) | all | the command |\n"
    )
    assert layer_rows(text) == {
        "core": {"records", "gate"},
        "bench/perf": {"latency", "load"},
        "cli": set(),
    }


def test_the_readme_layout_names_every_folder_of_the_package() -> None:
    readme = (ROOT / "README.md").read_text()
    layout = readme.partition("\n## Layout\n")[2].partition("\n## ")[0]
    named = {cells[0].strip("`").rstrip("/") for cells in table_rows(layout) if cells}
    assert named >= packages(PACKAGE), packages(PACKAGE) - named
    assert missing_paths(layout) == []
