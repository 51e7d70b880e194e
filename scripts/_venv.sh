# Sourced by scripts/demo and scripts/test: make .venv (when missing) and install the project.
# Needs only a Python 3.11+ on PATH (python3.11, python3 or python).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
  py=""
  for candidate in python3.11 python3.12 python3.13 python3 python; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      py="$candidate"; break
    fi
  done
  [ -n "$py" ] || { echo "error: planfence-net needs Python 3.11 or newer on PATH" >&2; exit 1; }
  echo "setting up $venv with $($py --version)" >&2
  "$py" -m venv "$venv"
fi
stamp="$venv/.installed-$(cat "$root/pyproject.toml" | cksum | cut -d' ' -f1)-${PLANFENCE_EXTRAS:-base}"
if [ ! -e "$stamp" ]; then
  echo "installing planfence-net into $venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$root${PLANFENCE_EXTRAS:+[$PLANFENCE_EXTRAS]}" >&2
  rm -f "$venv"/.installed-* && touch "$stamp"
fi
export PATH="$venv/bin:$PATH"
