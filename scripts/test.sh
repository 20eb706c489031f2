#!/usr/bin/env bash
# test.sh - set up this machine (Debian 12, as root) and run the whole test
# suite: unit tests, the runtime conformance suite against real runsc, the
# end-to-end tests against a real spaced, and the E2B SDK tests; at the end
# of go test, a table of each package's time (slowest first).
# Extra arguments go to go test (for example -run TestBasic ./test/e2e/).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

# Strict mode (internal/testenv): this script has just installed everything
# the system tests need, so a test that finds root, runsc, the base
# template, versitygw or a tool missing fails instead of skipping, and a run
# that tested nothing cannot pass.
export SPACE_TEST_STRICT=1

setup test
# Every suite's harness uses these binaries (and the base template made
# with this agent) instead of building its own.
export SPACE_TEST_BIN="$ROOT/bin"
cd "$ROOT"
echo "test: go vet" >&2
go vet ./...

# A whole run starts the longest packages first (the times of the last
# whole run on this machine, else the system suites known to be long), so
# that no long suite starts last while the other slots idle. Output still
# comes in that order, each package's block whole, closing with go test's
# own last lines. SPACE_TEST_P sets go test -p (default: the number of
# CPUs, go's own default).
times="${SPACE_TEST_TIMES:-/var/cache/space/test-times.tsv}"
args=("$@")
if [[ $# -eq 0 ]]; then
  mapfile -t args < <(go list ./... | "$ROOT/scripts/test-times.sh" order "$times")
  echo "test: go test, ${#args[@]} packages, longest first (${args[0]#"$(go list -m)"/}, ${args[1]#"$(go list -m)"/}, ...)" >&2
else
  echo "test: go test $*" >&2
fi
p=()
[[ -n "${SPACE_TEST_P:-}" ]] && p=(-p "$SPACE_TEST_P")
out="$(mktemp)"
# Each suite's harness appends here the sandboxes a daemon left running
# after its shutdown (test/harness: it destroys them); go test shows
# nothing of a passing package, so they are printed after the run.
export SPACE_TEST_LEFTOVERS="$(mktemp)"
rc=0
go test -race -count=1 -timeout 30m "${p[@]}" "${args[@]}" 2>&1 | tee "$out" || rc=$?
"$ROOT/scripts/test-times.sh" table "$out" >&2
if [[ $# -eq 0 && $rc -eq 0 ]]; then
  mkdir -p "$(dirname "$times")"
  "$ROOT/scripts/test-times.sh" tsv "$out" >"$times.new" && mv "$times.new" "$times"
fi
if [[ -s "$SPACE_TEST_LEFTOVERS" ]]; then
  echo "test: sandboxes left running after their daemon's shutdown (destroyed by the harness):" >&2
  cat "$SPACE_TEST_LEFTOVERS" >&2
fi
# go test's closing line again, last, for whatever reads the end of the log.
tail -n 1 "$out"
rm -f "$out" "$SPACE_TEST_LEFTOVERS"
[[ $rc -eq 0 ]] || exit "$rc"

# The clock-jump fault steps the host's wall clock, so it runs alone, after
# everything else that could mind (a targeted run skips it).
if [[ $# -eq 0 ]]; then
	echo "test: clock jump (steps the host clock, alone)" >&2
	SPACE_TEST_CLOCK_JUMP=1 go test -count=1 -timeout 5m -run '^TestClockJump$' ./test/fault/
fi

# A short fuzz run of every target, each package's instrumented test binary
# built once (go test -fuzz itself takes one target of one package at a time
# and relinks for each). FUZZTIME sets the time per target (5s by default, 0
# skips the step); a targeted run (arguments given) skips it too. A failing
# input is written to the package's testdata/fuzz: commit it with the fix.
fuzztime="${FUZZTIME:-5s}"
if [[ $# -eq 0 && "$fuzztime" != "0" ]]; then
	echo "test: fuzz ($fuzztime per target)" >&2
	fuzzbin="$(mktemp -d)"
	trap 'rm -rf "$fuzzbin"' EXIT
	module="$(go list -m)"
	# files_in counts the files of a directory that may not exist (set -e
	# and pipefail make a bare ls of a missing one end the script).
	files_in() { if [[ -d "$1" ]]; then find "$1" -type f | wc -l; else echo 0; fi; }
	for dir in $(grep -l '^func Fuzz' -r --include='*_test.go' internal cmd | xargs -n1 dirname | sort -u); do
		bin="$fuzzbin/$(echo "$dir" | tr / _).test"
		go test -c -fuzz=. -o "$bin" "./$dir"
		for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go | sed 's/func //' | sort); do
			echo "test: fuzz ./$dir $target" >&2
			corpus="$dir/testdata/fuzz/$target"
			before="$(files_in "$corpus")"
			out="$fuzzbin/out"
			if ! (cd "$dir" && "$bin" -test.run='^$' -test.fuzz="^${target}\$" -test.fuzztime="$fuzztime" \
				-test.fuzzcachedir="$(go env GOCACHE)/fuzz/$module/$dir") >"$out" 2>&1; then
				cat "$out"
				# Go's fuzz coordinator can report the end of -fuzztime itself as
				# a failure ("context deadline exceeded", golang/go#75804, fixed
				# in Go 1.27): that, with no failing input written, is not one.
				after="$(files_in "$corpus")"
				if [[ "$after" == "$before" ]] && tail -n 3 "$out" | grep -q '^    context deadline exceeded$'; then
					echo "test: fuzz ./$dir $target: the fuzz coordinator's deadline race (golang/go#75804), no failing input: not a failure" >&2
				else
					exit 1
				fi
			else
				cat "$out"
			fi
		done
	done
fi
