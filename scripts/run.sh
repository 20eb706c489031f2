#!/usr/bin/env bash
# run.sh - set up this machine (Debian 12, as root) and run spaced in the
# foreground with its embedded defaults: installs Debian packages and runsc,
# builds spaced, space and space-agent, builds the base template, installs
# the binaries to /usr/local/bin and starts spaced on 127.0.0.1:7070.
# Extra arguments go to spaced (see spaced -h).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

"$ROOT/scripts/install-deps.sh"
use_go
build_all
install -m 0755 "$ROOT/bin/spaced" "$ROOT/bin/space" /usr/local/bin/
echo "run: starting spaced (Ctrl-C stops it; sandboxes keep running and are re-attached on the next start)" >&2
exec /usr/local/bin/spaced "$@"
