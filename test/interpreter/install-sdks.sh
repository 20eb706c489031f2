#!/usr/bin/env bash
# install-sdks.sh - install the pinned E2B code-interpreter SDKs that test/interpreter runs:
#   Python: e2b-code-interpreter (PyPI) and pytest into .venv, from python/requirements.txt
#   JS:     @e2b/code-interpreter (npm) into js/node_modules, from js/package-lock.json
# (test/install-sdks.sh does it, as for the other SDK suites).
exec "$(dirname "${BASH_SOURCE[0]}")/../install-sdks.sh" "$(dirname "${BASH_SOURCE[0]}")" e2b-code-interpreter @e2b/code-interpreter
