#!/usr/bin/env bash
# install-sdks.sh - install the pinned E2B code-interpreter SDKs that
# interpreter_test.go runs against space-interpreter:
#   Python: e2b-code-interpreter (PyPI) and pytest into .venv, from python/requirements.txt
#   JS:     @e2b/code-interpreter (npm) into js/node_modules, from js/package-lock.json (npm ci)
# Each install is skipped when its marker says the same pins are already there.
# Needs python3 (with venv), node and npm, and access to PyPI and the npm registry.
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
