#!/usr/bin/env bash
# build-mcp-gateway.sh [name] - build the MCP gateway's template
# (templates/mcp-gateway) on a running spaced. Talks to $SPACE_ADDR with
# $SPACE_API_KEY (the CLI's settings). The name defaults to mcp-gateway,
# the template E2B's SDKs ask for when `mcp` is given. The gateway is built
# here; the MCP servers come from a cache on the host
# ($SPACE_MCP_CACHE, default /var/cache/space/mcp), filled by
# scripts/fetch-mcp-servers.sh from PyPI and npm when its pins change: the
# build itself needs no network. A rebuild with nothing changed is cached.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
use_go
name="${1:-mcp-gateway}"
cache="${SPACE_MCP_CACHE:-/var/cache/space/mcp}"
"$ROOT/scripts/fetch-mcp-servers.sh" "$cache"
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
cp "$ROOT/templates/mcp-gateway/Dockerfile" "$ctx/"
cp -r "$cache/wheels" "$cache/node_modules" "$ctx/"
(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -o "$ctx/mcp-gateway" ./cmd/space-mcp-gateway)
space="${SPACE_CLI:-$ROOT/bin/space}"
[ -x "$space" ] || (cd "$ROOT" && go build -o bin/space ./cmd/space)
exec "$space" template build -t "$name" --memory 1024 "$ctx"
