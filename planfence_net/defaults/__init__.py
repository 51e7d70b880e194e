"""The project's default data, carried inside the wheel.

The top-level `owners/`, `executor/` and `traces/` folders of the project are mapped in as
`planfence_net.defaults.owners`, `.executor` and `.traces` (pyproject.toml), so an installed
`planfence` reads them with importlib.resources and never looks for a checkout.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def data_dir(folder: str) -> Path:
    """The folder of default data `folder` as a path (the wheel installs it unzipped)."""
    return Path(str(files(f"{__name__}.{folder}")))
