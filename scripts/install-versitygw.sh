#!/usr/bin/env bash
# install-versitygw.sh - build the versitygw S3 server (Apache-2.0) that the
# internal/blobstore S3 tests run against.
#
# Usage: scripts/install-versitygw.sh [--force]
#
#   * builds a static versitygw from the Go module proxy (pinned version, checked
#     against sum.golang.org by the go command) into $SPACE_LIB/bin;
#   * skips the build when the installed binary already reports the pinned
#     version (--force rebuilds anyway).
#
# Idempotent: a second run changes nothing and takes well under a second.
# Progress goes to stderr.
set -euo pipefail

VERSITYGW_VERSION="v1.8.0"
SPACE_LIB="${SPACE_LIB:-/usr/local/lib/space}"
BIN_DIR="$SPACE_LIB/bin"
BIN="$BIN_DIR/versitygw"

FORCE=0
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    *) echo "usage: $0 [--force]" >&2; exit 2 ;;
  esac
done

log() { echo "install-versitygw: $*" >&2; }

installed_version() {
  # `versitygw --version` prints "Version  : v1.8.0" among other lines.
  [[ -x "$BIN" ]] || return 0
  "$BIN" --version 2>/dev/null | awk '/^Version/ {print $NF; exit}'
}

if [[ $FORCE -eq 0 && "$(installed_version)" == "$VERSITYGW_VERSION" ]]; then
  log "versitygw $VERSITYGW_VERSION already installed at $BIN"
  exit 0
fi

command -v go >/dev/null || { log "go not found in PATH (run scripts/install-deps.sh)"; exit 1; }

# Build from an empty directory so no surrounding go.mod or go.work interferes.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$BIN_DIR"
log "building github.com/versity/versitygw@$VERSITYGW_VERSION (takes a few minutes the first time)"
start=$SECONDS
# The version ldflags make `versitygw --version` report the pin, which the skip check above reads.
(cd "$tmp" && GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 GOBIN="$tmp/bin" go install \
  -ldflags "-X main.Version=$VERSITYGW_VERSION" \
  "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION")
install -m 0755 "$tmp/bin/versitygw" "$BIN"
log "installed $BIN ($("$BIN" --version 2>/dev/null | awk '/^Version/ {print $NF; exit}')) in $((SECONDS - start))s"
