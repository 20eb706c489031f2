#!/usr/bin/env bash
# install-sdks.sh - install the pinned E2B Desktop SDK that test/desktop
# runs against spaced: e2b-desktop (PyPI), pytest and Pillow (to read the
# screenshots' pixels) into test/desktop/.venv, from python/requirements.txt.
# Skipped when its marker says the same pins are already installed.
# Needs python3 (with venv) and access to PyPI.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"

pins="$(sha256sum "$HERE/python/requirements.txt" | cut -c1-16)"
if [ "$(cat "$HERE/.venv/.installed" 2>/dev/null)" != "$pins" ]; then
  echo "install-sdks: python venv at $HERE/.venv" >&2
  rm -rf "$HERE/.venv"
  "$PYTHON" -m venv "$HERE/.venv"
  "$HERE/.venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --no-input -r "$HERE/python/requirements.txt"
  echo "$pins" > "$HERE/.venv/.installed"
fi
echo "install-sdks: e2b-desktop $("$HERE/.venv/bin/python" -c 'import importlib.metadata as m; print(m.version("e2b-desktop"))') (python)" >&2
