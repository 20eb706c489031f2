# Shared by run.sh and test.sh: find Go (install-deps.sh may have
# bootstrapped one) and build the binaries and the base template.
# shellcheck shell=bash

SPACE_LIB="${SPACE_LIB:-/usr/local/lib/space}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export SPACE_TEMPLATES_DIR="${SPACE_TEMPLATES_DIR:-/var/lib/space/templates}"

use_go() {
  if ! command -v go >/dev/null 2>&1 || ! go version | grep -qE 'go1\.(2[1-9]|[3-9][0-9])'; then
    for d in /usr/local/go/bin "$SPACE_LIB/go/bin"; do
      if [ -x "$d/go" ]; then export PATH="$d:$PATH"; break; fi
    done
  fi
  command -v go >/dev/null 2>&1 || { echo "no Go toolchain found" >&2; exit 1; }
}

build_all() {
  cd "$ROOT"
  echo "build: spaced, space, space-agent, space-interpreter" >&2
  mkdir -p bin
  go build -o bin/spaced ./cmd/spaced
  go build -o bin/space ./cmd/space
  CGO_ENABLED=0 go build -trimpath -o bin/space-agent ./cmd/space-agent
  CGO_ENABLED=0 go build -o bin/space-interpreter ./cmd/space-interpreter
  "$ROOT/scripts/build-template.sh" --out "$SPACE_TEMPLATES_DIR" --agent "$ROOT/bin/space-agent"
}
