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
# inputs lists the failing inputs go test has written for a target.
inputs() { find "$1/testdata/fuzz/$2" -type f 2>/dev/null | sort || true; }
while read -r dir name; do
  echo "fuzz: $name ($dir) for $fuzztime"
  start=$(date +%s)
  for try in 1 2; do
    before=$(inputs "$dir" "$name")
    if "$go" test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$dir"; then
      break
    fi
    # A failure that wrote no input is Go's fuzzing coordinator missing its
    # own -fuzztime deadline on a loaded machine ("context deadline
    # exceeded", go.dev/issue/75804, fixed in Go 1.27), not a finding: the
    # target runs once more. One that wrote an input fails the run.
    if [ "$(inputs "$dir" "$name")" != "$before" ] || [ "$try" = 2 ]; then
      echo "fuzz: $name failed" >&2
      exit 1
    fi
    echo "fuzz: $name stopped without a failing input (the coordinator's deadline); running it again"
  done
  echo "fuzz: $name done in $(( $(date +%s) - start ))s"
done <<<"$targets"
