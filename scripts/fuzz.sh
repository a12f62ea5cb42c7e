#!/usr/bin/env bash
# fuzz.sh runs every native Go fuzz target of the module for a bounded
# time each (the first argument, e.g. 3s or 2m). Each target's seed corpus
# in testdata/fuzz also runs as a plain test in `go test`.
set -euo pipefail
t=${1:-3s}
count=0
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo "fuzz: $pkg $target for $t"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$t" "$pkg" >/tmp/fuzz.$$.log 2>&1 || { cat /tmp/fuzz.$$.log; rm -f /tmp/fuzz.$$.log; exit 1; }
    count=$((count+1))
  done
done
rm -f /tmp/fuzz.$$.log
echo "fuzz: $count targets ran for $t each, no failures"
