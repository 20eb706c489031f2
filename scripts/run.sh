#!/usr/bin/env bash
# run.sh - set up this machine (Debian 12, as root) and run spaced in the
# foreground with its embedded defaults: installs what serving needs (Debian
# packages, runsc; not what only the tests need), builds spaced, space and
# space-agent and the base template (side by side, one line per step with
# its time), installs the binaries to /usr/local/bin and starts spaced on
# 127.0.0.1:7070. Extra arguments go to spaced (see spaced -h).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

# The code interpreter's template (code-interpreter-v1, what E2B's
# code-interpreter SDKs ask for) is built in the background, unless
# SPACE_CODE_INTERPRETER=0 or it is built already (a rebuild with nothing
# changed is all cached and takes under a second): what it needs on the host
# (python3-venv, npm) and its wheelhouse are fetched while the rest builds,
# once the packages are in (apt runs one at a time), and the template is
# built once spaced answers. Its log goes to $SPACE_DATA_DIR/code-interpreter-build.log.
if [[ "${SPACE_CODE_INTERPRETER:-1}" != "0" ]]; then
  data="${SPACE_DATA_DIR:-/var/lib/space}"
  log="$data/code-interpreter-build.log"
  mkdir -p "$data"
  runner=$$
  rm -f "$data/code-interpreter-build.done"
  (
    # The desktop's build below waits for this mark, set however this ends.
    trap 'touch "$data/code-interpreter-build.done"' EXIT
    step_done "packages (serve)" "$runner" || exit 0
    t0=$SECONDS
    if "$ROOT/scripts/install-deps.sh" --profile interpreter --packages-only >"$log" 2>&1 &&
      "$ROOT/scripts/fetch-wheels.sh" "${SPACE_WHEELHOUSE:-/var/cache/space/interpreter/wheels}" >>"$log" 2>&1; then
      echo "run: code-interpreter-v1's packages and wheelhouse fetched in $((SECONDS - t0))s" >&2
    else
      echo "run: fetching code-interpreter-v1's wheelhouse failed (see $log); spaced runs on without it" >&2
      exit 0
    fi
    addr="http://${SPACE_ADDR:-127.0.0.1:7070}"
    for _ in $(seq 600); do curl -sf "$addr/healthz" >/dev/null && break; sleep 1; done
    t0=$SECONDS
    export SPACE_ADDR="$addr" SPACE_API_KEY="${SPACE_API_KEY:-$(cat "$data/api-key" 2>/dev/null)}"
    if "$ROOT/scripts/build-code-interpreter.sh" >>"$log" 2>&1; then
      echo "run: template code-interpreter-v1 is ready (built in $((SECONDS - t0))s after spaced answered)" >&2
    else
      echo "run: building code-interpreter-v1 failed (see $log); spaced runs on without it" >&2
    fi
  ) &
  echo "run: code-interpreter-v1 builds in the background (log: $log)" >&2
fi

# The desktop template (desktop, what E2B's Desktop SDKs ask for) is built
# the same way, after the code interpreter's so that two builds do not share
# the machine's CPU, unless SPACE_DESKTOP=0. Its Debian packages come from
# the mirror through the build's network (a first build takes minutes; a
# rebuild with nothing changed is cached). Its log goes to
# $SPACE_DATA_DIR/desktop-build.log.
if [[ "${SPACE_DESKTOP:-1}" != "0" ]]; then
  data="${SPACE_DATA_DIR:-/var/lib/space}"
  dlog="$data/desktop-build.log"
  mkdir -p "$data"
  rm -f "$data/desktop-build.done"
  (
    # The MCP gateway's build below waits for this mark.
    trap 'touch "$data/desktop-build.done"' EXIT
    addr="http://${SPACE_ADDR:-127.0.0.1:7070}"
    for _ in $(seq 600); do curl -sf "$addr/healthz" >/dev/null && break; sleep 1; done
    if [[ "${SPACE_CODE_INTERPRETER:-1}" != "0" ]]; then
      for _ in $(seq 1800); do [[ -e "$data/code-interpreter-build.done" ]] && break; sleep 1; done
    fi
    t0=$SECONDS
    export SPACE_ADDR="$addr" SPACE_API_KEY="${SPACE_API_KEY:-$(cat "$data/api-key" 2>/dev/null)}"
    if "$ROOT/scripts/build-desktop.sh" >"$dlog" 2>&1; then
      echo "run: template desktop is ready (built in $((SECONDS - t0))s)" >&2
    else
      echo "run: building desktop failed (see $dlog); spaced runs on without it" >&2
    fi
  ) &
  echo "run: desktop builds in the background after code-interpreter-v1 (log: $dlog)" >&2
fi

# The MCP gateway's template (mcp-gateway, what E2B's SDKs ask for when a
# create gives `mcp`) last, the same way, unless SPACE_MCP=0. Its MCP
# servers are fetched on the host from PyPI and npm (the interpreter's
# packages, installed above, bring python3-venv and npm), so the build
# needs no network. Its log goes to $SPACE_DATA_DIR/mcp-gateway-build.log.
if [[ "${SPACE_MCP:-1}" != "0" ]]; then
  data="${SPACE_DATA_DIR:-/var/lib/space}"
  mlog="$data/mcp-gateway-build.log"
  mkdir -p "$data"
  (
    addr="http://${SPACE_ADDR:-127.0.0.1:7070}"
    for _ in $(seq 600); do curl -sf "$addr/healthz" >/dev/null && break; sleep 1; done
    [[ "${SPACE_CODE_INTERPRETER:-1}" == "0" ]] || for _ in $(seq 1800); do [[ -e "$data/code-interpreter-build.done" ]] && break; sleep 1; done
    [[ "${SPACE_DESKTOP:-1}" == "0" ]] || for _ in $(seq 3600); do [[ -e "$data/desktop-build.done" ]] && break; sleep 1; done
    t0=$SECONDS
    export SPACE_ADDR="$addr" SPACE_API_KEY="${SPACE_API_KEY:-$(cat "$data/api-key" 2>/dev/null)}"
    if "$ROOT/scripts/build-mcp-gateway.sh" >"$mlog" 2>&1; then
      echo "run: template mcp-gateway is ready (built in $((SECONDS - t0))s)" >&2
    else
      echo "run: building mcp-gateway failed (see $mlog); spaced runs on without it" >&2
    fi
  ) &
  echo "run: mcp-gateway builds in the background after desktop (log: $mlog)" >&2
fi

setup serve
install -m 0755 "$ROOT/bin/spaced" "$ROOT/bin/space" /usr/local/bin/

echo "run: starting spaced (Ctrl-C stops it; sandboxes keep running and are re-attached on the next start)" >&2
exec /usr/local/bin/spaced "$@"
