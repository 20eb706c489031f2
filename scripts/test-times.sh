#!/usr/bin/env bash
# test-times.sh - what test.sh knows of its packages' times.
#
#   test-times.sh order TIMES   reads package import paths (go list) on stdin
#                               and prints them longest first: by TIMES (a
#                               "package<TAB>seconds" file of the last whole
#                               run; without one, the suites known to be long),
#                               a package it does not know under test/ (a
#                               system suite) taken for 120 s, any other for 0.
#   test-times.sh table OUT     the table of package -> seconds (slowest
#                               first) from go test's output OUT ("ok" and
#                               "FAIL" lines), with the total.
#   test-times.sh tsv OUT       the same as "package<TAB>seconds", for TIMES.
set -euo pipefail

# Seconds of a whole run on 2 cores (issue 26), for a machine with no times
# of its own yet.
SEED='test/desktop 480
test/interpreter 378
test/e2e 340
test/e2b 235
test/redteam 159'

times_of() { # OUT -> package<TAB>seconds<TAB>status
  awk '($1 == "ok" || $1 == "FAIL") && NF >= 3 && $3 ~ /^[0-9.]+s$/ {
    s = $3; sub(/s$/, "", s); printf "%s\t%s\t%s\n", $2, s, $1 }' "$1"
}

case "${1:-}" in
order)
  times="${2:-}"
  module="$(go list -m)"
  known="$(if [[ -s "$times" ]]; then cat "$times"; else
    echo "$SEED" | awk -v m="$module" '{ printf "%s/%s\t%s\n", m, $1, $2 }'; fi)"
  awk -F'\t' -v m="$module/test/" '
    NR == FNR { t[$1] = $2; next }
    { p = $0
      s = (p in t) ? t[p] : (index(p, m) == 1 ? 120 : 0)
      printf "%012.3f\t%06d\t%s\n", 1e6 - s, FNR, p }
  ' <(echo "$known") - | sort | cut -f3
  ;;
table)
  times_of "$2" | sort -t$'\t' -k2,2gr | awk -F'\t' '
    BEGIN { printf "test: time per package (slowest first)\n" }
    { total += $2; n++
      if ($2 >= 1) printf "  %8.1fs  %s%s\n", $2, $1, ($3 == "FAIL" ? "  FAIL" : "")
      else small++ }
    END { if (small) printf "  %d packages under 1s\n", small
          printf "  %8.1fs  total of %d packages (run side by side: more than the wall time)\n", total, n }'
  ;;
tsv)
  times_of "$2" | cut -f1,2
  ;;
*)
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
  ;;
esac
