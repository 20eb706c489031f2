#!/usr/bin/env bash
# build-desktop.sh [name] - build the desktop template (templates/desktop)
# on a running spaced. Talks to $SPACE_ADDR with $SPACE_API_KEY (the CLI's
# settings). The name defaults to desktop, the template E2B's Desktop SDKs
# ask for. Its packages come from Debian's mirror, fetched by the build's
# own apt-get through the egress gateway, so the build's network must reach
# the mirror (spaced's default for builds). A rebuild with nothing changed
# takes about a second (every step and the start command are cached).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
use_go
name="${1:-desktop}"
# The context: the template's files and space-desktop (the native
# computer-use API's server, cmd/space-desktop), built here, static.
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
cp -r "$ROOT/templates/desktop/." "$ctx/"
(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -o "$ctx/space-desktop" ./cmd/space-desktop)
space="${SPACE_CLI:-$ROOT/bin/space}"
[ -x "$space" ] || (cd "$ROOT" && go build -o bin/space ./cmd/space)
# 2 GiB of memory: Chromium and the session; 4 GiB of disk: the packages
# are ~1 GiB unpacked, and apt-get keeps the .debs until the step ends.
"$space" template build -t "$name" --memory 2048 --disk 4096 "$ctx"
