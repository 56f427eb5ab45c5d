#!/usr/bin/env bash
# Compares the CPU that stall_exporter's host scrape costs with what
# node_exporter spends on its vmstat (all fields), meminfo, diskstats and
# pressure collectors, on this machine's real /proc.
#
# Method: both exporters run side by side on loopback; each gets 20 warm-up
# scrapes, then N (default 1000) sequential scrapes. CPU is the process's own
# utime+stime from /proc/<pid>/stat (clock ticks, converted to ms) before and
# after the N scrapes, so the scraper's cost is not counted. RSS is VmRSS of
# stall_exporter after the scrapes. The node_exporter binary is not part of
# the repository: install it with
#   GOBIN=/tmp/nebin go install github.com/prometheus/node_exporter@v1.10.2
# and pass its path as NODE_EXPORTER (default /tmp/nebin/node_exporter).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-1000}
NODE_EXPORTER=${NODE_EXPORTER:-/tmp/nebin/node_exporter}
OURS_PORT=${OURS_PORT:-29190}
NODE_PORT=${NODE_PORT:-29191}
[ -x "$NODE_EXPORTER" ] || { echo "node_exporter not found at $NODE_EXPORTER (see the header of this script)" >&2; exit 1; }
make -s build >/dev/null
hz=$(getconf CLK_TCK)

disable=()
for c in $(./stall_exporter --help 2>&1 | grep -o -- '--\[no-\]collector\.[a-z_]*' | sed 's/--\[no-\]collector\.//'); do
  case "$c" in
    vmstat|sysctl|zoneinfo|meminfo|pressure|diskstats) ;;
    *) disable+=("--no-collector.$c") ;;
  esac
done
./stall_exporter --web.listen-address=127.0.0.1:$OURS_PORT "${disable[@]}" --log.level=error &
ours=$!
"$NODE_EXPORTER" --web.listen-address=127.0.0.1:$NODE_PORT --collector.disable-defaults \
  --collector.vmstat --collector.vmstat.fields='.*' --collector.meminfo --collector.diskstats \
  --collector.pressure --log.level=error &
node=$!
trap 'kill $ours $node 2>/dev/null || true' EXIT
sleep 1

cpu_ms() { awk -v hz="$hz" '{print ($14+$15)*1000/hz}' "/proc/$1/stat"; }
scrape_n() { for ((i = 0; i < $2; i++)); do curl -s -o /dev/null "http://127.0.0.1:$1/metrics"; done; }

for p in $OURS_PORT $NODE_PORT; do scrape_n $p 20; done
o0=$(cpu_ms $ours); scrape_n $OURS_PORT "$N"; o1=$(cpu_ms $ours)
n0=$(cpu_ms $node); scrape_n $NODE_PORT "$N"; n1=$(cpu_ms $node)
rss=$(awk '/VmRSS/ {print $2}' /proc/$ours/status)
series_ours=$(curl -s http://127.0.0.1:$OURS_PORT/metrics | grep -c '^stall_' || true)
series_node=$(curl -s http://127.0.0.1:$NODE_PORT/metrics | grep -c '^node_' || true)
awk -v o0="$o0" -v o1="$o1" -v n0="$n0" -v n1="$n1" -v n="$N" -v rss="$rss" -v so="$series_ours" -v sn="$series_node" 'BEGIN {
  o = o1 - o0; d = n1 - n0
  printf "scrapes: %d each\n", n
  printf "stall_exporter host collectors: %.0f ms CPU (%.3f ms/scrape), %d stall_ series, RSS %.1f MiB\n", o, o / n, so, rss / 1024
  printf "node_exporter vmstat(all)+meminfo+diskstats+pressure: %.0f ms CPU (%.3f ms/scrape), %d node_ series\n", d, d / n, sn
  printf "ratio stall/node: %.2f\n", (d > 0 ? o / d : 0)
}'
