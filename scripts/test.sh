#!/usr/bin/env bash
# test.sh - set up this machine (Debian 12, as root) and run the whole test
# suite: unit tests, the runtime conformance suite against real runsc, the
# end-to-end tests against a real spaced, and the E2B SDK tests.
# Extra arguments go to go test (for example -run TestBasic).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

"$ROOT/scripts/install-deps.sh"
use_go
build_all
cd "$ROOT"
echo "test: go vet" >&2
go vet ./...
echo "test: go test" >&2
go test -race -count=1 -timeout 30m "${@:-./...}"
