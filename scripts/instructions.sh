#!/usr/bin/env bash
# Counts the user-space instructions one iteration of a Go benchmark
# executes, with valgrind's callgrind: unlike wall or CPU time, the count
# does not change when other processes load the machine, so code-level
# comparisons (before/after a change) can be made on a busy machine.
#
#   scripts/instructions.sh 'HTTPScrape/host/gzip' [package] [N1 N2]
#
# It runs the benchmark with -test.benchtime=N1x and N2x (default 50 and
# 250) and prints (count(N2) - count(N1)) / (N2 - N1), so start-up and the
# benchmark's own set-up cancel out. GOMAXPROCS=1 (the exporter's default)
# keeps idle Ps from spinning, which would add a variable count;
# asyncpreemptoff and cpu.rdtscp=off avoid a signal and an instruction
# valgrind 3.19 does not handle. Kernel work (generating /proc files) is not
# counted. Repeated runs agree within about 2 %.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=${1:?benchmark regexp}
pkg=${2:-.}
n1=${3:-50}
n2=${4:-250}
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
bin=$(mktemp)
trap 'rm -f "$bin"' EXIT
go test -c -o "$bin" "$pkg"
count() {
  GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off valgrind --tool=callgrind --callgrind-out-file=/dev/null \
    "$bin" -test.run '^$' -test.bench "$bench" -test.benchtime "${1}x" 2>&1 | awk '/Collected/ {print $4}'
}
a=$(count "$n1")
b=$(count "$n2")
echo "$bench: $(((b - a) / (n2 - n1))) instructions/op"
