#!/bin/sh
# Runs every fuzz target of the module for FUZZTIME each (default 4s): the
# short pass CI runs after the tests (the seed corpora already run in
# `go test ./...`). `make fuzz FUZZTIME=60s` runs the long one.
set -eu
cd "$(dirname "$0")/.."
FUZZTIME="${FUZZTIME:-4s}"
for pkg in $(go list ./...); do
  for f in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo "== fuzz $pkg $f ($FUZZTIME)"
    go test -run '^$' -fuzz "^$f\$" -fuzztime "$FUZZTIME" "$pkg" >/tmp/termivar-fuzz.log 2>&1 || { cat /tmp/termivar-fuzz.log; exit 1; }
    grep -E '^(ok|PASS|fuzz: elapsed)' /tmp/termivar-fuzz.log | tail -n 2
  done
done
