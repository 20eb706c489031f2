#!/usr/bin/env bash
# install-sdks.sh SUITE_DIR [PYPI_DIST NPM_PACKAGE] - install the pinned SDKs an
# SDK suite (test/e2b, test/desktop, test/interpreter) runs against spaced:
#   Python: SUITE_DIR/python/requirements.txt into SUITE_DIR/.venv
#   JS:     SUITE_DIR/js/package-lock.json into SUITE_DIR/js/node_modules (npm ci)
# Each install is skipped when its marker says the same pins are already
# installed. With PYPI_DIST and NPM_PACKAGE it says which versions of them it
# installed. Needs python3 (with venv), node and npm, and access to PyPI and
# the npm registry. Each suite's own install-sdks.sh calls this.
set -euo pipefail
HERE="$(cd "$1" && pwd)"
PYTHON="${PYTHON:-python3}"

pins() { sha256sum "$@" | sha256sum | cut -c1-16; }

py_pins="$(pins "$HERE/python/requirements.txt")"
if [ "$(cat "$HERE/.venv/.installed" 2>/dev/null)" != "$py_pins" ]; then
  echo "install-sdks: python venv at $HERE/.venv" >&2
  rm -rf "$HERE/.venv"
  "$PYTHON" -m venv "$HERE/.venv"
  "$HERE/.venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --no-input -r "$HERE/python/requirements.txt"
  echo "$py_pins" > "$HERE/.venv/.installed"
fi

js_pins="$(pins "$HERE/js/package.json" "$HERE/js/package-lock.json")"
if [ "$(cat "$HERE/js/node_modules/.installed" 2>/dev/null)" != "$js_pins" ]; then
  echo "install-sdks: npm ci in $HERE/js" >&2
  (cd "$HERE/js" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$js_pins" > "$HERE/js/node_modules/.installed"
fi

if [ $# -ge 3 ]; then
  echo "install-sdks: $2 $("$HERE/.venv/bin/python" -c "import importlib.metadata as m; print(m.version('$2'))") (python)," \
    "$3 $(node -p "require('$HERE/js/node_modules/$3/package.json').version") (js)" >&2
fi
