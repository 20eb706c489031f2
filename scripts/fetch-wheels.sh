#!/usr/bin/env bash
# fetch-wheels.sh DIR - download what the code interpreter's kernels run on
# into DIR, for the sandbox (Debian 12, the host's architecture: x86_64 or
# aarch64; gVisor runs the sandbox's code on the host's CPU):
#   - its Python wheels (scripts/interpreter-requirements.txt, every one
#     pinned) for CPython 3.11, manylinux of that architecture: ipykernel,
#     the data stack, bash_kernel, jjava (the java kernel: a jar in a wheel,
#     run on the template's JDK). Only wheels: nothing is built and nothing
#     downloaded is executed here.
#   - Deno (DIR/deno), the kernel of the javascript and typescript
#     contexts, from npm: its package @deno/linux-x64-glibc (or
#     linux-arm64-glibc) carries the binary. Pinned below with the tarball's
#     integrity, which npm checks against the registry and this script
#     against the pin. Needs npm.
# Skipped when DIR's marker says the same pins are already there.
#
# A template installs them offline with
#   python3 -m venv /opt/space/interpreter/venv
#   /opt/space/interpreter/venv/bin/pip install --no-index --find-links DIR -r interpreter-requirements.txt
#   install -m 0755 DIR/deno /opt/space/interpreter/deno
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REQ="$HERE/interpreter-requirements.txt"
PYTHON="${PYTHON:-python3}"
DENO_VERSION=2.9.6
DENO_INTEGRITY_X64=sha512-3md4TKLCuzsLDmfOoC5KN7NAZaxSVkMgm64vg6foD00JBADCpYS2/5QqXfzgnP5ZQz3iLP9vBQJtEgc116OAoQ==
DENO_INTEGRITY_ARM64=sha512-poqhoH9B3nYloigEMPT5t8HY+wBeiuea1An5Q7fqgJzP0SYmWsoS/oUnWO/pEiA4ofzIBy1Elt/in58xKtxEoQ==
arch="$(uname -m)"
case "$arch" in
  x86_64) deno_pkg=linux-x64-glibc; DENO_INTEGRITY=$DENO_INTEGRITY_X64 ;;
  aarch64) deno_pkg=linux-arm64-glibc; DENO_INTEGRITY=$DENO_INTEGRITY_ARM64 ;;
  *) echo "fetch-wheels: no pins for $arch (x86_64 or aarch64)" >&2; exit 1 ;;
esac

if [ $# -ne 1 ]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
dir="$1"
pins="$( (cat "$REQ"; echo "deno $DENO_VERSION $DENO_INTEGRITY") | sha256sum | cut -c1-16)"
if [ "$(cat "$dir/.pins" 2>/dev/null)" = "$pins" ]; then
  exit 0
fi

mkdir -p "$dir"
rm -f "$dir/.pins"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# Debian's python3 has no pip without python3-pip; a throwaway venv
# (python3-venv) brings its own.
pip=("$PYTHON" -m pip)
if ! "${pip[@]}" --version >/dev/null 2>&1; then
  "$PYTHON" -m venv "$tmp/venv"
  pip=("$tmp/venv/bin/python" -m pip)
fi
# pip matches --platform exactly (it does not widen manylinux_2_28 to the
# older tags or the other way round), so every tag a pinned wheel may carry
# is listed; without the 2_27/2_28 ones pip would look for older releases.
# glibc 2.36 (Debian 12) runs all of them.
echo "fetch-wheels: downloading into $dir ($arch)" >&2
"${pip[@]}" download --quiet --disable-pip-version-check --no-input \
  --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
  --platform "manylinux2014_$arch" --platform "manylinux_2_17_$arch" \
  --platform "manylinux_2_24_$arch" --platform "manylinux_2_26_$arch" \
  --platform "manylinux_2_27_$arch" --platform "manylinux_2_28_$arch" \
  --platform "linux_$arch" \
  -d "$dir" -r "$REQ"
cp "$REQ" "$dir/requirements.txt"

echo "fetch-wheels: deno $DENO_VERSION from npm" >&2
tgz="$(cd "$tmp" && npm pack --silent "@deno/$deno_pkg@$DENO_VERSION" | tail -n 1)"
got="$("$PYTHON" -c 'import base64, hashlib, sys
print("sha512-" + base64.b64encode(hashlib.sha512(open(sys.argv[1], "rb").read()).digest()).decode())' "$tmp/$tgz")"
if [ "$got" != "$DENO_INTEGRITY" ]; then
  echo "fetch-wheels: $tgz is $got, not the pinned $DENO_INTEGRITY" >&2
  exit 1
fi
tar -xzf "$tmp/$tgz" -C "$tmp" package/deno
install -m 0755 "$tmp/package/deno" "$dir/deno"

echo "$pins" > "$dir/.pins"
echo "fetch-wheels: $(ls "$dir"/*.whl | wc -l) wheels and deno in $dir" >&2
