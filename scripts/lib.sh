# Shared by run.sh and test.sh: find Go (install-deps.sh may have
# bootstrapped one), set the machine up and build the binaries and the base
# template, the independent pieces side by side.
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

# Steps print one line each when they end, with their time; their own
# output goes to a log under $STEP_LOGS, shown when they fail.
STEP_LOGS="${STEP_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/space-setup.XXXXXX")}"
declare -A STEP_PIDS=()

# step NAME CMD...: run CMD now.
step() {
  local name="$1" t0=$SECONDS rc=0
  shift
  "$@" >"$STEP_LOGS/$name.log" 2>&1 || rc=$?
  step_report "$name" "$rc" "$((SECONDS - t0))"
}

# step_bg NAME CMD...: start CMD beside the others; step_wait NAME... waits.
step_bg() {
  local name="$1"
  shift
  (
    t0=$SECONDS rc=0
    "$@" >"$STEP_LOGS/$name.log" 2>&1 || rc=$?
    step_report "$name" "$rc" "$((SECONDS - t0))"
  ) &
  STEP_PIDS[$name]=$!
}

step_wait() {
  local name failed=0
  for name in "$@"; do
    wait "${STEP_PIDS[$name]}" || failed=1
    unset "STEP_PIDS[$name]"
  done
  [ "$failed" -eq 0 ] || exit 1
}

# step_done NAME: wait (from another process) until step NAME has
# succeeded; false if the process $2 that runs the steps ended first.
step_done() {
  while [ ! -e "$STEP_LOGS/$1.done" ]; do
    kill -0 "$2" 2>/dev/null || return 1
    sleep 1
  done
}

step_report() {
  local name="$1" rc="$2" took="$3"
  [ "$rc" -ne 0 ] || : >"$STEP_LOGS/$name.done"
  if [ "$rc" -ne 0 ]; then
    tail -n 30 "$STEP_LOGS/$name.log" >&2
    echo "setup: $name FAILED after ${took}s (rc $rc; log $STEP_LOGS/$name.log)" >&2
    return "$rc"
  fi
  echo "setup: $name done in ${took}s" >&2
}

build_binaries() {
  cd "$ROOT"
  mkdir -p bin
  # spaced and space in one go build (they share most packages); the
  # agent and the interpreter are static (CGO off: other builds of the
  # standard library), beside it.
  go build -o bin/ ./cmd/spaced ./cmd/space &
  local host=$!
  # The agent embeds space-spawn, so it is built first.
  "$ROOT/scripts/build-spawn-helper.sh" &&
    CGO_ENABLED=0 go build -trimpath -o bin/space-agent ./cmd/space-agent &&
    CGO_ENABLED=0 go build -o bin/space-interpreter ./cmd/space-interpreter || { wait "$host"; return 1; }
  wait "$host"
}

# build_arm64 compiles every binary for linux/arm64, the agent with its
# space-spawn (built first, into internal/agent/spawner/bin/arm64), and
# checks that the agent holds the helper's bytes: an arm64 agent without
# it would start processes through os/exec and say so only in its log.
# It keeps the helper (where a later GOARCH=arm64 build embeds it) and no
# binary.
build_arm64() {
  local out rc=0
  cd "$ROOT" && out=$(mktemp -d "${TMPDIR:-/tmp}/space-arm64.XXXXXX") || return 1
  "$ROOT/scripts/build-spawn-helper.sh" arm64 &&
    GOARCH=arm64 CGO_ENABLED=0 go build -trimpath -o "$out/" ./cmd/... &&
    python3 - internal/agent/spawner/bin/arm64/space-spawn "$out/space-agent" <<'PY' || rc=$?
import sys
helper, agent = (open(p, "rb").read() for p in sys.argv[1:3])
if helper not in agent:
    sys.exit("build_arm64: %s does not embed %s" % (sys.argv[2], sys.argv[1]))
print("build_arm64: the arm64 agent embeds space-spawn (%d bytes)" % len(helper))
PY
  rm -rf "$out"
  return "$rc"
}

# setup PROFILE: install what PROFILE (serve or test) needs and build
# spaced, space, space-agent, space-interpreter and the base template.
# Packages and Go come first (everything else needs them); then runsc,
# the binaries and the base rootfs (debootstrap, mostly network) build side
# by side, and for tests versitygw and an arm64 build of every binary, the
# agent with its space-spawn (the check that they still cross-compile); the
# base template's image (the rootfs plus the fresh agent: hard links) last.
setup() {
  local profile="$1" t0=$SECONDS
  step "packages ($profile)" "$ROOT/scripts/install-deps.sh" --profile "$profile" --packages-only
  use_go
  step_bg runsc "$ROOT/scripts/install-deps.sh" --runsc-only
  step_bg binaries build_binaries
  step_bg "base rootfs" "$ROOT/scripts/build-template.sh" --out "$SPACE_TEMPLATES_DIR" --rootfs-only
  if [ "$profile" = test ]; then
    step_bg versitygw "$ROOT/scripts/install-versitygw.sh"
    # Every binary builds for the other architecture we run on too.
    step_bg "arm64 build" build_arm64
    step_wait versitygw "arm64 build"
  fi
  step_wait binaries "base rootfs"
  step "base template" "$ROOT/scripts/build-template.sh" --out "$SPACE_TEMPLATES_DIR" --agent "$ROOT/bin/space-agent"
  step_wait runsc
  echo "setup: ready in $((SECONDS - t0))s" >&2
}
