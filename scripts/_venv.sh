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
# One stamp per set of extras installed for this pyproject.toml: the test extras include
# everything the demo needs, so `scripts/demo` after `scripts/test` installs nothing (and the
# other way round installs only the test tools).
sum="$(cksum < "$root/pyproject.toml" | cut -d' ' -f1)"
extras="${PLANFENCE_EXTRAS:-base}"
stamp="$venv/.installed-$sum-$extras"
installed() {
  [ -e "$stamp" ] || { [ "$extras" = base ] && compgen -G "$venv/.installed-$sum-*" >/dev/null; }
}
if ! installed; then
  echo "installing planfence-net into $venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$root${PLANFENCE_EXTRAS:+[$PLANFENCE_EXTRAS]}" >&2
  find "$venv" -maxdepth 1 -name '.installed-*' ! -name ".installed-$sum-*" -delete
  touch "$stamp"
fi
export PATH="$venv/bin:$PATH"
