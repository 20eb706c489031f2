#!/usr/bin/env bash
# build-code-interpreter.sh [name] - build the code-interpreter template
# (templates/code-interpreter) on a running spaced, offline: the Python wheels
# and Deno come from a wheelhouse fetched on the host (scripts/fetch-wheels.sh)
# and the server is built here. Talks to $SPACE_ADDR with $SPACE_API_KEY (the CLI's
# settings). The name defaults to code-interpreter-v1, the template E2B's
# code-interpreter SDKs ask for. A rebuild with nothing changed takes well
# under a second (every step is cached).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
use_go
name="${1:-code-interpreter-v1}"
wheels="${SPACE_WHEELHOUSE:-/var/cache/space/interpreter/wheels}"
"$ROOT/scripts/fetch-wheels.sh" "$wheels"
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
cp "$ROOT/templates/code-interpreter/Dockerfile" "$ctx/"
mkdir "$ctx/wheels"
# The pins from this checkout, not the wheelhouse's copy: another checkout
# sharing the wheelhouse may have fetched for other pins since (its wheels
# stay there too).
cp "$wheels"/*.whl "$ctx/wheels/"
cp "$ROOT/scripts/interpreter-requirements.txt" "$ctx/wheels/requirements.txt"
cp "$wheels/deno" "$ctx/deno"
(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -o "$ctx/space-interpreter" ./cmd/space-interpreter)
space="${SPACE_CLI:-$ROOT/bin/space}"
[ -x "$space" ] || (cd "$ROOT" && go build -o bin/space ./cmd/space)
exec "$space" template build -t "$name" --memory 1024 "$ctx"
