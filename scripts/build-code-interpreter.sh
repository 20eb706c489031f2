#!/usr/bin/env bash
# build-code-interpreter.sh [name] - build the code-interpreter template
# (templates/code-interpreter) on a running spaced. Talks to $SPACE_ADDR with
# $SPACE_API_KEY (the CLI's settings). The name defaults to
# code-interpreter-v1, the template E2B's code-interpreter SDKs ask for. The
# server is built here; the Python wheels and Deno come from
# SPACE_INTERPRETER_SOURCE:
#   wheelhouse (default) a wheelhouse fetched on the host
#              (scripts/fetch-wheels.sh, into $SPACE_WHEELHOUSE), copied into
#              the build: no network needed in the build;
#   pypi       PyPI and the npm registry, fetched by the build's own step:
#              no wheelhouse, but the build's network must reach them.
# R, IRkernel and the JDK (for the r and java kernels) are Debian's
# packages, installed by the template's apt-get through the build's network
# either way: it must reach the Debian mirror, as spaced's default build
# policy allows.
# A rebuild with nothing changed takes well under a second (every step is
# cached).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
use_go
name="${1:-code-interpreter-v1}"
src="${SPACE_INTERPRETER_SOURCE:-wheelhouse}"
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
cp "$ROOT/templates/code-interpreter/Dockerfile" "$ctx/"
mkdir "$ctx/wheels"
case "$src" in
wheelhouse)
  wheels="${SPACE_WHEELHOUSE:-/var/cache/space/interpreter/wheels}"
  "$ROOT/scripts/fetch-wheels.sh" "$wheels"
  cp "$wheels"/*.whl "$wheels/deno" "$ctx/wheels/" ;;
pypi) ;;
*)
  echo "build-code-interpreter: SPACE_INTERPRETER_SOURCE is wheelhouse or pypi, not '$src'" >&2
  exit 2 ;;
esac
# The pins from this checkout, not the wheelhouse's copy: another checkout
# sharing the wheelhouse may have fetched for other pins since (its wheels
# stay there too).
cp "$ROOT/scripts/interpreter-requirements.txt" "$ctx/wheels/requirements.txt"
(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -o "$ctx/space-interpreter" ./cmd/space-interpreter)
space="${SPACE_CLI:-$ROOT/bin/space}"
[ -x "$space" ] || (cd "$ROOT" && go build -o bin/space ./cmd/space)
exec "$space" template build -t "$name" --memory 1024 --build-arg "INTERPRETER_SOURCE=$src" "$ctx"
