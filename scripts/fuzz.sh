#!/usr/bin/env bash
# fuzz.sh [FUZZTIME]: runs every fuzz target of the module (each func FuzzX
# in a _test.go file), one after another, for FUZZTIME each (default 10s; Go's
# -fuzztime syntax), on top of its corpus in testdata/fuzz/FuzzX beside it.
# An input that fails is written there by go test and the run stops with its
# failure: fix the code and commit the input with the fix, so that every
# later go test runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-10s}
go=${GO:-go}

# "dir name" per target, e.g. "./gateway FuzzRouter".
targets=$(grep -rE --include='*_test.go' -o '^func Fuzz[A-Za-z0-9_]*' . |
  while IFS=: read -r file fn; do echo "$(dirname "$file") ${fn#func }"; done | sort)
if [ -z "$targets" ]; then
  echo "fuzz.sh: no fuzz targets found" >&2
  exit 1
fi
while read -r dir name; do
  echo "fuzz: $name ($dir) for $fuzztime"
  start=$(date +%s)
  "$go" test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$dir"
  echo "fuzz: $name done in $(( $(date +%s) - start ))s"
done <<<"$targets"
