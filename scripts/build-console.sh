#!/usr/bin/env bash
# build-console.sh - rebuild the web console (web/console) into
# internal/console/dist, which spaced embeds, and record the hash of the
# sources it was built from (internal/console/dist/sources.sha256).
#
# Usage: scripts/build-console.sh [--check]
#
#   --check  build into a temporary directory and fail if the committed
#            bundle differs from it (what CI's TestBundleIsCurrent does).
#
# Needs Node.js and npm (the npm registry, or npm's cache, for `npm ci`);
# running spaced and `go build` do not: the bundle is committed. Run it after
# changing anything under web/console, and commit the result with the change.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WEB="$ROOT/web/console"
DIST="$ROOT/internal/console/dist"

check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "build-console: unknown argument: $1" >&2; exit 2 ;;
esac

# sources_hash prints the hash TestBundleIsCurrent recomputes: sha256sum of
# the sha256sum lines of every source file, in byte order of their paths.
sources_hash() {
  (cd "$WEB" && find package.json package-lock.json build.mjs src -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) | sha256sum | cut -d' ' -f1
}

cd "$WEB"
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "build-console: npm ci" >&2
  npm ci --no-audit --no-fund --loglevel=error >&2
fi

if [ "$check" -eq 1 ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  node build.mjs "$tmp"
  sources_hash >"$tmp/sources.sha256"
  if ! diff -r "$DIST" "$tmp" >/dev/null; then
    echo "build-console: internal/console/dist is stale: run scripts/build-console.sh and commit it" >&2
    diff -rq "$DIST" "$tmp" >&2 || true
    exit 1
  fi
  echo "build-console: internal/console/dist is current" >&2
  exit 0
fi

node build.mjs "$DIST"
sources_hash >"$DIST/sources.sha256"
echo "build-console: wrote $(du -sh "$DIST" | cut -f1) to internal/console/dist" >&2
