#!/usr/bin/env bash
# install-deps.sh - install the host dependencies of SPACE on Debian 12 (bookworm).
#
# Usage: scripts/install-deps.sh [--profile serve|interpreter|test] [--packages-only]
#                                [--force-runsc] [--runsc-only]
#
#   * installs the Debian packages of the profile (apt-get update runs at most
#     once, and only when something is missing): serve (run.sh) is what spaced
#     needs to serve; interpreter adds what building the code interpreter's
#     template on this host needs (python3-venv and npm, for fetch-wheels.sh);
#     test (test.sh, the default) adds what the tests need (Chromium,
#     PostgreSQL, the console's npm packages, versitygw; on amd64 the arm64
#     cross gcc, musl's arm64 libc and qemu-user, for space-spawn);
#   * if no usable Go (>= 1.21) is found, bootstraps the pinned Go toolchain from
#     the Go module proxy (golang.org/toolchain module, hash-verified) into
#     /usr/local/lib/space/go;
#   * builds a static gVisor runsc from the Go module proxy, with its seccomp
#     programs precompiled (scripts/seccompgen), and installs it to
#     $SPACE_RUNSC (default /usr/local/lib/space/bin/runsc) unless the installed
#     one already reports the pinned version and its marker ($SPACE_RUNSC.build)
#     says it was built so (--force-runsc rebuilds anyway;
#     --runsc-only does only that, for the node image of deploy/Dockerfile);
#   * test profile: builds versitygw (scripts/install-versitygw.sh);
#   * makes sure /etc/iproute2 and /var/run/netns exist.
#   --packages-only stops after the packages and Go: run.sh and test.sh build
#   runsc and versitygw beside the binaries and the base template.
#
# Idempotent: a second run changes nothing and takes well under a second.
# Progress goes to stderr, one line per step.
set -euo pipefail

# ---- pins --------------------------------------------------------------------
RUNSC_VERSION="20260905-160fafc42237"                      # what `runsc --version` must report
RUNSC_MODULE_VERSION="v0.0.0-20260905035102-160fafc42237"  # gvisor.dev/gvisor pseudo-version (same commit)
# Go toolchain used only when the machine has no Go >= 1.21 (gvisor needs go >= 1.26.3).
GO_BOOTSTRAP_VERSION="go1.26.8"
# golang.org/toolchain v0.0.1-go1.26.8.linux-<arch> module hashes (sum.golang.org).
declare -A GO_BOOTSTRAP_H1=(
  [amd64]="h1:ZOmGe1OnfREDMIdb1Qi4G9JSuDPBLGExZMQ4nis1RXM="
  [arm64]="h1:sYL/O6MqS68ML0kjsQ36WoYIpJqkw60TxizWUYUKQMc="
)

SPACE_LIB="${SPACE_LIB:-/usr/local/lib/space}"
SPACE_RUNSC="${SPACE_RUNSC:-$SPACE_LIB/bin/runsc}"
# musl's arm64 libc for the cross-built space-spawn (build-spawn-helper.sh):
# Debian's musl-dev arm64 package, fetched from the mirror by its pool path
# and unpacked, so that no dpkg architecture (and no apt update of a second
# architecture's lists) is needed. Pinned: the version bookworm ships (the
# same source as the amd64 musl-dev) and the .deb's sha256.
SPACE_MUSL_ARM64="${SPACE_MUSL_ARM64:-$SPACE_LIB/musl-arm64}"
MUSL_ARM64_DEB="pool/main/m/musl/musl-dev_1.2.3-1_arm64.deb"
MUSL_ARM64_SHA256="55c2ca4bc3041c8ed8ac7dc3ef6080d9551a21650568b2fd7610b59eaf98a4f4"

# What spaced needs to serve (run.sh).
SERVE_PACKAGES=(
  debootstrap debian-archive-keyring   # template builds
  nftables iproute2                     # sandbox networking
  ca-certificates curl                  # downloads, health checks
  python3                               # checks the bootstrapped Go's hash
  util-linux e2fsprogs                  # mount/losetup/flock, mkfs.ext4
  file                                  # static-binary check below
  libnss-myhostname                     # <port>-<id>.localhost names resolve to loopback (docs/e2b.md)
  musl-tools                            # builds space-spawn, the agent's static process starter
)
# What building the code interpreter's template needs besides (run.sh's
# background build; fetch-wheels.sh's pip; npm is added below).
INTERPRETER_PACKAGES=(python3-venv)
# What the tests need besides (test.sh).
TEST_PACKAGES=(
  python3-pyflakes                      # lints the red-team suite's in-sandbox scripts
  busybox-static                        # tests build small OCI images from it
  chromium                              # test/console drives the web console in it
  postgresql                            # cluster mode's catalog; the tests start their own server
  xvfb                                  # internal/desktopd's tests and benchmarks drive a real X server
  r-base-core r-cran-irkernel            # the code interpreter's r kernel, on the host (internal/interpreter)
  openjdk-17-jdk-headless               # its java kernel (JJava, from the wheelhouse) runs on JShell
)
# An amd64 host's tests also build the arm64 agent with its space-spawn
# (scripts/lib.sh build_arm64) and run that helper under qemu-user
# (internal/agent/spawner): the cross gcc, with musl's arm64 libc below.
if [ "$(uname -m)" = x86_64 ]; then
  TEST_PACKAGES+=(gcc-aarch64-linux-gnu qemu-user-static)
fi

PROFILE=test
FORCE_RUNSC=0
RUNSC_ONLY=0
PACKAGES_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) [ $# -ge 2 ] || { echo "install-deps: --profile needs serve or test" >&2; exit 2; }; PROFILE="$2"; shift ;;
    --profile=*) PROFILE="${1#*=}" ;;
    --force-runsc) FORCE_RUNSC=1 ;;
    # The node image (deploy/Dockerfile): runsc and what building it needs.
    --runsc-only) RUNSC_ONLY=1 ;;
    --packages-only) PACKAGES_ONLY=1 ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install-deps: unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
case "$PROFILE" in
  serve) DEB_PACKAGES=("${SERVE_PACKAGES[@]}") ;;
  interpreter) DEB_PACKAGES=("${SERVE_PACKAGES[@]}" "${INTERPRETER_PACKAGES[@]}") ;;
  test) DEB_PACKAGES=("${SERVE_PACKAGES[@]}" "${INTERPRETER_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
  *) echo "install-deps: --profile is serve, interpreter or test, not '$PROFILE'" >&2; exit 2 ;;
esac
if [ "$RUNSC_ONLY" -eq 1 ]; then DEB_PACKAGES=(ca-certificates curl file); fi

log() { printf 'install-deps: %s\n' "$*" >&2; }
die() { printf 'install-deps: ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root"
[ -r /etc/debian_version ] || die "this script targets Debian 12 (bookworm)"

START=$(date +%s.%N)
TMPDIRS=()
cleanup() { local d; for d in "${TMPDIRS[@]}"; do [ -n "$d" ] && rm -rf -- "$d"; done; }
trap cleanup EXIT
# mktempdir VAR makes a directory removed at exit and names it in VAR (in a
# command substitution, TMPDIRS+= would be lost with the subshell).
mktempdir() { local d; d=$(mktemp -d "${TMPDIR:-/tmp}/space-deps.XXXXXX"); TMPDIRS+=("$d"); printf -v "$1" '%s' "$d"; }

# ---- 1. Debian packages ------------------------------------------------------
# The E2B JS SDK tests (and fetch-wheels.sh, for Deno) need node and npm; machines that bring their own
# Node.js (newer than Debian's) keep it.
if [ "$PROFILE" != serve ] && [ "$RUNSC_ONLY" -eq 0 ] && { ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; }; then
  DEB_PACKAGES+=(nodejs npm)
fi
missing=()
for p in "${DEB_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  log "debian packages: all ${#DEB_PACKAGES[@]} present"
else
  log "debian packages: missing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  log "apt-get update"
  apt-get update -qq >&2 || die "apt-get update failed"
  log "apt-get install ${missing[*]}"
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 || die "apt-get install failed"
fi

# A sandbox's port is reached by name at <port>-<id>.localhost:<spaced port>:
# nss-myhostname answers *.localhost with loopback. Debian's package adds it to
# the hosts line on install; a line edited since (or a package installed before
# with the line changed) is given it before dns.
if [ "$RUNSC_ONLY" -eq 0 ] && [ -f /etc/nsswitch.conf ] && ! grep -Eq '^hosts:.*[[:space:]]myhostname([[:space:]]|$)' /etc/nsswitch.conf; then
  log "nsswitch.conf: adding myhostname to the hosts line"
  sed -i -E '/^hosts:/{ s/[[:space:]]dns([[:space:]]|$)/ myhostname dns\1/; t; s/$/ myhostname/ }' /etc/nsswitch.conf
fi

# ---- 1a. musl's arm64 libc (test profile, amd64 hosts) ------------------------
# Unpacked into $SPACE_MUSL_ARM64 with its musl-gcc.specs rewritten to point
# there; the marker names the .deb, so a new pin replaces it.
if [ "$PROFILE" = test ] && [ "$RUNSC_ONLY" -eq 0 ] && [ "$(uname -m)" = x86_64 ]; then
  if [ "$(cat "$SPACE_MUSL_ARM64/.deb" 2>/dev/null)" = "$MUSL_ARM64_SHA256" ]; then
    log "musl arm64: present at $SPACE_MUSL_ARM64"
  else
    mirror="${SPACE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
    mktempdir tmp
    log "musl arm64: $mirror/$MUSL_ARM64_DEB into $SPACE_MUSL_ARM64"
    curl -fsSL --retry 3 -o "$tmp/musl-dev.deb" "$mirror/$MUSL_ARM64_DEB" ||
      die "download failed: $mirror/$MUSL_ARM64_DEB (a bookworm point release may have replaced it: update MUSL_ARM64_DEB and its hash)"
    echo "$MUSL_ARM64_SHA256  $tmp/musl-dev.deb" | sha256sum -c --quiet - >&2 || die "musl-dev arm64: sha256 mismatch"
    dpkg-deb -x "$tmp/musl-dev.deb" "$tmp/root"
    spec="$tmp/root/usr/lib/aarch64-linux-musl/musl-gcc.specs"
    [ -f "$spec" ] || die "musl-dev arm64: no musl-gcc.specs in the package"
    sed "s#/usr/include/aarch64-linux-musl#$SPACE_MUSL_ARM64/usr/include/aarch64-linux-musl#g; s#/usr/lib/aarch64-linux-musl#$SPACE_MUSL_ARM64/usr/lib/aarch64-linux-musl#g" \
      "$spec" > "$tmp/root/musl-gcc.specs"
    echo "$MUSL_ARM64_SHA256" > "$tmp/root/.deb"
    mkdir -p "$(dirname "$SPACE_MUSL_ARM64")"
    rm -rf "$SPACE_MUSL_ARM64.old"; [ -e "$SPACE_MUSL_ARM64" ] && mv "$SPACE_MUSL_ARM64" "$SPACE_MUSL_ARM64.old"
    mv "$tmp/root" "$SPACE_MUSL_ARM64"; rm -rf "$SPACE_MUSL_ARM64.old"
    chmod -R a+rX "$SPACE_MUSL_ARM64"
    rm -rf "$tmp"
  fi
fi

# ---- 1b. the web console's npm packages ----------------------------------------
# internal/console's TestBundleRebuilds rebuilds the committed bundle from
# web/console with these (pinned by its package-lock.json) and compares.
# spaced itself never needs them: the bundle is committed.
CONSOLE_DIR="$(cd "$(dirname "$0")/.." && pwd)/web/console"
if [ "$PROFILE" = test ] && [ "$RUNSC_ONLY" -eq 0 ] && [ -f "$CONSOLE_DIR/package-lock.json" ]; then
  if [ -d "$CONSOLE_DIR/node_modules" ] && [ ! "$CONSOLE_DIR/package-lock.json" -nt "$CONSOLE_DIR/node_modules/.package-lock.json" ]; then
    log "console npm packages: present"
  else
    log "console npm packages: npm ci in web/console"
    (cd "$CONSOLE_DIR" && npm ci --no-audit --no-fund --loglevel=error) >&2 || die "npm ci in web/console failed"
  fi
fi

# ---- 2. directories ----------------------------------------------------------
mkdir -p /etc/iproute2 /var/run/netns "$(dirname "$SPACE_RUNSC")"

# What the marker beside runsc ($SPACE_RUNSC.build) says of a runsc built
# with its seccomp programs precompiled. The version runsc reports stays
# gVisor's (checkpoints name it, and restore only into the same one), so an
# older build of the same version is told apart by the marker.
RUNSC_BUILD="$RUNSC_VERSION seccomp-precompiled as pid 1"

runsc_ok() {
  # $1 = binary. OK when it runs, reports the pinned version and was built
  # by this script (its marker).
  local bin="$1" v
  [ -x "$bin" ] || return 1
  v=$("$bin" --version 2>/dev/null | sed -n '1s/^runsc version //p') || return 1
  [ "$v" = "$RUNSC_VERSION" ] && [ "$(cat "$bin.build" 2>/dev/null)" = "$RUNSC_BUILD" ]
}

# go_version_ge A B: true when Go version A (e.g. go1.26.8) >= B.
go_version_ge() {
  local a="${1#go}" b="${2#go}"
  [ "$(printf '%s\n%s\n' "$b" "$a" | sort -V | head -n1)" = "$b" ]
}

# Echo a go binary that is >= 1.21 (so GOTOOLCHAIN=auto can fetch newer ones).
find_go() {
  local cand v
  for cand in "${GO:-}" "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go "$SPACE_LIB/go/bin/go" /usr/lib/go/bin/go; do
    [ -n "$cand" ] && [ -x "$cand" ] || continue
    v=$(GOTOOLCHAIN=local "$cand" env GOVERSION 2>/dev/null) || continue
    v="${v%%[-+ ]*}"
    if go_version_ge "$v" go1.21; then printf '%s' "$cand"; return 0; fi
  done
  return 1
}

# Download golang.org/toolchain@v0.0.1-<ver>.linux-<arch> from the Go module proxy,
# verify its h1 module hash, and unpack it to $SPACE_LIB/go.
bootstrap_go() {
  local arch proxy mod url tmp
  case "$(uname -m)" in x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; *) die "unsupported arch $(uname -m)" ;; esac
  proxy="${GOPROXY:-https://proxy.golang.org}"; proxy="${proxy%%[,|]*}"
  case "$proxy" in direct|off|"") proxy=https://proxy.golang.org ;; esac
  mod="v0.0.1-${GO_BOOTSTRAP_VERSION}.linux-${arch}"
  url="$proxy/golang.org/toolchain/@v/$mod.zip"
  mktempdir tmp
  log "go: no Go >= 1.21 in use (or SPACE_FORCE_GO_BOOTSTRAP=1); fetching $GO_BOOTSTRAP_VERSION from $url"
  curl -fsSL --retry 3 -o "$tmp/tc.zip" "$url" || die "download failed: $url"
  python3 - "$tmp/tc.zip" "${GO_BOOTSTRAP_H1[$arch]}" "$tmp/x" <<'PY' || die "Go toolchain hash mismatch"
import base64, hashlib, sys, zipfile
zpath, want, dest = sys.argv[1:4]
z = zipfile.ZipFile(zpath)
names = sorted(n for n in z.namelist() if not n.endswith('/'))
summary = ''.join('%s  %s\n' % (hashlib.sha256(z.read(n)).hexdigest(), n) for n in names)
got = 'h1:' + base64.b64encode(hashlib.sha256(summary.encode()).digest()).decode()
if got != want:
    sys.exit('got %s want %s' % (got, want))
z.extractall(dest)
PY
  local root="$tmp/x/golang.org/toolchain@$mod"
  [ -f "$root/bin/go" ] || die "unexpected toolchain zip layout"
  chmod -R a+rX "$root"; find "$root/bin" "$root/pkg/tool" -type f -exec chmod 0755 {} +
  rm -rf "$SPACE_LIB/go.new"; mv "$root" "$SPACE_LIB/go.new"
  rm -rf "$SPACE_LIB/go.old"; [ -e "$SPACE_LIB/go" ] && mv "$SPACE_LIB/go" "$SPACE_LIB/go.old"
  mv "$SPACE_LIB/go.new" "$SPACE_LIB/go"; rm -rf "$SPACE_LIB/go.old"
  log "go: installed $("$SPACE_LIB/go/bin/go" version) at $SPACE_LIB/go"
}

# ---- 3. Go -------------------------------------------------------------------
GO_BIN=""
if [ "${SPACE_FORCE_GO_BOOTSTRAP:-0}" != 1 ]; then GO_BIN=$(find_go || true); fi
if [ -z "$GO_BIN" ] && { [ "$RUNSC_ONLY" -eq 0 ] || ! runsc_ok "$SPACE_RUNSC" || [ "$FORCE_RUNSC" -eq 1 ]; }; then
  # SPACE_FORCE_GO_BOOTSTRAP=1 exercises the bootstrap path even when a Go exists.
  bootstrap_go; GO_BIN="$SPACE_LIB/go/bin/go"
fi
if [ "$PACKAGES_ONLY" -eq 1 ]; then
  log "done (packages and Go; profile $PROFILE) in $(awk -v a="$START" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')s"
  exit 0
fi

# ---- 4. runsc ----------------------------------------------------------------
if [ "$FORCE_RUNSC" -eq 0 ] && runsc_ok "$SPACE_RUNSC"; then
  log "runsc: $SPACE_RUNSC is $RUNSC_VERSION"
else
  if [ -x "$SPACE_RUNSC" ]; then
    log "runsc: $SPACE_RUNSC reports '$("$SPACE_RUNSC" --version 2>/dev/null | head -n1 || true)', want $RUNSC_VERSION; rebuilding"
  else
    log "runsc: not installed; building"
  fi
  export HOME="${HOME:-/root}"
  mktempdir work        # outside the project: its go.mod must not be involved
  mkdir -p "$work/bin"
  log "runsc: gvisor.dev/gvisor@$RUNSC_MODULE_VERSION with its seccomp programs precompiled, $("$GO_BIN" version | cut -d' ' -f3) (takes ~3 min on 2 cores)"
  t0=$(date +%s)
  goenv=(env -u GOWORK CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=auto)
  # The go branch of gVisor leaves runsc to compile the seccomp-bpf programs
  # of its sentry and gofer at every sandbox start (~24 ms of CPU and of
  # each create's time here; docs/benchmarks.md). Bazel builds generate
  # them; scripts/seccompgen does the same for the configurations spaced
  # runs, into a writable copy of the module's source.
  src=$(cd "$work" && "${goenv[@]}" "$GO_BIN" mod download -json "gvisor.dev/gvisor@$RUNSC_MODULE_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') || die "download of gvisor.dev/gvisor@$RUNSC_MODULE_VERSION failed"
  [ -d "$src/runsc" ] || die "gvisor.dev/gvisor@$RUNSC_MODULE_VERSION: no source at '$src'"
  cp -r "$src" "$work/gvisor" && chmod -R u+w "$work/gvisor"
  cp -r "$(dirname "$0")/seccompgen" "$work/gen"
  ( cd "$work/gen" &&
    "${goenv[@]}" "$GO_BIN" mod edit -require="gvisor.dev/gvisor@$RUNSC_MODULE_VERSION" -replace="gvisor.dev/gvisor=$work/gvisor" &&
    "${goenv[@]}" "$GO_BIN" build -o "$work/seccompgen" . &&
    # As PID 1 of a PID namespace, as the sentry runs: see seccompgen.
    unshare --pid --fork "$work/seccompgen" "$work/gvisor/runsc/boot/filter/filter_precompiled.go" "$work/gvisor/runsc/fsgofer/filter/filter_precompiled.go" &&
    "${goenv[@]}" "$GO_BIN" build -o "$work/bin/runsc" \
      -ldflags "-X gvisor.dev/gvisor/runsc/version.version=$RUNSC_VERSION" gvisor.dev/gvisor/runsc ) >&2 ||
    die "build of runsc failed"
  new="$work/bin/runsc"
  [ -x "$new" ] || die "the build produced no $new"
  printf '%s\n' "$RUNSC_BUILD" > "$new.build"
  log "runsc: built in $(( $(date +%s) - t0 ))s"
  # It must be static: the gofer/sandbox re-exec themselves inside an empty chroot.
  file -b "$new" | grep -q 'statically linked' || die "runsc is not statically linked: $(file -b "$new")"
  "$GO_BIN" version -m "$new" | grep -q 'CGO_ENABLED=0' || die "runsc was not built with CGO_ENABLED=0"
  runsc_ok "$new" || die "new runsc reports '$("$new" --version 2>&1 | head -n1)', want $RUNSC_VERSION"
  # Atomic install: copy next to the target, then rename over it.
  tmpdst="$(dirname "$SPACE_RUNSC")/.runsc.tmp.$$"
  install -m 0755 -o root -g root "$new" "$tmpdst" || { rm -f "$tmpdst"; die "copy to $tmpdst failed"; }
  mv -f "$tmpdst" "$SPACE_RUNSC" || { rm -f "$tmpdst"; die "rename to $SPACE_RUNSC failed"; }
  cp "$new.build" "$SPACE_RUNSC.build.tmp" && mv -f "$SPACE_RUNSC.build.tmp" "$SPACE_RUNSC.build" || die "write $SPACE_RUNSC.build failed"
  log "runsc: installed $SPACE_RUNSC ($(du -h "$SPACE_RUNSC" | cut -f1), static)"
fi

if [ "$RUNSC_ONLY" -eq 1 ]; then
  log "done (runsc only) in $(awk -v a="$START" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')s"
  exit 0
fi

# ---- 5. versitygw (the real S3 server the object-storage tests start) ------
if [ "$PROFILE" = test ]; then
  PATH="$(dirname "$GO_BIN"):$PATH" "$(dirname "$0")/install-versitygw.sh"
fi

log "done in $(awk -v a="$START" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')s"
