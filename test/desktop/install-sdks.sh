#!/usr/bin/env bash
# install-sdks.sh - install the pinned E2B Desktop SDKs that test/desktop
# runs against spaced:
#   Python: e2b-desktop (PyPI), pytest, Playwright (connect_over_cdp) and Pillow (to read the screenshots'
#           pixels) into test/desktop/.venv, from python/requirements.txt;
#   JS:     @e2b/desktop (npm) into js/node_modules, from js/package-lock.json.
# Each install is skipped when its marker says the same pins are already
# there. Needs python3 (with venv), node and npm, and access to PyPI and npm.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
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
echo "install-sdks: e2b-desktop $("$HERE/.venv/bin/python" -c 'import importlib.metadata as m; print(m.version("e2b-desktop"))') (python)," \
  "@e2b/desktop $(node -p "require('$HERE/js/node_modules/@e2b/desktop/package.json').version") (js)" >&2
