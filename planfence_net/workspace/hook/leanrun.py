"""Runs the lean hook client (`lean.py`) as a script: `PYTHON -I -S .../leanrun.py ARGS`.

A script is compiled anew at every start; a module imported from here is loaded from its
cached bytecode, so this file holds only the import (`installers/leanhook.py` writes the
command line that names it).
"""

import os
import sys

if __name__ == "__main__":
    sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))]
    from lean import main  # type: ignore[import-not-found]

    sys.exit(main(sys.argv[1:]))
