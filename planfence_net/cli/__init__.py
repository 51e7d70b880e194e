"""The `planfence` command: the composition root, one module per command group.

`main` builds the typer app; the modules here are thin shells over the library.
"""

from __future__ import annotations


def main() -> None:
    """Console-script entry point."""
    from .main import app

    app()
