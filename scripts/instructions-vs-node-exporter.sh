#!/usr/bin/env bash
# Counts the user-space instructions a whole exporter process executes per
# scrape, for stall_exporter and node_exporter with every collector
# disabled (HTTP, negotiation, encoding, gzip, the Go and process
# self-metrics, the runtime's scheduler and garbage collector): the fixed
# cost of a scrape, as scripts/compare-node-exporter.sh's "no-collector
# process" measures it in CPU time, but without the noise of a shared
# machine. Kernel work (generating the /proc files both read, sockets) is
# not counted; the CPU-time comparison includes it.
#
#   scripts/instructions-vs-node-exporter.sh [N1 N2]
#
# Each process runs under valgrind's callgrind with GOMAXPROCS=1 (both
# exporters' default) and serves N1 (default 50), then, in a second run,
# N2 (250) scrapes over one keep-alive connection with the headers
# Prometheus 2.x sends (gzip on); the count is dumped with callgrind_control
# before the process is killed, and the script prints
# (count(N2) - count(N1)) / (N2 - N1) for each, so start-up cancels out.
# The environment passes through to both processes (GOGC=50 compares both
# at another setting).
# node_exporter as in compare-node-exporter.sh (NODE_EXPORTER overrides
# /tmp/nebin/node_exporter). The processes listen on 127.0.0.1:BASE_PORT
# (default 39390), one at a time.
set -euo pipefail
shopt -s inherit_errexit # a failure inside $(...) ends the script
cd "$(dirname "$0")/.."
n1=${1:-50}
n2=${2:-250}
NODE_EXPORTER=${NODE_EXPORTER:-/tmp/nebin/node_exporter}
[ -x "$NODE_EXPORTER" ] || { echo "node_exporter not found at $NODE_EXPORTER (see scripts/compare-node-exporter.sh)" >&2; exit 1; }
command -v callgrind_control >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
make -s build >/dev/null

work=$(mktemp -d)
vp=
cleanup() {
  [ -n "$vp" ] && kill -KILL "$vp" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

hdr=(-H 'Accept: application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1'
  -H 'X-Prometheus-Scrape-Timeout-Seconds: 10' -H 'Accept-Encoding: gzip')
port=${BASE_PORT:-39390}

# fail ends count: it runs in a command substitution, whose exit does not
# run the script's trap, so the process is killed here.
fail() {
  echo "$1; its log:" >&2
  cat "$work/valgrind.log" >&2
  kill -KILL "$vp" 2>/dev/null || true
  exit 1
}

count() { # scrapes cmd...: instructions of the process after start-up and that many scrapes
  local n=$1 out=$work/callgrind.out args=() i
  shift
  rm -f "$out"*
  # asyncpreemptoff and cpu.rdtscp=off avoid a signal and an instruction
  # valgrind 3.19 does not handle (as in scripts/instructions.sh).
  GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off valgrind --tool=callgrind --callgrind-out-file="$out" \
    "$@" --web.listen-address="127.0.0.1:$port" --log.level=error >"$work/valgrind.log" 2>&1 &
  vp=$!
  for ((i = 0; i < 300; i++)); do
    curl -s -o /dev/null "http://127.0.0.1:$port/" && break
    kill -0 "$vp" 2>/dev/null || fail "$1 exited"
    sleep 0.2
  done
  ((i < 300)) || fail "$1 does not answer on port $port"
  for ((i = 0; i < n; i++)); do args+=(-o /dev/null "http://127.0.0.1:$port/metrics"); done
  curl -sSf "${hdr[@]}" "${args[@]}" 2>/dev/null || fail "scraping $1 failed"
  # A dump, not an exit: the exporter's signal handling trips callgrind.
  callgrind_control -d "$vp" >/dev/null 2>&1
  kill -KILL "$vp"
  wait "$vp" 2>/dev/null || true
  vp=
  awk '/^(summary|totals):/ {print $2; exit}' "$out".*
}

per_scrape() { # cmd...: instructions per scrape
  local a b
  a=$(count "$n1" "$@")
  b=$(count "$n2" "$@")
  echo $(((b - a) / (n2 - n1)))
}

off=()
for c in $(./stall_exporter --help 2>&1 | grep -o -- '--\[no-\]collector\.[a-z_]*' | sed 's/--\[no-\]collector\.//'); do
  off+=("--no-collector.$c")
done
stall=$(per_scrape ./stall_exporter "${off[@]}")
node=$(per_scrape "$NODE_EXPORTER" --collector.disable-defaults)
printf 'stall_exporter, no collector: %9d instructions/scrape\n' "$stall"
printf 'node_exporter, no collector:  %9d instructions/scrape\n' "$node"
awk -v s="$stall" -v n="$node" 'BEGIN {printf "ratio stall/node, no-collector process (user space): %.2f\n", s / n}'
