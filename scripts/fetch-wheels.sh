#!/usr/bin/env bash
# fetch-wheels.sh DIR - download the code interpreter's Python wheels
# (scripts/interpreter-requirements.txt, every one pinned) into DIR, for the
# sandbox's Python (CPython 3.11, manylinux x86_64: Debian 12), whatever the
# host's Python is. Only wheels: nothing is built and nothing downloaded is
# executed. Skipped when DIR's marker says the same pins are already there.
#
# A template installs them offline with
#   python3 -m venv /opt/space/interpreter/venv
#   /opt/space/interpreter/venv/bin/pip install --no-index --find-links DIR -r interpreter-requirements.txt
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REQ="$HERE/interpreter-requirements.txt"
PYTHON="${PYTHON:-python3}"

if [ $# -ne 1 ]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
dir="$1"
pins="$(sha256sum "$REQ" | cut -c1-16)"
if [ "$(cat "$dir/.pins" 2>/dev/null)" = "$pins" ]; then
  exit 0
fi

mkdir -p "$dir"
rm -f "$dir/.pins"
# Debian's python3 has no pip without python3-pip; a throwaway venv
# (python3-venv) brings its own.
pip=("$PYTHON" -m pip)
if ! "${pip[@]}" --version >/dev/null 2>&1; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  "$PYTHON" -m venv "$tmp/venv"
  pip=("$tmp/venv/bin/python" -m pip)
fi
# pip matches --platform exactly (it does not widen manylinux_2_28 to the
# older tags or the other way round), so every tag a pinned wheel may carry
# is listed; without the 2_27/2_28 ones pip would look for older releases.
# glibc 2.36 (Debian 12) runs all of them.
echo "fetch-wheels: downloading into $dir" >&2
"${pip[@]}" download --quiet --disable-pip-version-check --no-input \
  --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux_2_26_x86_64 \
  --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 \
  --platform linux_x86_64 \
  -d "$dir" -r "$REQ"
cp "$REQ" "$dir/requirements.txt"
echo "$pins" > "$dir/.pins"
echo "fetch-wheels: $(ls "$dir"/*.whl | wc -l) wheels in $dir" >&2
