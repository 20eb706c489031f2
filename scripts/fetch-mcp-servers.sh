#!/usr/bin/env bash
# fetch-mcp-servers.sh DIR - download the MCP servers the mcp-gateway
# template (templates/mcp-gateway) ships, so that its build needs no
# network:
#   DIR/wheels        the PyPI ones (scripts/mcp-requirements.txt, every
#                     package pinned): wheels for CPython 3.11 (Debian 12, the
#                     sandbox's), manylinux of this machine's architecture.
#                     Only wheels: nothing is built or executed.
#   DIR/node_modules  the npm ones (templates/mcp-gateway/npm: package.json
#                     and its lock), installed by `npm ci --ignore-scripts`.
#                     Plain JavaScript, so a host install runs in the sandbox.
# Skipped when DIR's marker says the same pins are already there. Needs
# python3 (with venv) and npm, and PyPI and the npm registry.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REQ="$HERE/mcp-requirements.txt"
NPM="$HERE/../templates/mcp-gateway/npm"
PYTHON="${PYTHON:-python3}"
if [ $# -ne 1 ]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
dir="$1"
arch="$(uname -m)"
pins="$(cat "$REQ" "$NPM/package.json" "$NPM/package-lock.json" | sha256sum | cut -c1-16)-$arch"
if [ "$(cat "$dir/.pins" 2>/dev/null)" = "$pins" ]; then
  exit 0
fi
mkdir -p "$dir"
rm -rf "$dir/.pins" "$dir/wheels" "$dir/node_modules" "$dir/npm"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
pip=("$PYTHON" -m pip)
if ! "${pip[@]}" --version >/dev/null 2>&1; then
  "$PYTHON" -m venv "$tmp/venv"
  pip=("$tmp/venv/bin/python" -m pip)
fi
echo "fetch-mcp-servers: PyPI wheels into $dir/wheels ($arch)" >&2
# Every manylinux tag a pinned wheel may carry (pip matches them exactly),
# and abi3 (cryptography): glibc 2.36 (Debian 12) runs all of them.
"${pip[@]}" download --quiet --disable-pip-version-check --no-input \
  --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none \
  --platform "manylinux2014_$arch" --platform "manylinux_2_17_$arch" \
  --platform "manylinux_2_24_$arch" --platform "manylinux_2_26_$arch" \
  --platform "manylinux_2_27_$arch" --platform "manylinux_2_28_$arch" \
  --platform "manylinux_2_31_$arch" --platform "manylinux_2_34_$arch" \
  --platform "linux_$arch" \
  -d "$dir/wheels" -r "$REQ"
grep -v '^#' "$REQ" > "$dir/wheels/requirements.txt"
echo "fetch-mcp-servers: npm ci into $dir/node_modules" >&2
mkdir -p "$dir/npm"
cp "$NPM/package.json" "$NPM/package-lock.json" "$dir/npm/"
(cd "$dir/npm" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error)
mv "$dir/npm/node_modules" "$dir/node_modules"
rm -rf "$dir/npm"
echo "$pins" > "$dir/.pins"
echo "fetch-mcp-servers: $(ls "$dir/wheels"/*.whl | wc -l) wheels, $(ls "$dir/node_modules" | wc -l) npm packages in $dir" >&2
