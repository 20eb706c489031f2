#!/usr/bin/env bash
# build-template.sh - build the SPACE `base` template root filesystem.
#
# Usage: scripts/build-template.sh --agent PATH [--out DIR] [--mirror URL] [--keep-old]
#        scripts/build-template.sh --rootfs-only [--out DIR] [--mirror URL]
#
#   --agent PATH   space-agent binary to install as /usr/local/bin/space-agent (required)
#   --rootfs-only  build (or keep) the rootfs only, no agent: run.sh and test.sh make it
#                  while the agent compiles, then run this again with --agent
#   --out DIR      templates directory (default /var/lib/space/templates)
#   --mirror URL   Debian mirror for debootstrap (default: the bookworm mirror from
#                  /etc/apt/sources.list{,.d}, else $SPACE_DEBIAN_MIRROR, else
#                  http://deb.debian.org/debian)
#   --keep-old     do not delete the rootfs-<recipe12> directories of other recipes
#                  (images are never deleted here: spaced's template collector does)
#
# Layout (DIR/base/):
#   rootfs-<recipe12>/   the root filesystem; the name is the first 12 hex digits of the
#                        sha256 of the recipe section of this script (+ suite, packages, arch)
#   rootfs-<recipe12>-a<agent12>/  an image: hard links to the rootfs plus the agent; never
#                        changed once made (sandboxes and checkpoints name the image they use)
#   current -> rootfs-<recipe12>-a<agent12>   (relative symlink, replaced atomically)
#   template.json        {"name","rootfs","recipe","agent_sha256","built_at"} (atomic)
#   .lock                flock(1) lock: concurrent runs serialize
#
# The rootfs is debootstrapped into DIR/base/.tmp-<recipe12>-<pid> and renamed into place
# only when complete, so a crash never leaves a half-built rootfs under a final name.
# If rootfs-<recipe12> exists, debootstrap is skipped; a new agent makes a new image (hard
# links, a fraction of a second). A re-run with nothing changed is a no-op.
# Needs root, debootstrap, flock, sha256sum (scripts/install-deps.sh installs them).
set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")

# >>> recipe ------------------------------------------------------------------------
# Everything between the two "recipe" marker lines is hashed into the rootfs name:
# change anything here and the next run builds a fresh rootfs.
SUITE=bookworm
VARIANT=minbase
PACKAGES=(bash coreutils python3 python3-pip python3-venv nodejs git curl ca-certificates procps sudo)
SANDBOX_USER=user
SANDBOX_UID=1000
SANDBOX_GID=1000
SANDBOX_HOSTNAME=sandbox

# customize_rootfs ROOT: everything done to the rootfs after debootstrap.
customize_rootfs() {
  local r="$1"

  # The unprivileged user the agent runs commands as; passwordless sudo.
  chroot "$r" /usr/sbin/groupadd -g "$SANDBOX_GID" "$SANDBOX_USER"
  chroot "$r" /usr/sbin/useradd -m -d "/home/$SANDBOX_USER" -s /bin/bash \
    -u "$SANDBOX_UID" -g "$SANDBOX_GID" "$SANDBOX_USER"
  printf '%s ALL=(ALL:ALL) NOPASSWD: ALL\n' "$SANDBOX_USER" > "$r/etc/sudoers.d/$SANDBOX_USER"
  chown 0:0 "$r/etc/sudoers.d/$SANDBOX_USER"
  chmod 0440 "$r/etc/sudoers.d/$SANDBOX_USER"
  chroot "$r" /usr/sbin/visudo -cqf "/etc/sudoers.d/$SANDBOX_USER"

  # Identity and name resolution. resolv.conf is empty: the runtime fills it in.
  printf '%s\n' "$SANDBOX_HOSTNAME" > "$r/etc/hostname"
  printf '127.0.0.1\tlocalhost %s\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' \
    "$SANDBOX_HOSTNAME" > "$r/etc/hosts"
  rm -f "$r/etc/resolv.conf"; : > "$r/etc/resolv.conf"; chmod 0644 "$r/etc/resolv.conf"
  if [ -e "$r/etc/machine-id" ]; then : > "$r/etc/machine-id"; fi

  # E2B's SDKs run every command as `bash -l -c`, and Debian's /etc/profile
  # runs `id -u` in a subshell for it: a fork and an exec that cost ~25 ms
  # of every command inside gVisor. Bash knows its effective uid (EUID,
  # read-only); other shells still ask id.
  sed -i 's/"$(id -u)"/"${EUID:-$(id -u)}"/g' "$r/etc/profile"
  if grep -q '"$(id -u)"' "$r/etc/profile"; then echo "build-template: /etc/profile still forks id" >&2; return 1; fi

  # pip installs system-wide as in E2B's base template (a template's
  # "RUN pip install x" and the SDK's pip_install), not refused by PEP 668.
  rm -f "$r"/usr/lib/python3*/EXTERNALLY-MANAGED

  # Keep docs, man pages and non-C locales out, now and for later apt installs.
  cat > "$r/etc/dpkg/dpkg.cfg.d/01-space-minimal" <<'EOF'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/lintian/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
EOF
  find "$r/usr/share/doc" -mindepth 1 -not -type d -not -name copyright -delete 2>/dev/null || true
  find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
  rm -rf "$r"/usr/share/man/* "$r"/usr/share/info/* "$r"/usr/share/lintian/*
  find "$r/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} + 2>/dev/null || true

  # Caches, package lists, logs, temp files.
  chroot "$r" /usr/bin/apt-get clean
  rm -rf "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/*.bin "$r"/var/cache/debconf/*-old \
         "$r"/var/lib/dpkg/*-old "$r"/tmp/* "$r"/var/tmp/* "$r"/root/.cache
  mkdir -p "$r/var/lib/apt/lists/partial"
  find "$r/var/log" -type f -delete

  # gVisor mounts a tmpfs over an empty /tmp: keep it non-empty so /tmp is
  # on the sandbox's disk like the rest (in its limit, its snapshots and
  # the layers of template builds, as in a container build).
  printf '%s\n' "$TMP_KEEP_TEXT" > "$r/tmp/.space-keep"
  chmod 0644 "$r/tmp/.space-keep"
}
TMP_KEEP_TEXT="Keeps /tmp on the sandbox's disk: gVisor mounts a tmpfs over an empty /tmp."
# <<< recipe ------------------------------------------------------------------------

OUT=/var/lib/space/templates
AGENT=""
MIRROR=""
KEEP_OLD=0
ROOTFS_ONLY=0

usage() { sed -n '2,30p' "$SELF" | sed 's/^# \{0,1\}//'; }
log() { printf 'build-template: %s\n' "$*" >&2; }
die() { printf 'build-template: ERROR: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.2f", b-a}'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || die "--out needs a value"; OUT="$2"; shift 2 ;;
    --out=*) OUT="${1#*=}"; shift ;;
    --agent) [ $# -ge 2 ] || die "--agent needs a value"; AGENT="$2"; shift 2 ;;
    --agent=*) AGENT="${1#*=}"; shift ;;
    --mirror) [ $# -ge 2 ] || die "--mirror needs a value"; MIRROR="$2"; shift 2 ;;
    --mirror=*) MIRROR="${1#*=}"; shift ;;
    --keep-old) KEEP_OLD=1; shift ;;
    --rootfs-only) ROOTFS_ONLY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done

[ "$(id -u)" -eq 0 ] || die "must run as root"
if [ "$ROOTFS_ONLY" -eq 0 ]; then
  [ -n "$AGENT" ] || { usage >&2; die "--agent is required"; }
  [ -f "$AGENT" ] || die "agent binary not found: $AGENT"
fi
for c in debootstrap flock sha256sum findmnt chroot; do
  command -v "$c" >/dev/null || die "$c not found (run scripts/install-deps.sh)"
done

START=$(now)
OUT=$(realpath -m -- "$OUT")
case "$OUT" in *[\"\\]*|*[[:cntrl:]]*) die "refusing --out with quotes, backslashes or control characters: $OUT" ;; esac
BASE="$OUT/base"
mkdir -p "$BASE"
chmod 0755 "$OUT" "$BASE"

ARCH=$(dpkg --print-architecture)
RECIPE=$( { sed -n '/^# >>> recipe/,/^# <<< recipe/p' "$SELF"
            printf 'suite=%s\nvariant=%s\narch=%s\npackages=%s\n' "$SUITE" "$VARIANT" "$ARCH" "${PACKAGES[*]}"
          } | sha256sum | cut -d' ' -f1)
H12=${RECIPE:0:12}
ROOTFS="$BASE/rootfs-$H12"

# Serialize concurrent runs on the same templates directory.
exec 9>"$BASE/.lock"
if ! flock -n 9; then
  log "another build holds $BASE/.lock; waiting"
  flock 9
fi

# ---- helpers -----------------------------------------------------------------------
# Mounts at or below $1 (deepest first).
mounts_under() {
  findmnt -rn -o TARGET | awk -v p="$1" '$0 == p || index($0, p "/") == 1' | sort -r
}
# Remove a build/rootfs directory, but never through a live mount.
safe_rm_dir() {
  local d="$1" m
  [ -d "$d" ] || return 0
  for m in $(mounts_under "$d"); do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  if [ -n "$(mounts_under "$d")" ]; then
    log "WARNING: mounts remain under $d; not removing it"
    return 1
  fi
  rm -rf --one-file-system -- "$d"
}
# True if some process (e.g. a runsc gofer, in its own mount namespace) has a bind
# mount of this dir or of something inside it. mountinfo field 3 is the device and
# field 4 the path inside that filesystem, so translate $1 into those terms first.
dir_in_use() {
  local d="$1" dev mp fsroot suffix rel
  read -r dev mp fsroot < <(findmnt -n -o MAJ:MIN,TARGET,FSROOT -T "$d") || return 1
  if [ "$mp" = / ]; then suffix="$d"; else suffix="${d#"$mp"}"; fi
  rel="${fsroot%/}$suffix"
  # (`|| true`: with pipefail, cat's error on exited pids or SIGPIPE must not count)
  { cat /proc/[0-9]*/mountinfo 2>/dev/null || true; } |
    awk -v dev="$dev" -v p="$rel" '$3 == dev && ($4 == p || index($4, p "/") == 1) { found = 1; exit } END { exit !found }'
}

# Mirror for $SUITE from apt's configuration (one-line and deb822 formats).
detect_mirror() {
  local f uri
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    uri=$(sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" |
          awk -v s="$SUITE" '$1 == "deb" && $3 == s { print $2; exit }')
    [ -n "$uri" ] && { printf '%s' "$uri"; return 0; }
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri=$(awk -v s="$SUITE" '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " s " ") && enabled !~ /^no$/ && uris != "") {
          split(uris, u, " "); print u[1]; done = 1; exit
        }
        types = suites = uris = enabled = ""
      }
      /^#/ { next }
      /^[ \t]*$/ { flush(); next }
      /^[A-Za-z-]+:/ {
        k = tolower(substr($0, 1, index($0, ":") - 1)); v = substr($0, index($0, ":") + 1)
        gsub(/^[ \t]+|[ \t]+$/, "", v)
        if (k == "types") types = v; else if (k == "suites") suites = v
        else if (k == "uris") uris = v; else if (k == "enabled") enabled = tolower(v)
      }
      END { if (!done) flush() }' "$f")
    [ -n "$uri" ] && { printf '%s' "$uri"; return 0; }
  done
  return 1
}

# ---- 1. rootfs (debootstrap + customize), only if missing --------------------------
if [ -d "$ROOTFS" ]; then
  log "rootfs: $ROOTFS exists (recipe $H12); skipping debootstrap"
else
  if [ -z "$MIRROR" ]; then
    MIRROR=$(detect_mirror || true)
    case "$MIRROR" in http://*|https://*|file:/*) ;; *) MIRROR="" ;; esac
    MIRROR=${MIRROR:-${SPACE_DEBIAN_MIRROR:-http://deb.debian.org/debian}}
  fi
  TMP="$BASE/.tmp-$H12-$$"
  BUILD_LOG="$BASE/.build-$H12-$$.log"
  on_exit() {
    local rc=$?
    if [ "$rc" -ne 0 ] && [ -s "$BUILD_LOG" ]; then
      tail -n 20 "$BUILD_LOG" >&2 || true
      log "build failed (rc $rc); full log: $BUILD_LOG"
    fi
    safe_rm_dir "$TMP" || log "left $TMP behind (remove it by hand)"
  }
  trap on_exit EXIT
  trap 'exit 130' INT TERM
  mkdir -p "$TMP"

  t=$(now)
  log "rootfs: debootstrap --variant=$VARIANT $SUITE from $MIRROR (packages: ${PACKAGES[*]}; log $BUILD_LOG)"
  # (no `if !`/`||` around these: set -e must stay in force inside customize_rootfs;
  #  on failure the EXIT trap prints the log tail and removes $TMP)
  debootstrap --variant="$VARIANT" --arch="$ARCH" --components=main \
    --include="$(IFS=,; printf '%s' "${PACKAGES[*]}")" \
    "$SUITE" "$TMP" "$MIRROR" > "$BUILD_LOG" 2>&1
  [ -z "$(mounts_under "$TMP")" ] || die "debootstrap left mounts under $TMP"
  log "rootfs: debootstrap took $(since "$t")s"

  t=$(now)
  customize_rootfs "$TMP" >>"$BUILD_LOG" 2>&1
  BUILT_AT=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  printf 'SPACE_TEMPLATE=base\nSPACE_RECIPE=%s\nSPACE_SUITE=%s\nSPACE_BUILT_AT=%s\n' \
    "$RECIPE" "$SUITE" "$BUILT_AT" > "$TMP/etc/space-release"
  chmod 0755 "$TMP"
  sync -f "$TMP" 2>/dev/null || true
  log "rootfs: customize took $(since "$t")s"

  mv -T "$TMP" "$ROOTFS"   # atomic: the final name appears only when complete
  trap - EXIT
  rm -f "$BUILD_LOG"
  log "rootfs: $ROOTFS ready ($(du -sh --one-file-system "$ROOTFS" | cut -f1))"
fi

if [ "$ROOTFS_ONLY" -eq 1 ]; then
  log "done (rootfs only) in $(since "$START")s"
  exit 0
fi

# ---- 2. agent ----------------------------------------------------------------------
# Images are immutable: a sandbox, and every checkpoint of it, keeps using the image it was
# made from (a restored process maps the agent binary again by path, so swapping the file
# under it would crash it). A new agent therefore makes a new image,
# rootfs-<recipe12>-a<agent12>: hard links to the recipe rootfs (cheap) with the agent
# installed as a new file.
AGENT_SHA=$(sha256sum "$AGENT" | cut -d' ' -f1)
NAME="rootfs-$H12-a${AGENT_SHA:0:12}"
IMAGE="$BASE/$NAME"
if [ -d "$IMAGE" ]; then
  log "agent: image $NAME exists (sha256 ${AGENT_SHA:0:12})"
else
  TMPI="$BASE/.tmp-img-$$"
  trap 'rm -rf -- "$TMPI"' EXIT
  cp -al -- "$ROOTFS" "$TMPI" || die "linking the image failed"
  mkdir -p "$TMPI/usr/local/bin"
  TMPA="$TMPI/usr/local/bin/.space-agent.tmp.$$"
  install -m 0755 -o root -g root "$AGENT" "$TMPA" || die "copying the agent failed"
  mv -f "$TMPA" "$TMPI/usr/local/bin/space-agent" || die "installing the agent failed"
  mv -T "$TMPI" "$IMAGE"
  trap - EXIT
  log "agent: made image $NAME with $AGENT (sha256 ${AGENT_SHA:0:12})"
fi

# cp -a keeps the recipe rootfs's mtime: stamp the image so "newest first" below means the
# images used most recently, and never the one just made or chosen.
touch -c -- "$IMAGE"

# ---- 3. current symlink ------------------------------------------------------------
if [ "$(readlink "$BASE/current" 2>/dev/null || true)" != "$NAME" ]; then
  ln -sfn "$NAME" "$BASE/.current.tmp.$$"
  mv -fT "$BASE/.current.tmp.$$" "$BASE/current"
  log "current -> $NAME"
fi

# ---- 4. template.json --------------------------------------------------------------
BUILT_AT=$(sed -n 's/^SPACE_BUILT_AT=//p' "$ROOTFS/etc/space-release" 2>/dev/null || true)
BUILT_AT=${BUILT_AT:-$(date -u -r "$ROOTFS" +%Y-%m-%dT%H:%M:%SZ)}
JSON=$(printf '{"name":"base","rootfs":"%s","recipe":"%s","agent_sha256":"%s","built_at":"%s"}' \
  "$IMAGE" "$RECIPE" "$AGENT_SHA" "$BUILT_AT")
if [ "$(cat "$BASE/template.json" 2>/dev/null || true)" != "$JSON" ]; then
  printf '%s\n' "$JSON" > "$BASE/.template.json.tmp.$$"
  chmod 0644 "$BASE/.template.json.tmp.$$"
  mv -f "$BASE/.template.json.tmp.$$" "$BASE/template.json"
  log "wrote $BASE/template.json"
fi

# ---- 5. garbage (best effort) -----------------------------------------------------
# We hold the lock, so no other build is running: every .tmp-* dir is a crashed build.
# Images (rootfs-*-a*) are never removed here: a running or paused sandbox, a snapshot or
# a template's layers may name one, and only spaced knows which; its template collector
# removes those nothing uses once older than SPACE_TEMPLATE_CACHE_TTL. The rootfs of
# other recipes go (unless --keep-old): an image holds its files by hard links.
for d in "$BASE"/rootfs-* "$BASE"/.tmp-*; do
  [ -d "$d" ] && [ ! -L "$d" ] || continue
  [ "$d" = "$ROOTFS" ] && continue
  case "$d" in
    "$BASE"/rootfs-*-a*) continue ;;
    "$BASE"/rootfs-*) [ "$KEEP_OLD" -eq 1 ] && continue ;;
  esac
  if dir_in_use "$d"; then
    log "keeping $d: a running process (sandbox?) still has it mounted"
    continue
  fi
  if safe_rm_dir "$d"; then log "removed $d"; fi
done
rm -f -- "$BASE"/.current.tmp.* "$BASE"/.template.json.tmp.*
# failed-build logs are kept for a day
find "$BASE" -maxdepth 1 -name '.build-*.log' -mmin +1440 -delete 2>/dev/null || true

log "base template ready: $BASE/current -> $NAME (total $(since "$START")s)"
