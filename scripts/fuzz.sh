#!/usr/bin/env bash
# fuzz.sh runs every native Go fuzz target of the module for a bounded
# time each (the first argument, e.g. 3s or 2m). Each target's seed corpus
# in testdata/fuzz also runs as a plain test in `go test`.
#
# On a busy machine the fuzzing engine can run out of its time budget
# before its workers start ("context deadline exceeded") without having
# found anything; such a run is tried once more. A real failure (an input
# that fails the target, written under testdata/fuzz) is never retried.
set -euo pipefail
t=${1:-3s}
count=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo "fuzz: $pkg $target for $t"
    for try in 1 2; do
      if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$t" "$pkg" >"$log" 2>&1; then
        break
      fi
      if [ "$try" = 1 ] && grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log"; then
        echo "fuzz: $target: the engine ran out of time before fuzzing (busy machine); trying again"
        continue
      fi
      cat "$log"
      exit 1
    done
    count=$((count+1))
  done
done
echo "fuzz: $count targets ran for $t each, no failures"
