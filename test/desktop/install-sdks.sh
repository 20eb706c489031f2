#!/usr/bin/env bash
# install-sdks.sh - install the pinned E2B Desktop SDKs that test/desktop runs against spaced:
#   Python: e2b-desktop (PyPI), pytest, Playwright (connect_over_cdp) and Pillow (to read the
#           screenshots' pixels) into test/desktop/.venv, from python/requirements.txt;
#   JS:     @e2b/desktop (npm) into js/node_modules, from js/package-lock.json
# (test/install-sdks.sh does it, as for the other SDK suites).
exec "$(dirname "${BASH_SOURCE[0]}")/../install-sdks.sh" "$(dirname "${BASH_SOURCE[0]}")" e2b-desktop @e2b/desktop
