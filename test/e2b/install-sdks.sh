#!/usr/bin/env bash
# install-sdks.sh - install the pinned E2B SDKs that test/e2b runs against spaced:
#   Python: e2b (PyPI) and pytest into test/e2b/.venv, from python/requirements.txt
#   JS:     e2b (npm) into test/e2b/js/node_modules, from js/package-lock.json (npm ci)
# (test/install-sdks.sh does it, as for the other SDK suites).
exec "$(dirname "${BASH_SOURCE[0]}")/../install-sdks.sh" "$(dirname "${BASH_SOURCE[0]}")" e2b e2b
