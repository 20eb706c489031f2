#!/usr/bin/env bash
# build-spawn-helper.sh - compile space-spawn (internal/agent/spawner/helper)
# for this machine's architecture into internal/agent/spawner/bin/$GOARCH, where
# the agent's build embeds it. Run it before building space-agent; without
# it the agent starts processes through os/exec. Needs musl-gcc (Debian's
# musl-tools, installed by install-deps.sh): a static helper of 17 KB.
set -euo pipefail
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../internal/agent/spawner" && pwd)"
arch="$(go env GOARCH)"
exec musl-gcc -Os -static -s -Wall -Wextra -Werror -o "$dir/bin/$arch/space-spawn" "$dir/helper/space-spawn.c"
