#!/usr/bin/env bash
# The test run of `make test` and `make test-short`: `go test -json` with the flags given, over the
# exporter's module and, side by side, tools/, each shown as go test prints it (internal/testsummary
# stream); with FUZZ=1 (make test), once they passed, the fuzz step (make fuzz); at the end one summary
# of all of it (internal/testsummary report): the tests skipped and why, the tests not run because
# they change the host, the failures, and the closing line `N passed, N failed, N skipped`.
# Exits non-zero when anything failed: a test, a build, vet, the race detector, a fuzz target.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$GO" build -o "$dir/testsummary" ./internal/testsummary || exit 1

# module NAME DIR FLAGS...: go test over the module in DIR, its events kept in $dir/NAME.json.
module() {
  local name=$1 d=$2
  shift 2
  (cd "$d" && "$GO" test -json "$@" ./... 2>&1) | "$dir/testsummary" stream "$dir/$name.json"
}
module exporter . "$@" &
exporter=$!
module tools tools "$@"
tools=$?
wait "$exporter"
exporter=$?
status=0
if [ "$exporter" -ne 0 ] || [ "$tools" -ne 0 ]; then
  status=1
fi
runs=("$dir/exporter.json" "$dir/tools.json")
if [ "$status" -eq 0 ] && [ "${FUZZ:-}" = 1 ]; then
  "${MAKE:-make}" --no-print-directory fuzz FUZZFLAGS=-json 2>&1 | "$dir/testsummary" stream "$dir/fuzz.json" || status=1
  runs+=("$dir/fuzz.json")
fi
"$dir/testsummary" report "${runs[@]}" || status=1
exit "$status"
