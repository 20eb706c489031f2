#!/usr/bin/env bash
# build-spawn-helper.sh [GOARCH [OUT]] - compile space-spawn
# (internal/agent/spawner/helper) for GOARCH (default: go env GOARCH, so the
# host's unless GOARCH is set) into OUT (default
# internal/agent/spawner/bin/GOARCH/space-spawn, where the agent's build for
# GOARCH embeds it). Run it before building space-agent; without it the
# agent starts processes through os/exec.
#
# Static with musl, -Os, stripped:
#   * the host's architecture: musl-gcc (Debian's musl-tools, installed by
#     install-deps.sh), 17 KB on amd64;
#   * arm64 on another host: Debian's cross gcc (gcc-aarch64-linux-gnu)
#     against musl's arm64 libc from Debian's musl-dev arm64 package, which
#     install-deps.sh (test profile) unpacks into $SPACE_MUSL_ARM64 (no dpkg
#     architecture is added); 66 KB, as the arm64 linker aligns segments to
#     64 KiB pages.
# Exits 3 when GOARCH's toolchain is not here (the spawner's tests skip, or
# under SPACE_TEST_STRICT=1 fail).
set -euo pipefail
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../internal/agent/spawner" && pwd)"
arch="${1:-$(go env GOARCH)}"
out="${2:-$dir/bin/$arch/space-spawn}"
host="$(go env GOHOSTARCH)"
SPACE_LIB="${SPACE_LIB:-/usr/local/lib/space}"
SPACE_MUSL_ARM64="${SPACE_MUSL_ARM64:-$SPACE_LIB/musl-arm64}"

missing() { echo "build-spawn-helper: $* (scripts/install-deps.sh installs it)" >&2; exit 3; }

if [ "$arch" = "$host" ]; then
  command -v musl-gcc >/dev/null || missing "no musl-gcc"
  cc=(musl-gcc)
elif [ "$arch" = arm64 ]; then
  command -v aarch64-linux-gnu-gcc >/dev/null || missing "no aarch64-linux-gnu-gcc (gcc-aarch64-linux-gnu)"
  [ -f "$SPACE_MUSL_ARM64/musl-gcc.specs" ] || missing "no musl arm64 libc at $SPACE_MUSL_ARM64"
  cc=(aarch64-linux-gnu-gcc -specs "$SPACE_MUSL_ARM64/musl-gcc.specs")
else
  echo "build-spawn-helper: no toolchain for $arch on $host" >&2
  exit 3
fi
# Written beside OUT and renamed over it: a go build embedding the
# directory meanwhile sees the old helper or the new, never half of one.
mkdir -p "$(dirname "$out")"
tmp="$(dirname "$out")/.space-spawn.$$"
trap 'rm -f "$tmp"' EXIT
"${cc[@]}" -Os -static -s -Wall -Wextra -Werror -o "$tmp" "$dir/helper/space-spawn.c"
mv -f "$tmp" "$out"
